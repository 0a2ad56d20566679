#!/usr/bin/env bash
# cluster suite: a multi-node kubeadm cluster on the ec2 pool, its nodes
# joined through a simulated VPC, run for real on this machine, offline.
# `kubeadm init` on node 1, `kubeadm join` on the others, kube-proxy
# (iptables mode, or nftables with E2E_PROXY_MODE=nftables) and CoreDNS as
# kubeadm deploys them, `eni-cni install
# --pool ec2` on every node, each node an instance of ONE fake EC2 world
# (ec2/ec2fake/cmd/ec2fake; each node its own IMDS view) whose VPC fabric
# carries the packets: a router namespace connecting the nodes' ENI links
# (routes each ENI's addresses to its link, enforces the source/destination
# check with a drop counter), an "internet" behind it (MTU 1500, reachable
# only from addresses with a public mapping) and a client in the VPC outside
# the cluster. Small ENI limits (t3.small: 3 addresses per ENI besides its
# primary) put pods on each node's primary AND a secondary ENI. Named
# checks, each failing the run when broken:
#
#   cluster-init                 kubeadm init on node 1 (every phase, addons included)
#   eni-cni-install-N            eni-cni install --pool ec2 --snat on node N exits 0
#   node-1-ready / addons-ready  node 1 Ready; kube-proxy Running, CoreDNS Ready (on node 1)
#   cluster-join-N               kubeadm join on node N; it goes Ready; its kube-proxy Running
#   pods-on-both-enis            web pods on every node, each node with pods on its
#                                primary ENI and on a secondary one (per the fake's ENIs)
#   nodeport-from-pod            a pod on either ENI -> its node's NodePort -> the other
#                                node's pod (kube-proxy masquerades it out of the pod's ENI)
#   ...                          (the traffic checks: see the cases below)
#   selftest-NAME                (CLUSTER_SELFTEST=1) NAME taken away on node 1 makes
#                                its check fail with the VPC fabric's drop counter rising;
#                                warm puts it back, the check passes:
#                                fwmark-rule (nodeport-from-outside), eni-address
#                                (nodeport-from-pod), snat-chain (pod-to-internet-snat)
#   hook                         $E2E_CLUSTER_HOOK, if set, exits 0
#   warm-timer-direct            on every node the timer's pass (the published ec2 build,
#                                stateDir/.bin/timer-warm) runs itself, no hand-over
#   kubeadm-reset                every node reset; every eni-cni address freed
#   eni-cni-uninstall            conflist and binary gone on every node
#   teardown-leaves-nothing      containerd stopped: no shim, mount, netns, cgroup left
#   host-untouched               (outside) this machine's node paths and sysctls as found
#
# Each node is a private mount namespace and a private network namespace
# (held by a `sleep` this script starts and ends), made as kubeadm.sh makes
# its one node (kubeadm-lib.sh): overlays on the node's paths, containerd,
# kubelet through a systemctl stand-in. Everything runs in a private mount
# and network namespace of its own, so nothing reaches the host's.
#
# Usage: scripts/e2e/cluster.sh /abs/path/to/bin/eni-cni
# Root; after scripts/install-test-deps.sh --with-kubeadm (`make test-cluster`).
# Holds lib.sh's host lock (kubelet's sysctls are the machine's).
# Env: E2E_KEEP_RUN=1 keeps the run dirs; E2E_CLUSTER_HOOK=/path/to/exe runs it
# after the checks (their pods and Services deleted), before teardown, in
# node 1's namespaces with KUBECONFIG exported (admin.conf) and kubectl in
# PATH; its failure fails the suite. CLUSTER_NODES [2] (3 ran too; the
# checks use nodes 1 and 2, the pod checks every node); CLUSTER_INSTANCE_TYPE
# [t3.small] (each node gets as many web pods as an ENI has addresses, so
# some land on a secondary ENI; the node 1 control plane's 5 host-network
# pods must fit in its maxPods); E2E_PROXY_MODE [iptables] (or nftables:
# kube-proxy's mode; its image carries nft).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
# shellcheck source-path=SCRIPTDIR source=kubelet-lib.sh
. "$here/kubelet-lib.sh"
# shellcheck source-path=SCRIPTDIR source=kubeadm-lib.sh
. "$here/kubeadm-lib.sh"

ENI_BIN=$(realpath "${1:?usage: cluster.sh /path/to/eni-cni}")
SELF=$(realpath "$0") # nsenter into a mount namespace leaves the cwd at its root
NODES=${CLUSTER_NODES:-2}
KEEP_RUN=${E2E_KEEP_RUN:-0}
INSTANCE_TYPE=${CLUSTER_INSTANCE_TYPE:-t3.small} # 3 ENIs x 4 addresses: pods on a secondary ENI early
VPC_CIDR=10.77.0.0/16
SUBNET=10.77.0.0/20
CLIENT_IP=10.77.32.10 # in the VPC, outside the cluster: a load balancer, another instance
PROXY_MODE=${E2E_PROXY_MODE:-iptables}
export E2E_PROXY_MODE=$PROXY_MODE # kadm_kubelet_config's KubeProxyConfiguration

say() { printf 'cluster-e2e: %s\n' "$*"; }

# ------------------------------------------------------------------ node side
# Run inside a node's namespaces (`on N`): CLUSTER_VERB says what to do,
# the node's lib.sh variables live in $CLUSTER_RUN/node-N.env.
NODE_VARS=(E2E_RUN E2E_SOCK E2E_ENDPOINT E2E_CRICTL_CONFIG E2E_CONTAINERD_CONFIG E2E_CONTAINERD_LOG
	E2E_CONTAINERD_PID E2E_CGROUP_PARENT E2E_SNAPSHOTTER E2E_CNI_BIN_DIR E2E_CNI_CONF_DIR E2E_PAUSE_TAR
	E2E_PAUSE_IMAGE E2E_CRICTL E2E_CTR E2E_CONTAINERD_BIN E2E_CONTAINERD E2E_NETNS_UNDER_STATE)

