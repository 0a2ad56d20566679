#!/usr/bin/env bash
# kubeadm suite, IPv6 single-stack and dual-stack: the kubeadm quick start
# of kubeadm.sh with a cluster of another family, made and checked the same
# way (private mount and network namespaces, images built offline, kubelet
# started by the systemctl stand-in; see kubeadm.sh and kubeadm-lib.sh).
# E2E_IP_FAMILY chooses:
#
#   ipv6   the node's address, the API server's advertise address, the
#          Service range and the pool are IPv6 only; `eni-cni install
#          --ip-families ipv6` with a static IPv6 pool
#   dual   the node has both families (kubelet --node-ip both), the Service
#          range both (IPv4 first), `eni-cni install --ip-families ipv4,ipv6`
#          with a range of each: each pod gets one address of each family
#   dual6  dual-stack with IPv6 the primary family: everything listed IPv6
#          first (advertise address, --node-ip, Services, --ip-families)
#
# No --pod-network-cidr (podSubnet): eni-cni's pool is its own. Each case is
# a named check that fails the run when broken:
#
#   kubeadm-init                 kubeadm init --config exits 0
#   node-notready-without-cni    the node registers NotReady, with its InternalIPs of the
#                                cluster's families
#   eni-cni-install              eni-cni install --pool static --ip-families ... exits 0
#   node-ready                   the node goes Ready
#   addons-ready                 kube-proxy Running in iptables mode with the Services in
#                                ip6tables (and iptables in dual); CoreDNS Ready (synced
#                                with the API server through the kubernetes Service) on pool
#                                addresses of the families in the configured order
#   pods-run                     two pods Running; status.podIPs lists the families in the
#                                configured order, all from the pool; eni-cni list has them
#   pod-to-pod-<family>          pod A reaches pod B's address of each family (HTTP; B sees
#                                A's own address: no NAT)
#   api-service-<family>         pod A reaches the API server through a Service ClusterIP of
#                                each family (`kubernetes`'s, single-stack in the primary
#                                family; dual: both of api-dual, a RequireDualStack Service on
#                                the API server)
#   dns-<family>                 a pod resolves through CoreDNS's Service of each family
#                                (its own resolver: A and AAAA lookups): kubernetes.default is
#                                the primary family's ClusterIP alone, the dual Service has
#                                both; web-a asks kube-dns (primary), web-b kube-dns-<other>,
#                                a Service of the other family on the CoreDNS pods
#   kubectl-delete-frees-address the pods deleted: every address of both, their veths,
#                                routes and rules freed
#   kubeadm-reset                kubeadm reset -f: kubelet stopped, every pod gone, every
#                                eni-cni address freed
#   eni-cni-uninstall            conflist and binary gone
#   teardown-leaves-nothing      no shim, mount, netns, cgroup, link, route or rule left
#   host-untouched               (outside) this machine's node paths and sysctls as found
#   selftest-NAME                (KUBEADM6_SELFTEST=1) the node's routes to some pods'
#                                addresses of one family taken away: that family's
#                                pod-to-pod (web-b's), api-service (web-a's) or dns (the
#                                CoreDNS pods') check fails, the other family's passes; the
#                                routes put back, it passes again
#
# The IPv6 sysctls kubeadm's preflight wants (IPv6 forwarding) and the
# ip6tables rules kube-proxy writes are those of the private network
# namespace: the host's are never touched.
#
# Usage: E2E_IP_FAMILY=ipv6|dual|dual6 scripts/e2e/kubeadm6.sh /abs/path/to/bin/eni-cni
# (or scripts/e2e/kubeadm.sh, which comes here for those families;
# `make test-kubeadm E2E_IP_FAMILY=...`). Env: E2E_KEEP_RUN=1 keeps the run dir;
# KUBEADM6_SELFTEST=1 adds the self-tests (`make test` sets it on the dual run).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
# shellcheck source-path=SCRIPTDIR source=kubelet-lib.sh
. "$here/kubelet-lib.sh"
# shellcheck source-path=SCRIPTDIR source=kubeadm-lib.sh
. "$here/kubeadm-lib.sh"