node_side() {
	local env=$CLUSTER_RUN/node-$CLUSTER_NODE.env
	case $1 in
	setup)
		kadm_node_setup
		kadm_node_runtime
		declare -p "${NODE_VARS[@]}" >"$env"
		;;
	teardown)
		# shellcheck disable=SC1090
		. "$env"
		kadm_stop_kubelet
		e2e_stop || { say "node $CLUSTER_NODE: stopping containerd failed" >&2; return 1; }
		kl_cleanup_cgroups
		e2e_check_clean
		;;
	cleanup)
		# shellcheck disable=SC1090
		[ -s "$env" ] && . "$env" || return 0
		set +e
		kadm_stop_kubelet
		E2E_KEEP_RUN=1 e2e_cleanup 2>/dev/null
		kadm_unmount_overlays
		[ "$KEEP_RUN" = 1 ] || rm -rf "$E2E_RUN"
		;;
	*) say "unknown node verb $1" >&2; return 1 ;;
	esac
}

if [ -n "${CLUSTER_VERB:-}" ]; then
	node_side "$CLUSTER_VERB"
	exit
fi

# ------------------------------------------------------------------ outside
[ "${CLUSTER_INNER:-0}" = 1 ] || kadm_outside CLUSTER_INNER "$0" "$@"

# ------------------------------------------------------------------ inside
# A private mount and network namespace: the cluster's world. Each node, the
# router, the internet and the client are namespaces held by a keeper.

CLUSTER_RUN=$(mktemp -d /tmp/eni-cluster.XXXX)
chmod 0755 "$CLUSTER_RUN"
mkdir -p "$CLUSTER_RUN/logs"
export CLUSTER_RUN KEEP_RUN
declare -A KEEPER=() NODE_RUN=() NODE_IP=() NODE_NAME=()
BG_PIDS=() WARM_PIDS=()
WORLD=$CLUSTER_RUN/world.json INET=''


# keeper NAME [unshare flags...]: a sleep holding new namespaces; its PID
# in KEEPER[NAME] once it runs in them.
keeper() {
	local name=$1 pid i
	shift
	_e2e_nolock unshare "$@" --propagation private -- sleep infinity &
	pid=$!
	for ((i = 0; i < 100; i++)); do
		[ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" != "$(readlink /proc/self/ns/net)" ] &&
			[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sleep ] && break
		sleep 0.05
	done
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sleep ] || fail "keeper $name did not start"
	KEEPER[$name]=$pid
}
# netns NAME: the path of a keeper's network namespace.
netns() { echo "/proc/${KEEPER[$1]}/ns/net"; }
# in_ns NAME CMD...: CMD in a keeper's network namespace (this mount namespace).
in_ns() {
	local n=$1
	shift
	nsenter -t "${KEEPER[$n]}" -n -- "$@"
}

# bg_web KEEPER ADDR:PORT LOG: the web server (scripts/web) listening in a
# keeper's namespaces (a node's host network, the internet), stopped at
# the end by its PID.
bg_web() {
	_e2e_nolock nsenter -t "${KEEPER[$1]}" -m -n -- "$KADM_DIR/bin/web" --listen "$2" >"$3" 2>&1 &
	BG_PIDS+=($!)
}

# on N CMD...: CMD on node N: its mount and network namespaces, its run's
# bin dir (kubeadm, kubectl, crictl, the systemctl stand-in) first in PATH,
# the SDK pointed at its instance's IMDS and the EC2 API (the fake's env
# file: what an instance role and IMDS give a real node). containerd
# inherits it, so the plugin's ADDs reach them too.
on() {
	local n=$1 aws=()
	shift
	[ ! -s "$CLUSTER_RUN/node-$n.aws.env" ] || mapfile -t aws < <(sed -n 's/^export //p' "$CLUSTER_RUN/node-$n.aws.env")
	nsenter -t "${KEEPER[node$n]}" -m -n -u -- env "${aws[@]}" PATH="${NODE_RUN[$n]:-/nonexistent}/bin:$PATH" \
		HOME="${NODE_RUN[$n]:-/nonexistent}/home" KUBECONFIG=/etc/kubernetes/admin.conf "$@"
}
# node_verb N VERB: this script's node side, on node N.
node_verb() { on "$1" env CLUSTER_VERB="$2" CLUSTER_NODE="$1" bash "$SELF" "$ENI_BIN"; }

k() { on 1 kubectl "$@"; }
eni() {
	local n=$1
	shift
	on "$n" /opt/cni/bin/eni-cni "$@"
}

diagnostics() {
	local n
	for n in $(seq "$NODES"); do
		[ -n "${NODE_RUN[$n]:-}" ] || continue
		echo "--- node $n: kubelet errors (last 10)"
		grep -E '^E[0-9]{4}' "${NODE_RUN[$n]}/logs/kubelet.log" 2>/dev/null | tail -n 10
	done
	[ -n "${NODE_RUN[1]:-}" ] && on 1 test -s /etc/kubernetes/admin.conf || return 0
	echo "--- nodes and pods"
	k get nodes -o wide 2>&1 | head
	k get pods -A -o wide 2>&1 | head -30
}

cleanup() {
	local rc=$? n p
	trap - EXIT
	set +e
	touch "$CLUSTER_RUN/stop-warm"
	for n in $(seq "$NODES"); do
		[ -n "${KEEPER[node$n]:-}" ] && node_verb "$n" cleanup
	done
	for p in "${BG_PIDS[@]}" "${WARM_PIDS[@]}"; do _e2e_kill_wait "$p" 5; done
	for p in "${KEEPER[@]}"; do _e2e_kill_wait "$p" 5; done
	if [ "$KEEP_RUN" = 1 ]; then
		say "kept run dir $CLUSTER_RUN"
	else
		rm -rf "$CLUSTER_RUN"
	fi
	exit "$rc"
}
trap cleanup EXIT

# ------------------------------------------------------------------ the VPC

# world_start: ONE fake EC2 world serving every node (ec2fake --instance
# per node: its own IMDS + EC2 listener inside the node's namespace, its
# env file for the SDK), on the VPC fabric: the router and the internet
# namespaces, the nodes' ENI links made by the fake as it attaches them
# (the primary one configured as DHCP would). Then a client namespace in
# the VPC, outside the cluster, on a link of its own to the router.
world_start() {
	local n args=() i
	keeper router --net
	keeper internet --net
	keeper client --net
	mkdir -p "$CLUSTER_RUN/bin"
	(cd "$ROOT" && CGO_ENABLED=0 go build -o "$CLUSTER_RUN/bin/ec2fake" ./ec2/ec2fake/cmd/ec2fake) || fail "build ec2fake"
	for n in $(seq "$NODES"); do
		NODE_IP[$n]=10.77.0.$((9 + n))
		NODE_NAME[$n]=eni-node-$n
		args+=(--instance "id=i-0000000000000c00$n,ip=${NODE_IP[$n]},netns=$(netns "node$n"),env-file=$CLUSTER_RUN/node-$n.aws.env")
	done
	_e2e_nolock "$CLUSTER_RUN/bin/ec2fake" --instance-type "$INSTANCE_TYPE" --vpc-cidr "$VPC_CIDR" --subnet-cidr "$SUBNET" \
		"${args[@]}" --router-netns "$(netns router)" --internet-netns "$(netns internet)" \
		--describe "$WORLD" >"$CLUSTER_RUN/logs/ec2fake.out" 2>"$CLUSTER_RUN/logs/ec2fake.err" &
	BG_PIDS+=($!)
	wait_for 20 world_up || fail "the fake world did not start: $(cat "$CLUSTER_RUN/logs/ec2fake.err")"
	for n in $(seq "$NODES"); do
		in_ns "node$n" sysctl -qw net.ipv4.ip_forward=1 # kubeadm's preflight wants it
	done
	# The client: 10.77.32.10/24 behind the router's 10.77.32.1.
	in_ns router ip link add client type veth peer name cl0 netns "$(netns client)"
	in_ns router ip addr add 10.77.32.1/24 dev client
	in_ns router ip link set client mtu 9001 up
	in_ns client ip link set lo up
	in_ns client ip addr add "$CLIENT_IP/24" dev cl0
	in_ns client ip link set cl0 mtu 9001 up
	in_ns client ip route add default via 10.77.32.1
	INET=$(jq -r .fabric.internetHost "$WORLD")
	WEB_PER_NODE=$(jq -r .instance.limits.ipv4PerENI "$WORLD")
	say "world: $(jq -r '[.instances[] | "\(.id) \(.type) \(.primaryIp)"] | join(", ")' "$WORLD"); internet $INET; client $CLIENT_IP"
}

# world_up: the fake answers, every env file written, every node's primary
# link configured.
world_up() {
	local n
	[ -s "$WORLD" ] && [ "$(jq '.instances | length' "$WORLD" 2>/dev/null)" = "$NODES" ] || return 1
	for n in $(seq "$NODES"); do
		[ -s "$CLUSTER_RUN/node-$n.aws.env" ] || return 1
		[ -n "$(in_ns "node$n" ip -4 -o addr show dev ens5 2>/dev/null)" ] || return 1
	done
}