ENI_BIN=$(realpath "${1:?usage: E2E_IP_FAMILY=ipv6|dual|dual6 kubeadm6.sh /path/to/eni-cni}")
MODE=${E2E_IP_FAMILY:-ipv6}
NODE=kadm-node
NODE_IP4=10.199.0.10 NODE_GW4=10.199.0.1 # the gateways never answer: nothing leaves
NODE_IP6=fd00:199::10 NODE_GW6=fd00:199::1
POOL4=10.199.1.10-10.199.1.29 POOL4_RE='^10\.199\.1\.'
POOL6=fd00:199:1::10-fd00:199:1::29 POOL6_RE='^fd00:199:1::'
SVC4=10.96.0.0/16 SVC6=fd00:10:96::/112
case $MODE in
ipv6) FAMILIES=(ipv6) ;;
dual) FAMILIES=(ipv4 ipv6) ;;
dual6) FAMILIES=(ipv6 ipv4) ;;
*) echo "kubeadm6: E2E_IP_FAMILY=$MODE: want ipv6, dual or dual6 (ipv4 is kubeadm.sh)" >&2 && exit 2 ;;
esac
# The cluster's primary family (the first): the kubernetes and kube-dns
# Services are single-stack in it; SECONDARY is the other one, if any.
PRIMARY=${FAMILIES[0]} SECONDARY=${FAMILIES[1]:-}

say() { printf 'kubeadm6-e2e[%s]: %s\n' "$MODE" "$*"; }

# ------------------------------------------------------------------ outside
[ "${KADM_INNER:-0}" = 1 ] || kadm_outside KADM_INNER "$0" "$@"

# ------------------------------------------------------------------ inside
export KUBECONFIG=/etc/kubernetes/admin.conf
KEEP_RUN=${E2E_KEEP_RUN:-0}

k() { "$KUBECTL" "$@"; }
eni() { /opt/cni/bin/eni-cni "$@"; }
alloc_json() { eni list --json; }

diagnostics() {
	[ -n "${E2E_RUN:-}" ] && [ -d "$E2E_RUN" ] || return 0
	echo "--- kubeadm (last 20)"
	tail -n 20 "$E2E_RUN/logs/kubeadm-init.log" 2>/dev/null
	echo "--- kubelet errors (last 20)"
	grep -E '^E[0-9]{4}' "$E2E_RUN/logs/kubelet.log" 2>/dev/null | tail -n 20
	echo "--- nodes, pods, services"
	k get nodes -o wide 2>&1 | head
	k get pods -A -o wide 2>&1 | head -20
	k get svc -A 2>&1 | head
	echo "--- sandboxes and containers"
	e2e_crictl pods 2>&1 | head -20
	e2e_crictl ps -a 2>&1 | head -20
}

cleanup() {
	local rc=$?
	trap - EXIT
	set +e
	kadm_stop_kubelet
	E2E_KEEP_RUN=1 e2e_cleanup 2>/dev/null
	kadm_unmount_overlays
	if [ "$KEEP_RUN" = 1 ]; then
		say "kept run dir $E2E_RUN"
	else
		rm -rf "$E2E_RUN"
	fi
	exit "$rc"
}

has() { [[ " ${FAMILIES[*]} " == *" $1 "* ]]; }

# The node's addresses, the pool, the Service ranges: the families' own,
# listed in the configured order (kubeadm and kubelet take the first as the
# cluster's primary family).
join_fam() {
	local v4=$1 v6=$2 out=() f
	for f in "${FAMILIES[@]}"; do
		if [ "$f" = ipv4 ]; then out+=("$v4"); else out+=("$v6"); fi
	done
	local IFS=,
	echo "${out[*]}"
}
NODE_IPS=$(join_fam "$NODE_IP4" "$NODE_IP6")
ADVERTISE=${NODE_IPS%%,*}
POOL_RANGES=$(join_fam "$POOL4" "$POOL6")
SVC_SUBNETS=$(join_fam "$SVC4" "$SVC6")
IP_FAMILIES=$(join_fam ipv4 ipv6)

# node_network: lo, eth0 with the node's addresses and default routes of its
# families (eth0's veth peer stays here, without an address: no gateway
# answers). IPv6 forwarding as kubeadm's preflight wants it: this
# namespace's own sysctls.
node_network() {
	ip link set lo up
	ip link add eth0 type veth peer name eth0-peer
	has ipv4 && ip addr add "$NODE_IP4/24" dev eth0
	ip addr add "$NODE_IP6/64" dev eth0 nodad
	ip link set eth0 up
	ip link set eth0-peer up
	has ipv4 && ip route add default via "$NODE_GW4" dev eth0
	ip -6 route add default via "$NODE_GW6" dev eth0
	sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 net.ipv6.conf.default.forwarding=1
	printf '%s %s\n' "$ADVERTISE" "$NODE" >>/etc/hosts
}