# proxy_mode N: what node N's kube-proxy says it runs (its metrics
# listener's /proxyMode); proxy_mode_is N: it is PROXY_MODE.
proxy_mode() { on "$1" curl -s --max-time 2 http://127.0.0.1:10249/proxyMode 2>/dev/null; }
proxy_mode_is() { [ "$(proxy_mode "$1")" = "$PROXY_MODE" ]; }

# fabric_drops: what the VPC fabric dropped so far (source/destination
# check on every ENI, unmapped sources toward the internet): 0 when healthy.
fabric_drops() { jq -r '.fabric.dropped' "$WORLD"; }
# fabric_counters: the non-zero ones, for a message.
fabric_counters() { jq -c '[(.fabric.counters.ports[] | select(.dropped > 0)), {internet: .fabric.counters.internet}]' "$WORLD"; }

# node_start N: node N's namespaces, network, overlays and containerd.
node_start() {
	local n=$1
	node_verb "$n" setup >"$CLUSTER_RUN/logs/node-$n-setup.log" 2>&1 ||
		{ cat "$CLUSTER_RUN/logs/node-$n-setup.log" >&2; fail "node $n: setup failed"; }
	NODE_RUN[$n]=$(sed -n 's/^declare -x E2E_RUN="\(.*\)"$/\1/p' "$CLUSTER_RUN/node-$n.env")
	[ -d "${NODE_RUN[$n]}" ] || fail "node $n: no run dir in $CLUSTER_RUN/node-$n.env"
	on "$n" sh -c "printf '%s\n' \"\$@\" >>/etc/hosts" - "$(for i in $(seq "$NODES"); do echo "10.77.0.$((9 + i)) eni-node-$i"; done)"
}

init_config() {
	cat <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: ${NODE_IP[1]}
  bindPort: 6443
nodeRegistration:
  name: ${NODE_NAME[1]}
  criSocket: unix://${NODE_RUN[1]}/containerd.sock
  kubeletExtraArgs:
  - name: node-ip
    value: ${NODE_IP[1]}
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $KUBE_VER
clusterName: eni-cni-cluster
imageRepository: $REPO
EOF
	E2E_CGROUP_PARENT=/${NODE_RUN[1]##*/} kadm_kubelet_config "$MAX_PODS"
}

# join_config N TOKEN HASH: node N's JoinConfiguration; its own cgroupRoot
# (the cluster's KubeletConfiguration has node 1's) through a patch.
join_config() {
	local n=$1
	mkdir -p "${NODE_RUN[$n]}/patches"
	printf 'cgroupRoot: /%s\n' "${NODE_RUN[$n]##*/}" >"${NODE_RUN[$n]}/patches/kubeletconfiguration+merge.yaml"
	cat <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: ${NODE_IP[1]}:6443
    token: $2
    caCertHashes: [$3]
nodeRegistration:
  name: ${NODE_NAME[$n]}
  criSocket: unix://${NODE_RUN[$n]}/containerd.sock
  kubeletExtraArgs:
  - name: node-ip
    value: ${NODE_IP[$n]}
patches:
  directory: ${NODE_RUN[$n]}/patches
EOF
}

# install_eni N: eni-cni install on node N (portmap beside it for hostPort).
install_eni() {
	local n=$1
	begin "eni-cni-install-$n"
	install -m 0755 "$ENI_BIN" "${NODE_RUN[$n]}/eni-cni"
	on "$n" install -m 0755 "$E2E_TOOLS/bin/portmap" /opt/cni/bin/portmap
	show on "$n" "${NODE_RUN[$n]}/eni-cni" install --pool ec2 --snat || fail "eni-cni install on node $n failed"
	[ -x "${NODE_RUN[$n]}/eni-cni" ] && on "$n" test -s /etc/cni/net.d/10-eni-cni.conflist || fail "binary or conflist not installed"
	on "$n" jq -e '.plugins | map(.type) | index("portmap")' /etc/cni/net.d/10-eni-cni.conflist >/dev/null ||
		fail "portmap not chained in the conflist"
	start_warm_loop "$n"
	pass "node $n: binary and conflist (eni-cni + portmap) in place; pool: $(eni "$n" list --json | jq -c .pool)"
}

stop_warm_loops() {
	local p
	touch "$CLUSTER_RUN/stop-warm"
	for p in "${WARM_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	WARM_PIDS=()
}

# start_warm_loop N: a warm pass on node N every 10 s, as its timer would
# (no systemd and no cron here): the ec2 build the binary published in the
# state directory (TIMER_WARM), else the binary, as the cron line does.
TIMER_WARM=/var/lib/eni-cni/.bin/timer-warm
start_warm_loop() {
	local n=$1
	(
		set +e
		while [ ! -e "$CLUSTER_RUN/stop-warm" ]; do
			if on "$n" test -x "$TIMER_WARM"; then
				echo "== $TIMER_WARM warm"
				on "$n" "$TIMER_WARM" warm
			else
				echo "== eni-cni warm"
				eni "$n" warm
			fi >>"${NODE_RUN[$n]}/logs/warm-loop.log" 2>&1
			sleep 10
		done
	) &
	WARM_PIDS+=($!)
}

BIG=4000000 # bytes of the upload through SNAT onto the internet's 1500-byte link
WEB_PER_NODE=0 # world_start: as many as an ENI has addresses, one more than the primary holds for pods
declare -A POD_IP=() POD_NODE=() POD_NETNS=() POD_HOSTPORT=() PRIM=() SEC=()

# web_pods: WEB_PER_NODE web pods pinned to each node, each with a hostPort.
web_pods() {
	local n i
	for n in $(seq "$NODES"); do
		for i in $(seq "$WEB_PER_NODE"); do
			cat <<EOF
---
apiVersion: v1
kind: Pod
metadata: {name: web-$n-$i, labels: {app: cluster-web, pod: web-$n-$i}}
spec:
  nodeName: ${NODE_NAME[$n]}
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: $WEB_IMAGE
    imagePullPolicy: Never
    ports: [{containerPort: 8080, hostPort: $((9000 + 100 * n + i))}]
EOF
		done
	done
}

all_web_ready() {
	local st
	st=$(k get pods -l app=cluster-web -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{" "}{end}' 2>/dev/null)
	[ "$(wc -w <<<"$st")" = $((NODES * WEB_PER_NODE)) ] && [ -z "${st//True /}" ]
}

# classify_pods: each web pod's IP, node, hostPort and network namespace;
# PRIM[N] / SEC[N]: a pod of node N on its primary / a secondary ENI, as
# the fake EC2 world has the pod's address assigned.
classify_pods() {
	local name node ip hp n dev id
	while read -r name node ip hp; do
		n=${node##*-}
		POD_IP[$name]=$ip POD_NODE[$name]=$n POD_HOSTPORT[$name]=$hp
		dev=$(jq -r --arg ip "$ip" --arg inst "i-0000000000000c00$n" \
			'.enis[] | select(.instanceId == $inst and (.secondaryIps | index($ip))) | .deviceIndex' "$WORLD")
		[ -n "$dev" ] || fail "$name's address $ip is not a secondary address of node $n's instance"
		if [ "$dev" = 0 ]; then PRIM[$n]=${PRIM[$n]:-$name}; else SEC[$n]=${SEC[$n]:-$name}; fi
		id=$(on "$n" crictl pods --name "^$name\$" --namespace default --state ready -q | head -n 1)
		POD_NETNS[$name]=$(on "$n" crictl inspectp -o json "$id" |
			jq -r '.info.runtimeSpec.linux.namespaces[] | select(.type == "network") | .path')
		say "  $name on node $n: $ip on device $dev; hostPort $hp"
	done < <(k get pods -l app=cluster-web -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.status.podIP} {.spec.containers[0].ports[0].hostPort}{"\n"}{end}')
}

# pod_exec POD CMD...: CMD in the web pod's network namespace, on its node.
pod_exec() {
	local p=$1
	shift
	on "${POD_NODE[$p]}" nsenter --net="${POD_NETNS[$p]}" -- "$@"
}

# client_addr REPLY: the client address in the web's answer
# ("<host> <local address> <client address>").
client_addr() { awk '{ sub(/:[0-9]+$/, "", $3); print $3 }' <<<"$1"; }

# check_reply REPLY WANT_POD [WANT_CLIENT]: the answer came from WANT_POD
# (its hostname) and, if given, saw WANT_CLIENT as the source.
check_reply() {
	[ "${1%% *}" = "$2" ] || fail "answer from '${1%% *}', want $2: $1"
	[ -z "${3:-}" ] || [ "$(client_addr "$1")" = "$3" ] || fail "$2 saw the client as $(client_addr "$1"), want $3: $1"
}

# http_from_pod A B: pod A -> pod B's address; B sees A's own address.
http_from_pod() {
	local reply
	reply=$(pod_exec "$1" curl -s --max-time 5 "http://${POD_IP[$2]}:8080/") ||
		fail "$1 (${POD_IP[$1]}, node ${POD_NODE[$1]}) -> $2 (${POD_IP[$2]}, node ${POD_NODE[$2]}): no answer"
	check_reply "$reply" "$2" "${POD_IP[$1]}"
}

# http_from_node N POD: node N's host -> POD, seen from N's primary address.
http_from_node() {
	local reply
	reply=$(on "$1" curl -s --max-time 5 "http://${POD_IP[$2]}:8080/") || fail "node $1 -> $2 (${POD_IP[$2]}): no answer"
	check_reply "$reply" "$2" "${NODE_IP[$1]}"
}

# http_from_client IP PORT POD: the client in the VPC -> IP:PORT, answered by POD.
http_from_client() {
	local reply
	reply=$(in_ns client curl -s --max-time 5 "http://$1:$2/") || fail "client -> $1:$2 (to $3 on node ${POD_NODE[$3]}): no answer"
	check_reply "$reply" "$3"
}
http_from_client_ok() { [ "$(in_ns client curl -s --max-time 2 "http://$1:$2/" 2>/dev/null | cut -d' ' -f1)" = "$3" ]; }

# services: a NodePort Service (externalTrafficPolicy Cluster) per node,
# selecting that node's pod on a secondary ENI.
services() {
	local n
	for n in $(seq "$NODES"); do
		cat <<EOF
---
apiVersion: v1
kind: Service
metadata: {name: web-sec-$n, labels: {app: cluster-web}}
spec:
  type: NodePort
  externalTrafficPolicy: Cluster
  selector: {pod: ${SEC[$n]}}
  ports: [{port: 80, targetPort: 8080}]
EOF
	done
}

no_web_allocations() {
	[ -z "$(eni "$1" list --json | jq -r '.allocations[] | select(.podName | startswith("web-")) | .ip')" ]
}

# traffic_prep: what the traffic checks talk to: a NodePort Service per
# node's secondary-ENI pod, a web server on the internet and on each node's
# host network, a 4 MB body for uploads (the web reads a body to its end
# and answers its length: some 2,800 segments through SNAT onto the
# 1500-byte link).
traffic_prep() {
	services | k apply -f - >/dev/null || fail "kubectl apply of the NodePort services failed"
	bg_web internet "$INET:80" "$CLUSTER_RUN/logs/internet-web.log"
	wait_for 10 in_ns internet curl -s --max-time 1 -o /dev/null "http://$INET/" || fail "web on the internet did not start"
	for n in $(seq "$NODES"); do
		bg_web "node$n" "${NODE_IP[$n]}:18080" "${NODE_RUN[$n]}/logs/host-web.log"
		wait_for 10 on "$n" curl -s --max-time 1 -o /dev/null "http://${NODE_IP[$n]}:18080/" || fail "host web on node $n did not start"
	done
	head -c "$BIG" /dev/zero | tr '\0' x >"$CLUSTER_RUN/big"
}

# traffic_check NAME: run check_NAME (dashes as underscores) as a named
# check in a subshell: its failure is recorded in FAILED and the next
# check still runs, so one run shows every broken path.
traffic_check() {
	local d
	begin "$1"
	( "check_${1//-/_}" ) || FAILED+=("$1")
	# Which check made the fabric drop (the describe file is rewritten
	# every second): named in src-dst-check-drops-zero's failure.
	sleep 1.1
	d=$(fabric_drops)
	if [ "$d" != "$DROPS" ]; then
		say "  the fabric dropped $((d - DROPS)) more packets by the end of $1: $(fabric_counters)"
		DROPPED_IN+=("$1 (+$((d - DROPS)))")
		DROPS=$d
	fi
}
FAILED=() DROPPED_IN=() DROPS=0

check_pod_to_pod_same_node() {
	for n in $(seq "$NODES"); do
		http_from_pod "${PRIM[$n]}" "${SEC[$n]}"
		http_from_pod "${SEC[$n]}" "${PRIM[$n]}"
	done
	pass "primary <-> secondary ENI pods on each node, HTTP both ways, sources unchanged"
}

check_pod_to_pod_across_nodes() {
	for a in "${PRIM[1]}" "${SEC[1]}"; do
		for b in "${PRIM[2]}" "${SEC[2]}"; do
			http_from_pod "$a" "$b"
			http_from_pod "$b" "$a"
		done
	done
	pass "all four primary/secondary combinations between node 1 and node 2, both ways, sources unchanged"
}

check_node_to_pod_across_nodes() {
	http_from_node 1 "${PRIM[2]}"
	http_from_node 1 "${SEC[2]}"
	http_from_node 2 "${PRIM[1]}"
	http_from_node 2 "${SEC[1]}"
	pass "each node's host reaches the other node's pods on both ENIs, from its primary address"
}

check_nodeport_from_outside() {
	for n in 1 2; do
		np=$(k get svc "web-sec-$n" -o jsonpath='{.spec.ports[0].nodePort}')
		wait_for "${NODEPORT_WAIT:-30}" http_from_client_ok "${NODE_IP[$n]}" "$np" "${SEC[$n]}" || true
		for m in $(seq "$NODES"); do
			http_from_client "${NODE_IP[$m]}" "$np" "${SEC[$n]}"
		done
	done
	pass "client $CLIENT_IP -> NodePort on every node -> the pod on node 1's and node 2's secondary ENI (same node and other node)"
}

# A pod dialing its own node's NodePort of a Service whose endpoint is on
# the other node: kube-proxy masquerades the connection out of the pod's
# ENI, so from a secondary ENI it must leave with that ENI's own address
# (upstream's "Networking Granular Checks: Services should function for
# endpoint-Service" failed so: the link had none and lent the primary's).
check_nodeport_from_pod() {
	for n in 1 2; do
		m=$((3 - n))
		np=$(k get svc "web-sec-$m" -o jsonpath='{.spec.ports[0].nodePort}')
		for p in "${PRIM[$n]}" "${SEC[$n]}"; do
			reply=$(pod_exec "$p" curl -s --max-time 5 "http://${NODE_IP[$n]}:$np/") ||
				fail "$p (${POD_IP[$p]}, node $n) -> node $n's NodePort $np -> ${SEC[$m]} on node $m: no answer"
			check_reply "$reply" "${SEC[$m]}"
		done
	done
	pass "pods on both ENIs of each node -> their own node's NodePort -> the pod on the other node's secondary ENI"
}

check_hostport_from_outside() {
	for n in $(seq "$NODES"); do
		for p in "${PRIM[$n]}" "${SEC[$n]}"; do
			http_from_client "${NODE_IP[$n]}" "${POD_HOSTPORT[$p]}" "$p"
		done
	done
	pass "client $CLIENT_IP -> hostPort on each node's primary address -> its pods on the primary and the secondary ENI"
}

check_pod_to_internet_snat() {
	for n in $(seq "$NODES"); do
		for p in "${PRIM[$n]}" "${SEC[$n]}"; do
			reply=$(pod_exec "$p" curl -s --max-time 5 "http://$INET/") || fail "$p (${POD_IP[$p]}): no answer from the internet $INET"
			[ "$(client_addr "$reply")" = "${NODE_IP[$n]}" ] ||
				fail "$p: the internet saw $(client_addr "$reply"), want node $n's primary address ${NODE_IP[$n]} (SNAT): $reply"
		done
	done
	pass "pods on both ENIs of each node reach $INET; the internet sees the node's primary address"
}

check_pod_to_node_no_snat() {
	for a in 1 2; do
		b=$((3 - a))
		for p in "${PRIM[$a]}" "${SEC[$a]}"; do
			reply=$(pod_exec "$p" curl -s --max-time 5 "http://${NODE_IP[$b]}:18080/") || fail "$p: no answer from node $b's primary address"
			[ "$(client_addr "$reply")" = "${POD_IP[$p]}" ] ||
				fail "$p: node $b saw $(client_addr "$reply"), want the pod's own ${POD_IP[$p]} (no SNAT inside the VPC)"
		done
	done
	pass "pods on both ENIs reach the other node's primary address with their own source address"
}

check_mtu_inside_and_beyond_vpc() {
	for a in "${PRIM[1]}" "${SEC[1]}"; do
		for b in "${PRIM[2]}" "${SEC[2]}"; do
			pod_exec "$a" ping -c1 -W2 -M do -s 8973 -q "${POD_IP[$b]}" >/dev/null ||
				fail "a 9001-byte DF ping from $a to $b (${POD_IP[$b]}) across the VPC failed"
		done
	done
	for p in "${SEC[1]}" "${PRIM[2]}"; do
		pod_exec "$p" ping -c1 -W2 -M do -s 1472 -q "$INET" >/dev/null || fail "a 1500-byte DF ping from $p to the internet failed"
		! pod_exec "$p" ping -c2 -W2 -M do -s 1473 -q "$INET" >/dev/null 2>&1 || fail "a 1501-byte DF ping from $p crossed the 1500-byte internet link"
		reply=$(pod_exec "$p" curl -s --max-time 20 --data-binary "@$CLUSTER_RUN/big" "http://$INET/") ||
			fail "a $BIG-byte upload from $p to the internet failed (TCP through SNAT onto the 1500-byte link)"
		[ "$(awk '{ print $4 }' <<<"$reply")" = "$BIG" ] || fail "the internet read $(awk '{ print $4 }' <<<"$reply") bytes of $p's $BIG-byte upload: $reply"
	done
	pass "9001-byte packets between pods across the VPC; beyond it 1500 holds (DF 1501 refused) and TCP adapts ($BIG-byte upload, all of it read)"
}

check_coredns_across_nodes() {
	dns_nodes=$(k get pods -n kube-system -l k8s-app=kube-dns -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u | tr '\n' ' ')
	[ "$dns_nodes" = "${NODE_NAME[1]} " ] || fail "CoreDNS runs on '$dns_nodes', want node 1 only (so node 2 resolves across the VPC)"
	for p in "${PRIM[2]}" "${SEC[2]}"; do
		reply=$(on 2 curl -s --max-time 10 "http://${POD_IP[$p]}:8080/resolve?name=kubernetes.default.svc.cluster.local") ||
			fail "$p could not resolve kubernetes.default: $reply"
		[ "$reply" = 10.96.0.1 ] || fail "$p resolved kubernetes.default to '$reply', want 10.96.0.1"
	done
	pass "pods on node 2 (both ENIs) resolve kubernetes.default through the kube-dns Service, CoreDNS on node 1"
}

check_api_server_via_kubernetes_service() {
	for n in $(seq "$NODES"); do
		reply=$(pod_exec "${SEC[$n]}" curl -sk --max-time 10 https://10.96.0.1/version) ||
			fail "${SEC[$n]} (secondary ENI of node $n) could not reach https://10.96.0.1/version"
		[ "$(jq -r .gitVersion <<<"$reply")" = "$KUBE_VER" ] || fail "unexpected /version answer: $reply"
	done
	pass "pods on a secondary ENI of node 1 and of node 2 reach the API server (node 1) through the kubernetes Service"
}

check_src_dst_check_drops_zero() {
	sleep 1.5 # the describe file is rewritten every second
	drops=$(fabric_drops)
	[ "$drops" = 0 ] || fail "the VPC fabric dropped $drops packets (${DROPPED_IN[*]:-before the traffic checks}): $(fabric_counters)"
	pass "the router's source/destination check and the internet gateway dropped nothing: $(jq -c '[.fabric.counters.ports[] | {port, dropped}]' "$WORLD")"
}

# ------------------------------------------------------------------ self-test
# CLUSTER_SELFTEST=1: after the traffic checks, proof that they can fail:
# what a check relies on is taken away on node 1 (warm loops stopped, so
# nothing puts it back behind the test's back), the check must fail; one
# `eni-cni warm` there must put it back and the check pass again.

# selftest NAME CHECK: the sh script on stdin, run on node 1, takes NAME
# away; CHECK must fail, and for the reason the test is about: the VPC
# fabric drops what leaves with an address the ENI does not own (the
# source/destination check, or the internet gateway for an unmapped
# source), so its drop counter must rise (a check failing for another
# reason, which warm might also repair, proves nothing); then CHECK must
# pass once warm has put NAME back.
selftest() {
	local name=$1 check=$2 log=$CLUSTER_RUN/logs/selftest-$1.log before after
	begin "selftest-$name"
	sleep 1.1 # the describe file is rewritten every second
	before=$(fabric_drops)
	on 1 sh -es || fail "could not take $name away"
	if (NODEPORT_WAIT=0 "check_${check//-/_}") >"$log" 2>&1; then
		fail "$check passed without $name"
	fi
	sleep 1.1
	after=$(fabric_drops)
	[ "$after" -gt "$before" ] || fail "$check failed without $name, but the VPC fabric dropped nothing ($before before, $after after): it failed for another reason: $(grep -m1 'FAIL' "$log")"
	eni 1 warm >>"$log" 2>&1 || fail "eni-cni warm on node 1 failed: $(tail -n 3 "$log")"
	("check_${check//-/_}") >>"$log" 2>&1 || fail "$check still fails after warm put $name back: $(grep -m1 'FAIL' "$log")"
	pass "$check fails without $name (the fabric dropped $((after - before)); $(grep -m1 -o 'FAIL .*' "$log" | cut -c1-160)) and passes once warm put it back"
}

selftests() {
	local n
	stop_warm_loops
	echo "ip rule del priority $CONNMARK_PRIO" | selftest fwmark-rule nodeport-from-outside
	# The secondary ENIs' own addresses, as before eni-cni put them there:
	# the kernel drops a link's routes with its last address, so the ENI
	# tables' routes are put back (sorted: the subnet's before the default
	# via the gateway in it).
	selftest eni-address nodeport-from-pod <<-'EOF'
		for d in $(ip -o -4 addr show | awk '$2 != "lo" && $2 != "ens5" { print $2 }'); do
			r=$(ip -4 route show table all dev "$d" | grep -Ev '^(local|broadcast) ' | sort)
			ip -4 addr flush dev "$d"
			echo "$r" | while read -r l; do ip route replace $l dev "$d"; done
		done
	EOF
	echo "iptables -t nat -F ENI-CNI-SNAT" | selftest snat-chain pod-to-internet-snat
	rm -f "$CLUSTER_RUN/stop-warm"
	for n in $(seq "$NODES"); do start_warm_loop "$n"; done
}
CONNMARK_PRIO=1024 # netsetup/connmark.RulePriority

# ------------------------------------------------------------------ cases

T0=$EPOCHREALTIME
# Each node its own UTS namespace too, named as its kubelet: a hostNetwork
# pod answers with its node's hostname (the conformance spec "service
# endpoints using hostNetwork" expects the node names, not this machine's).
for n in $(seq "$NODES"); do
	keeper "node$n" --mount --net --uts
	nsenter -t "${KEEPER[node$n]}" -u -- hostname "eni-node-$n"
done
world_start
# kubelet's maxPods: what the instance type's ENIs hold, as the quick start says.
MAX_PODS=$(on 1 "$ENI_BIN" max-pods) && [[ $MAX_PODS =~ ^[0-9]+$ ]] || fail "eni-cni max-pods: $MAX_PODS"
say "eni-cni max-pods on node 1 ($INSTANCE_TYPE): $MAX_PODS"
for n in $(seq "$NODES"); do node_start "$n"; done
say "run dir $CLUSTER_RUN; $NODES nodes: $(for n in $(seq "$NODES"); do printf '%s %s (%s) ' "${NODE_NAME[$n]}" "${NODE_IP[$n]}" "${NODE_RUN[$n]}"; done)"
say "setup ${T0:+$(e2e_since "$T0")s}"

begin cluster-init
init_config >"${NODE_RUN[1]}/kubeadm.yaml"
t0=$EPOCHREALTIME
on 1 kubeadm init --config "${NODE_RUN[1]}/kubeadm.yaml" >"${NODE_RUN[1]}/logs/kubeadm-init.log" 2>&1 ||
	{ tail -n 20 "${NODE_RUN[1]}/logs/kubeadm-init.log" >&2; fail "kubeadm init failed"; }
pass "control plane up on node 1 in $(e2e_since "$t0")s"

install_eni 1
begin node-1-ready
wait_for 90 node_ready "${NODE_NAME[1]}" || fail "node 1 not Ready 90 s after eni-cni install"
wait_for 120 addons_ready || fail "kube-proxy or CoreDNS not Ready within 120 s"
wait_for 30 proxy_mode_is 1 || fail "kube-proxy on node 1 runs in mode '$(proxy_mode 1)', want $PROXY_MODE"
pass "node 1 Ready, kube-proxy Running ($PROXY_MODE mode), CoreDNS Ready"

JOIN=$(k -n kube-system get cm kubeadm-config >/dev/null && on 1 kubeadm token create --print-join-command) ||
	fail "kubeadm token create failed"
TOKEN=$(awk '{ for (i = 1; i < NF; i++) if ($i == "--token") print $(i + 1) }' <<<"$JOIN")
HASH=$(awk '{ for (i = 1; i < NF; i++) if ($i == "--discovery-token-ca-cert-hash") print $(i + 1) }' <<<"$JOIN")
for n in $(seq 2 "$NODES"); do
	begin "cluster-join-$n"
	join_config "$n" "$TOKEN" "$HASH" >"${NODE_RUN[$n]}/kubeadm-join.yaml"
	t0=$EPOCHREALTIME
	on "$n" kubeadm join --config "${NODE_RUN[$n]}/kubeadm-join.yaml" >"${NODE_RUN[$n]}/logs/kubeadm-join.log" 2>&1 ||
		{ tail -n 20 "${NODE_RUN[$n]}/logs/kubeadm-join.log" >&2; fail "kubeadm join on node $n failed"; }
	JOIN_S=$(e2e_since "$t0")
	pass "node $n joined in ${JOIN_S}s"
	install_eni "$n"
	begin "node-$n-ready"
	wait_for 90 node_ready "${NODE_NAME[$n]}" || fail "node $n not Ready 90 s after eni-cni install"
	wait_for 120 addons_ready || fail "kube-proxy or CoreDNS not Ready within 120 s"
	wait_for 30 proxy_mode_is "$n" || fail "kube-proxy on node $n runs in mode '$(proxy_mode "$n")', want $PROXY_MODE"
	pass "node $n Ready"
done
show k get nodes -o wide
show k get pods -A -o wide

begin pods-on-both-enis
show k taint nodes "${NODE_NAME[1]}" node-role.kubernetes.io/control-plane- || fail "kubectl taint failed"
t0=$EPOCHREALTIME
web_pods | k apply -f - >/dev/null || fail "kubectl apply of the web pods failed"
wait_for 180 all_web_ready || fail "web pods not Ready within 180 s: $(k get pods -l app=cluster-web -o wide 2>&1)"
WEB_S=$(e2e_since "$t0")
show k get pods -l app=cluster-web -o wide
classify_pods
for n in $(seq "$NODES"); do
	[ -n "${PRIM[$n]:-}" ] || fail "node $n: no web pod on its primary ENI"
	[ -n "${SEC[$n]:-}" ] || fail "node $n: no web pod on a secondary ENI"
done
pass "$((NODES * WEB_PER_NODE)) pods Ready in ${WEB_S}s; $(for n in $(seq "$NODES"); do printf 'node %s: primary ENI %s (%s), secondary ENI %s (%s); ' "$n" "${PRIM[$n]}" "${POD_IP[${PRIM[$n]}]}" "${SEC[$n]}" "${POD_IP[${SEC[$n]}]}"; done)"

traffic_prep
sleep 1.1
DROPS=$(fabric_drops)
[ "$DROPS" = 0 ] || { say "  the fabric dropped $DROPS packets before the traffic checks: $(fabric_counters)"; DROPPED_IN+=("before the traffic checks (+$DROPS)"); }
traffic_check pod-to-pod-same-node
traffic_check pod-to-pod-across-nodes
traffic_check node-to-pod-across-nodes
traffic_check nodeport-from-outside
traffic_check nodeport-from-pod
traffic_check hostport-from-outside
traffic_check pod-to-internet-snat
traffic_check pod-to-node-no-snat
traffic_check mtu-inside-and-beyond-vpc
traffic_check coredns-across-nodes
traffic_check api-server-via-kubernetes-service
traffic_check src-dst-check-drops-zero
[ ${#FAILED[@]} = 0 ] || { CASE=traffic; fail "failed: ${FAILED[*]}"; }
[ "${CLUSTER_SELFTEST:-0}" != 1 ] || selftests

begin kubectl-delete-frees-addresses
k delete pods -l app=cluster-web --wait=true --timeout=60s >/dev/null || fail "kubectl delete of the web pods failed"
k delete svc -l app=cluster-web >/dev/null || fail "kubectl delete of the services failed"
for n in $(seq "$NODES"); do
	wait_for 30 no_web_allocations "$n" || fail "node $n: web pods' addresses still allocated: $(eni "$n" list --json | jq -c '.allocations')"
done
pass "every web pod's address freed on every node"

if [ -n "${E2E_CLUSTER_HOOK:-}" ]; then
	begin hook
	[ -x "$E2E_CLUSTER_HOOK" ] || fail "E2E_CLUSTER_HOOK=$E2E_CLUSTER_HOOK is not executable"
	# Every node's containerd, for a hook that loads images on each
	# (scripts/e2e/conformance.sh): the run dirs are seen from node 1 too.
	sockets=()
	for n in $(seq "$NODES"); do sockets+=("${NODE_RUN[$n]}/containerd.sock"); done
	E2E_NODE_SOCKETS="${sockets[*]}" on 1 "$E2E_CLUSTER_HOOK" || fail "$E2E_CLUSTER_HOOK failed (exit $?)"
	pass "$E2E_CLUSTER_HOOK exited 0"
fi

begin warm-timer-direct
# The timer's pass on a settled node is the published ec2 build on its own,
# one process: it proves itself and runs, it does not hand over.
direct=""
for n in $(seq "$NODES"); do
	out=$(on "$n" "$TIMER_WARM" warm 2>&1) || fail "node $n: $TIMER_WARM warm failed: $out"
	! grep -q "handing over" <<<"$out" || fail "node $n: the published build handed over on a settled node: $out"
	direct+=" node $n: $(grep -c "^== $TIMER_WARM" "${NODE_RUN[$n]}/logs/warm-loop.log") of $(grep -c '^== ' "${NODE_RUN[$n]}/logs/warm-loop.log") loop passes,"
done
pass "the timer's pass runs the published build itself;${direct%,}"

begin kubeadm-reset
stop_warm_loops
for n in $(seq "$NODES" -1 1); do
	on "$n" kubeadm reset -f --cri-socket "unix://${NODE_RUN[$n]}/containerd.sock" >"${NODE_RUN[$n]}/logs/kubeadm-reset.log" 2>&1 ||
		{ tail -n 20 "${NODE_RUN[$n]}/logs/kubeadm-reset.log" >&2; fail "kubeadm reset on node $n failed"; }
	! E2E_RUN=${NODE_RUN[$n]} kubelet_pid >/dev/null || fail "kubelet still running on node $n after kubeadm reset"
	left=$(eni "$n" list --json | jq -r '[.allocations[] | "\(.podNamespace)/\(.podName) \(.ip)"] | join(", ")')
	[ -z "$left" ] || fail "node $n: addresses still allocated after every pod was removed: $left"
done
pass "every node reset (node 1 last); every pod's address freed by its DEL, CoreDNS's too"

begin eni-cni-uninstall
for n in $(seq "$NODES"); do
	show eni "$n" uninstall || fail "eni-cni uninstall on node $n failed"
done
pass "uninstalled on every node"

begin teardown-leaves-nothing
for n in $(seq "$NODES"); do
	node_verb "$n" teardown || fail "node $n: left behind (above)"
	links=$(on "$n" ip -o link show 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -v -E '^(lo|ens[0-9]+)$' || true)
	[ -z "$links" ] || fail "node $n: links left: $(tr '\n' ' ' <<<"$links")"
done
pass "containerd stopped on every node; no shim, sandbox, mount, netns or cgroup left"
say "cluster run $(e2e_since "$T0")s"