write_kubeadm_config() {
	cat >"$E2E_RUN/kubeadm.yaml" <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: $ADVERTISE
  bindPort: 6443
nodeRegistration:
  name: $NODE
  criSocket: $E2E_ENDPOINT
  kubeletExtraArgs:
  - name: node-ip
    value: $NODE_IPS
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $KUBE_VER
clusterName: eni-cni-kubeadm6
imageRepository: $REPO
# No podSubnet: eni-cni's pool is its own (no --pod-network-cidr).
networking:
  serviceSubnet: $SVC_SUBNETS
EOF
	kadm_kubelet_config 20 >>"$E2E_RUN/kubeadm.yaml"
}

# fam_of IP: ipv4 or ipv6.
fam_of() { if [[ $1 == *:* ]]; then echo ipv6; else echo ipv4; fi; }
pool_re() { if [ "$1" = ipv4 ]; then echo "$POOL4_RE"; else echo "$POOL6_RE"; fi; }
url_host() { if [[ $1 == *:* ]]; then echo "[$1]"; else echo "$1"; fi; }

# check_pod_ips WHAT IP...: one address per configured family, in order,
# each from its pool.
check_pod_ips() {
	local what=$1 i ip f
	shift
	local ips=("$@")
	[ ${#ips[@]} = ${#FAMILIES[@]} ] || fail "$what has addresses '$*', want one of each of ${FAMILIES[*]}"
	for ((i = 0; i < ${#ips[@]}; i++)); do
		ip=${ips[i]} f=${FAMILIES[i]}
		[ "$(fam_of "$ip")" = "$f" ] || fail "$what: address $((i + 1)) is $ip, want $f (order ${FAMILIES[*]})"
		[[ $ip =~ $(pool_re "$f") ]] || fail "$what: $ip is not from the $f pool"
	done
}

pod_ips() { k get pod "$1" -o jsonpath='{.status.podIPs[*].ip}' 2>/dev/null; }
pod_ready() { [ "$(k get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; }
pod_gone() { ! k get pod "$1" >/dev/null 2>&1; }
allocated() { alloc_json | jq -r '.allocations[] | .ip, (.ip6 // empty)'; }
ip_free() { ! allocated | grep -qxF "$1"; }

# pod_sandbox POD: the ID of the pod's ready sandbox.
pod_sandbox() {
	local id
	id=$(e2e_crictl pods --name "^$1\$" --namespace default --state ready -q | head -n 1)
	[ -n "$id" ] && echo "$id"
}

# sandbox_netns ID: the network namespace of a sandbox.
sandbox_netns() {
	e2e_crictl inspectp -o json "$1" | jq -r '.info.runtimeSpec.linux.namespaces[] | select(.type == "network") | .path'
}

# result_ips ID: the addresses of eni-cni's CNI result for the sandbox, in
# the result's order (libcni's cache of the ADD result).
result_ips() {
	jq -r '.result.ips[].address | sub("/[0-9]+$"; "")' "/var/lib/cni/results/pods-$1-eth0" | xargs
}

# in_pod POD CMD...: CMD in the pod's network namespace (the pod's own
# routes, addresses and path through the node).
in_pod() {
	local p=$1
	shift
	nsenter --net="${NETNS[$p]}" -- "$@"
}

# web_pod NAME [NAMESERVER]: a web pod; with NAMESERVER, its resolver asks
# that address only (dnsPolicy None, the cluster's search path).
web_pod() {
	local dns=""
	[ -z "${2:-}" ] || dns="  dnsPolicy: None
  dnsConfig:
    nameservers: [\"$2\"]
    searches: [default.svc.cluster.local, svc.cluster.local, cluster.local]
    options: [{name: ndots, value: \"5\"}]"
	k apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: {app: web6}}
spec:
  containers:
  - name: web
    image: $WEB_IMAGE
    imagePullPolicy: Never
    ports: [{containerPort: 8080}]
$dns
EOF
}

# resolve POD NAME: the addresses the pod's own resolver finds (the web's
# /resolve: Go's resolver asks A and AAAA), sorted, space-separated.
resolve() {
	local ip=${POD_IP[$1]%% *} reply
	reply=$(curl -g -sf --max-time 15 "http://$(url_host "$ip"):8080/resolve?name=$2") || return 1
	tr ' ' '\n' <<<"$reply" | sort | xargs
}

k8s_family() { if [ "$1" = ipv4 ]; then echo IPv4; else echo IPv6; fi; }
svc_ips() { k get svc -n "$1" "$2" -o jsonpath='{.spec.clusterIPs[*]}' 2>/dev/null; }
svc_ip_of() {
	local ip
	for ip in $(svc_ips "$1" "$2"); do [ "$(fam_of "$ip")" = "$3" ] && echo "$ip"; done
	return 0
}

trap cleanup EXIT
kadm_node_setup
node_network
kadm_node_runtime
write_kubeadm_config
say "run dir $E2E_RUN; node $NODE at $NODE_IPS (private netns); Services $SVC_SUBNETS; pool $POOL_RANGES"
say "$(kubeadm version -o short), $("$KL_BIN" --version), images imported in ${E2E_TIME_IMPORT}s"

# ------------------------------------------------------------------ cases

begin kubeadm-init
t0=$EPOCHREALTIME
kubeadm init --config "$E2E_RUN/kubeadm.yaml" \
	>"$E2E_RUN/logs/kubeadm-init.log" 2>&1 || fail "kubeadm init failed (exit $?)"
INIT_S=$(e2e_since "$t0")
grep -E '^W[0-9]{4}|\[(WARNING|ERROR) |successfully' "$E2E_RUN/logs/kubeadm-init.log" | sed 's/^/  | /'
pass "control plane up in ${INIT_S}s, advertised on $ADVERTISE"

begin node-notready-without-cni
show k get nodes -o wide
! node_ready "$NODE" || fail "node Ready before any CNI was installed"
got=$(k get node "$NODE" -o jsonpath='{range .status.addresses[?(@.type=="InternalIP")]}{.address}{","}{end}')
[ "${got%,}" = "$NODE_IPS" ] || fail "node InternalIPs '${got%,}', want $NODE_IPS (kubelet --node-ip)"
pass "NotReady without a CNI; InternalIPs $NODE_IPS"

begin eni-cni-install
install -m 0755 "$ENI_BIN" "$E2E_RUN/eni-cni"
show "$E2E_RUN/eni-cni" install --pool static --ip-families "$IP_FAMILIES" --ranges "$POOL_RANGES" --mtu 1500 ||
	fail "eni-cni install failed"
[ -x /opt/cni/bin/eni-cni ] && [ -s /etc/cni/net.d/10-eni-cni.conflist ] || fail "binary or conflist not installed"
got=$(jq -c '.plugins[0].ipFamilies' /etc/cni/net.d/10-eni-cni.conflist)
[ "$got" = "$(jq -cn --arg f "$IP_FAMILIES" '$f | split(",")')" ] || fail "conflist ipFamilies $got, want $IP_FAMILIES"
pass "binary and conflist (ipFamilies $got) in place"

begin node-ready
t0=$EPOCHREALTIME
wait_for 90 node_ready "$NODE" || fail "node not Ready 90 s after eni-cni install"
READY_S=$(e2e_since "$t0")
pass "Ready ${READY_S}s after eni-cni install"

saver() { if [ "$1" = ipv4 ]; then echo iptables-save; else echo ip6tables-save; fi; }

# kube_services_in TOOL SVCIP: kube-proxy's rules for a ClusterIP in
# iptables (TOOL iptables-save) or ip6tables (ip6tables-save).
kube_services_in() {
	local rules
	rules=$("$1" -t nat 2>/dev/null) || return 1
	grep -q -- "-A KUBE-SERVICES -d $2/" <<<"$rules"
}

begin addons-ready
t0=$EPOCHREALTIME
wait_for 120 addons_ready || fail "kube-proxy or CoreDNS not Ready within 120 s"
ADDONS_S=$(e2e_since "$t0")
show k get pods -n kube-system -o wide
# kube-proxy's metrics listener is on the loopback of the primary family.
mode=$(curl -s --max-time 5 http://127.0.0.1:10249/proxyMode || curl -g -s --max-time 5 'http://[::1]:10249/proxyMode') ||
	fail "kube-proxy's /proxyMode did not answer (127.0.0.1 nor [::1])"
[ "$mode" = iptables ] || fail "kube-proxy runs in '$mode' mode, want iptables"
API=$(svc_ips default kubernetes) DNS=$(svc_ips kube-system kube-dns)
[ "$(fam_of "$API")" = "$PRIMARY" ] && [[ $API != *" "* ]] ||
	fail "kubernetes Service has ClusterIPs '$API', want one of the primary family $PRIMARY"
[ "$(fam_of "$DNS")" = "$PRIMARY" ] && [[ $DNS != *" "* ]] ||
	fail "kube-dns Service has ClusterIPs '$DNS', want one of the primary family $PRIMARY"
wait_for 10 kube_services_in "$(saver "$PRIMARY")" "$API" || fail "no $(saver "$PRIMARY") KUBE-SERVICES rule for the kubernetes Service $API"
rules="$(saver "$PRIMARY" | sed 's/-save//') ($API)"
if [ -n "$SECONDARY" ]; then
	grep -q -- '-A KUBE-SERVICES' <<<"$("$(saver "$SECONDARY")" -t nat)" ||
		fail "no KUBE-SERVICES chain in $(saver "$SECONDARY"): kube-proxy is not dual-stack"
	rules+=" and $(saver "$SECONDARY" | sed 's/-save//')"
fi
for p in $(k get pods -n kube-system -l k8s-app=kube-dns -o jsonpath='{.items[*].metadata.name}'); do
	# shellcheck disable=SC2046 # one word per address
	check_pod_ips "CoreDNS pod $p" $(k get pod -n kube-system "$p" -o jsonpath='{.status.podIPs[*].ip}')
done
pass "${ADDONS_S}s; kube-proxy in iptables mode, the Services in $rules; CoreDNS Ready on $(k get pods -n kube-system -l k8s-app=kube-dns -o jsonpath='{.items[*].status.podIPs[*].ip}')"

begin pods-run
show k taint nodes --all node-role.kubernetes.io/control-plane- || fail "kubectl taint failed"
declare -A POD_IP NETNS RESOLVER ASKER DUAL
# Who asks CoreDNS over which family: web-a through kube-dns (primary).
RESOLVER[$PRIMARY]=$DNS ASKER[$PRIMARY]=web-a
if [ -n "$SECONDARY" ]; then
	# CoreDNS over the other family too: a Service of that family on the
	# CoreDNS pods (kube-dns is single-stack), which web-b alone asks.
	k apply -f - >/dev/null <<EOF || fail "creating Service kube-dns-$SECONDARY failed"
apiVersion: v1
kind: Service
metadata: {name: kube-dns-$SECONDARY, namespace: kube-system}
spec:
  ipFamilyPolicy: SingleStack
  ipFamilies: [$(k8s_family "$SECONDARY")]
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
EOF
	RESOLVER[$SECONDARY]=$(svc_ip_of kube-system "kube-dns-$SECONDARY" "$SECONDARY") ASKER[$SECONDARY]=web-b
	[ -n "${RESOLVER[$SECONDARY]}" ] || fail "Service kube-dns-$SECONDARY got no $SECONDARY ClusterIP ($(svc_ips kube-system "kube-dns-$SECONDARY"))"
	# Both families' Services to the API server.
	k apply -f - >/dev/null <<EOF || fail "creating Service api-dual failed"
apiVersion: v1
kind: Service
metadata: {name: api-dual, namespace: kube-system}
spec:
  ipFamilyPolicy: RequireDualStack
  ipFamilies: [$(k8s_family "$PRIMARY"), $(k8s_family "$SECONDARY")]
  selector: {component: kube-apiserver, tier: control-plane}
  ports: [{name: https, port: 443, protocol: TCP, targetPort: 6443}]
EOF
fi
t0=$EPOCHREALTIME
show web_pod web-a || fail "creating pod web-a failed"
show web_pod web-b "${SECONDARY:+${RESOLVER[$SECONDARY]}}" || fail "creating pod web-b failed"
for p in web-a web-b; do
	wait_for 120 pod_ready "$p" || fail "pod $p not Ready within 120 s"
done
POD_S=$(e2e_since "$t0")
show k get pods -o wide
LIST=$(alloc_json)
for p in web-a web-b; do
	POD_IP[$p]=$(pod_ips "$p")
	# shellcheck disable=SC2086 # one word per address
	check_pod_ips "pod $p (status.podIPs)" ${POD_IP[$p]}
	[ "$(k get pod "$p" -o jsonpath='{.status.podIP}')" = "${POD_IP[$p]%% *}" ] || fail "$p: status.podIP is not the first of podIPs"
	# eni-cni list names the addresses by family (ip, ip6), in no order.
	got=$(jq -r --arg ns default --arg p "$p" '.allocations[] | select(.podNamespace == $ns and .podName == $p) | .ip, (.ip6 // empty)' <<<"$LIST" | sort | xargs)
	[ "$got" = "$(xargs -n1 <<<"${POD_IP[$p]}" | sort | xargs)" ] || fail "eni-cni list has '$got' for default/$p, want ${POD_IP[$p]}"
	id=$(pod_sandbox "$p") || fail "no ready sandbox for $p"
	NETNS[$p]=$(sandbox_netns "$id") || fail "no netns for $p's sandbox $id"
	# The CNI result's own order: the configured one (kubelet orders
	# status.podIPs by the node's primary family whatever the result says).
	got=$(result_ips "$id") || fail "no cached CNI result for $p's sandbox $id"
	[ "$got" = "${POD_IP[$p]}" ] || fail "$p's CNI result lists $got, want ${POD_IP[$p]} (ipFamilies $IP_FAMILIES)"
done
show eni list
pass "both Running ${POD_S}s after creation; podIPs web-a ${POD_IP[web-a]}, web-b ${POD_IP[web-b]} (order ${FAMILIES[*]}); the CNI results and eni-cni list agree"

# addr_of POD FAMILY: the pod's address of that family.
addr_of() {
	local ip
	for ip in ${POD_IP[$1]}; do [ "$(fam_of "$ip")" = "$2" ] && echo "$ip"; done
	return 0
}

# The checks per family: each fails the run (fail) when broken, and sets
# MSG for pass. KUBEADM6_SELFTEST runs them again in subshells.

# check_pod_to_pod F: web-a -> web-b's address of family F; web-b sees
# web-a's own address (no NAT).
check_pod_to_pod() {
	local a b reply host client
	a=$(addr_of web-a "$1") b=$(addr_of web-b "$1")
	reply=$(in_pod web-a curl -g -s --max-time 5 "http://$(url_host "$b"):8080/") || fail "web-a ($a) -> web-b ($b): no answer"
	say "  web-a -> http://$(url_host "$b"):8080/ -> $reply"
	read -r host _ client <<<"$reply"
	client=${client%:*} client=${client#[} client=${client%]}
	[ "$host" = web-b ] || fail "answer from '$host', want web-b"
	[ "$client" = "$a" ] || fail "web-b saw the client as $client, want web-a's own $a"
	MSG="web-a $a reaches web-b $b; web-b sees $a"
}

# api_from_pod IP: the API server's /version through IP:443, from web-a.
api_from_pod() {
	local reply
	reply=$(in_pod web-a curl -g -sk --max-time 5 "https://$(url_host "$1"):443/version") || fail "web-a -> https://$(url_host "$1"):443: no answer"
	[ "$(jq -r .gitVersion <<<"$reply" 2>/dev/null)" = "$KUBE_VER" ] || fail "https://$(url_host "$1")/version answered: $reply"
}

# check_api_service F: web-a reaches the API server through the Service
# ClusterIPs of family F: the kubernetes Service's (primary family) and,
# in dual-stack, api-dual's of F.
check_api_service() {
	local via=()
	if [ "$1" = "$PRIMARY" ]; then
		api_from_pod "$API"
		via+=("the kubernetes Service's ClusterIP $API")
	fi
	if [ -n "$SECONDARY" ]; then
		api_from_pod "${DUAL[$1]}"
		via+=("api-dual's ${DUAL[$1]} (RequireDualStack: $(svc_ips kube-system api-dual))")
	fi
	MSG="web-a reaches the API server (/version $KUBE_VER) through $(printf '%s and ' "${via[@]}" | sed 's/ and $//')"
}

# check_dns F: a pod resolves through a CoreDNS Service of family F with
# its own resolver (Go's, asking A and AAAA): web-a through kube-dns (the
# primary family, kubelet's clusterDNS), web-b through kube-dns-<secondary>.
# kubernetes.default is the primary family's ClusterIP alone; api-dual (in
# dual-stack) has both.
check_dns() {
	local p=${ASKER[$1]} ns=${RESOLVER[$1]} got want
	if [ "$1" = "$PRIMARY" ]; then
		grep -A3 '^clusterDNS:' /var/lib/kubelet/config.yaml | grep -qxF -- "- $ns" ||
			fail "kubelet's clusterDNS is not kube-dns's ClusterIP $ns: $(grep -A2 clusterDNS /var/lib/kubelet/config.yaml)"
	fi
	got=$(resolve "$p" kubernetes.default.svc.cluster.local) || fail "$p could not resolve kubernetes.default (resolver $ns)"
	[ "$got" = "$API" ] || fail "$p (resolver $ns) resolved kubernetes.default to '$got', want $API alone"
	MSG="$p (resolver $ns, CoreDNS over $1) resolves kubernetes.default to $got alone"
	[ -n "$SECONDARY" ] || return 0
	want=$(printf '%s\n' "${DUAL[@]}" | sort | xargs)
	got=$(resolve "$p" api-dual.kube-system.svc.cluster.local) || fail "$p could not resolve api-dual.kube-system (resolver $ns)"
	[ "$got" = "$want" ] || fail "$p (resolver $ns) resolved api-dual.kube-system to '$got', want $want (A and AAAA)"
	MSG+=" and api-dual.kube-system to $got (A and AAAA)"
}

# KUBEADM6_SELFTEST=1: proof that the checks can fail, and for the family
# they are about: the node's routes to some pods' addresses of one family
# taken away, the check of that family must fail (in dual-stack, the same
# check of the other family must still pass); the routes put back as they
# were, it must pass again.

# selftest NAME CHECK F IP...: NAME is the node's routes to IP... (of F).
selftest() {
	local name=$1 check=$2 f=$3 log=$E2E_RUN/logs/selftest-$1.log ip line other saved=()
	shift 3
	begin "selftest-$name"
	for ip in "$@"; do
		line=$(ip "-${f#ipv}" route show "$ip")
		[ -n "$line" ] || fail "no route to $ip on the node"
		saved+=("$line")
		# shellcheck disable=SC2086 # the route as ip printed it
		ip "-${f#ipv}" route del $line || fail "could not delete the route $line"
	done
	if ("check_${check//-/_}" "$f") >"$log" 2>&1; then
		fail "$check-$f passed without $name"
	fi
	for other in "${FAMILIES[@]}"; do
		[ "$other" = "$f" ] || ("check_${check//-/_}" "$other") >>"$log" 2>&1 ||
			fail "$check-$other failed too without $name (of $f): $(grep -m1 -o 'FAIL .*' "$log")"
	done
	for line in "${saved[@]}"; do
		# shellcheck disable=SC2086
		ip "-${f#ipv}" route replace $line || fail "could not put back the route $line"
	done
	("check_${check//-/_}" "$f") >>"$log" 2>&1 || fail "$check-$f still fails with $name back: $(grep -m1 -o 'FAIL .*' "$log")"
	pass "$check-$f fails without $name ($(grep -m1 -o 'FAIL .*' "$log" | cut -c1-140))$([ ${#FAMILIES[@]} = 1 ] || echo ", the other family's passes"), and passes with them back"
}

selftests() {
	local f dns
	for f in "${FAMILIES[@]}"; do
		selftest "web-b-route-$f" pod-to-pod "$f" "$(addr_of web-b "$f")"
		selftest "web-a-route-$f" api-service "$f" "$(addr_of web-a "$f")"
		dns=$(k get pods -n kube-system -l k8s-app=kube-dns -o jsonpath='{.items[*].status.podIPs[*].ip}' | xargs -n1 | while read -r ip; do
			[ "$(fam_of "$ip")" != "$f" ] || echo "$ip"
		done)
		# shellcheck disable=SC2086 # one word per address
		selftest "coredns-routes-$f" dns "$f" $dns
	done
}

if [ -n "$SECONDARY" ]; then
	api_dual_ready() {
		[ "$(svc_ips kube-system api-dual | wc -w)" = 2 ] &&
			[ "$(k get endpointslices -n kube-system -l kubernetes.io/service-name=api-dual -o jsonpath='{range .items[*]}{.addressType}{" "}{end}' | xargs -n1 | sort | xargs)" = "IPv4 IPv6" ]
	}
	wait_for 30 api_dual_ready || fail "Service api-dual: ClusterIPs '$(svc_ips kube-system api-dual)', endpoint slices $(k get endpointslices -n kube-system -l kubernetes.io/service-name=api-dual -o wide 2>&1)"
	# kube-proxy's rules for it first: a SYN sent before them goes to the
	# default route (nowhere) and curl's retries would hide the wait.
	for f in "${FAMILIES[@]}"; do
		DUAL[$f]=$(svc_ip_of kube-system api-dual "$f")
		wait_for 30 kube_services_in "$(saver "$f")" "${DUAL[$f]}" || fail "no $(saver "$f") KUBE-SERVICES rule for api-dual's ${DUAL[$f]}"
	done
fi
for c in pod-to-pod api-service dns; do
	for f in "${FAMILIES[@]}"; do
		begin "$c-$f"
		"check_${c//-/_}" "$f"
		pass "$MSG"
	done
done

[ "${KUBEADM6_SELFTEST:-0}" != 1 ] || selftests

begin kubectl-delete-frees-address
declare -A VETH
for p in web-a web-b; do
	VETH[$p]=$(alloc_json | jq -r --arg p "$p" '.allocations[] | select(.podName == $p) | .hostVeth')
done
show k delete pod web-a web-b --wait=true --timeout=60s || fail "kubectl delete failed"
for p in web-a web-b; do
	wait_for 30 pod_gone "$p" || fail "pod $p still listed 30 s after kubectl delete"
	for ip in ${POD_IP[$p]}; do
		wait_for 30 ip_free "$ip" || fail "$ip ($p) still allocated 30 s after the pod was deleted"
	done
done
rules=$(ip -4 rule show; ip -6 rule show) routes=$(ip -4 route show; ip -6 route show)
for p in web-a web-b; do
	! ip link show "${VETH[$p]}" >/dev/null 2>&1 || fail "host veth ${VETH[$p]} of $p left"
	for ip in ${POD_IP[$p]}; do
		! grep -qw -- "$ip" <<<"$rules" || fail "rule of $ip left: $(grep -w -- "$ip" <<<"$rules")"
		! grep -qw -- "$ip" <<<"$routes" || fail "route of $ip left: $(grep -w -- "$ip" <<<"$routes")"
	done
done
show eni list
pass "${POD_IP[web-a]} and ${POD_IP[web-b]} freed; veths ${VETH[web-a]} ${VETH[web-b]}, routes and rules gone"

begin kubeadm-reset
kubeadm reset -f --cri-socket "$E2E_ENDPOINT" >"$E2E_RUN/logs/kubeadm-reset.log" 2>&1 || {
	tail -n 20 "$E2E_RUN/logs/kubeadm-reset.log" >&2
	fail "kubeadm reset failed"
}
! kubelet_pid >/dev/null || fail "kubelet still running after kubeadm reset"
[ -z "$(ls -A /etc/kubernetes/manifests 2>/dev/null)" ] || fail "static pod manifests left: $(ls /etc/kubernetes/manifests)"
[ -z "$(e2e_pods)" ] || fail "sandboxes left after kubeadm reset: $(e2e_pods | tr '\n' ' ')"
left=$(alloc_json | jq -r '[.allocations[] | "\(.podNamespace)/\(.podName) \(.ip) \(.ip6 // "")"] | join(", ")')
[ -z "$left" ] || fail "addresses still allocated after every pod was removed: $left"
pass "kubelet stopped, control plane and every pod removed; the CoreDNS pods' addresses freed"

begin eni-cni-uninstall
show eni uninstall || fail "eni-cni uninstall failed"
[ ! -e /etc/cni/net.d/10-eni-cni.conflist ] && [ ! -e /opt/cni/bin/eni-cni ] || fail "conflist or binary left"
pass "conflist and binary removed"

begin teardown-leaves-nothing
e2e_stop || fail "stopping containerd failed"
kl_cleanup_cgroups
e2e_check_clean || fail "left behind (above)"
[ -z "$(ip -o link show | grep -v -E ': (lo|eth0|eth0-peer)[@:]')" ] || fail "links left in the node namespace: $(ip -o link show | cut -d: -f2 | tr '\n' ' ')"
left=$(ip -6 route show | grep -E '^fd00:199:1::' || true)$(ip -4 route show | grep -E '^10\.199\.1\.' || true)
[ -z "$left" ] || fail "pod routes left: $left"
left=$(ip -6 rule show | grep -v -E '^(0|32766):' || true)$(ip -4 rule show | grep -v -E '^(0|32766|32767):' || true)
[ -z "$left" ] || fail "rules left: $left"
pass "containerd stopped; no shim, sandbox, mount, netns, cgroup, link, pod route or rule left"

say "kubeadm init ${INIT_S}s; node Ready ${READY_S}s after eni-cni install; addons ${ADDONS_S}s; pods Running ${POD_S}s"
