#!/usr/bin/env bash
# kubeadm suite: the kubeadm quick start (docs/quickstart-kubeadm.md), run for real on this
# machine, offline: `kubeadm init` with no other CNI brings up a one-node
# control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler as static pods, from images built offline by
# scripts/install-test-deps.sh --with-kubeadm under kubeadm's
# imageRepository localhost/eni-cni-kubeadm); `eni-cni install` puts the
# plugin in place; the node goes Ready; `kubectl run` starts a pod that gets an
# eni-cni address and answers HTTP; `kubectl delete` frees the address;
# `kubeadm reset` and `eni-cni uninstall` take it all down. Each case is a
# named check that fails the run when broken:
#
#   kubeadm-init                 kubeadm init --config (all phases, addons included)
#                                exits 0; every image was already there
#   node-notready-without-cni    the node registers NotReady: no CNI configuration yet
#   eni-cni-install              eni-cni install --pool static --ranges ... exits 0
#                                (binary, conflist, cron file, doctor)
#   node-ready                   the node goes Ready (containerd read the conflist)
#   addons-ready                 kube-proxy Running; both CoreDNS pods Ready with pool
#                                addresses (Ready = synced with the API server through
#                                the kubernetes Service: kube-proxy's DNAT, pod -> node)
#   kubectl-run-pod              kubectl run: the pod Running with a pool address,
#                                which `eni-cni list` records as default/web
#   pod-reachable                HTTP from the node to the pod's address answers; the
#                                pod resolves kubernetes.default through cluster DNS
#                                (its Service -> a CoreDNS pod: pod to pod)
#   kubectl-delete-frees-address kubectl delete: the address, its veth and rule freed
#   kubeadm-reset                kubeadm reset -f exits 0, kubelet stopped, every pod
#                                gone and every eni-cni address freed (CoreDNS's too)
#   eni-cni-uninstall            eni-cni uninstall exits 0, conflist and binary gone
#   teardown-leaves-nothing      containerd stopped: no shim, mount, netns, cgroup left
#   host-untouched               (outside) this machine's node paths and sysctls as found
#
# Nothing on this machine is touched: the script re-runs itself in a private
# mount namespace and a private network namespace (unshare -m -n). In it,
# /etc, /var/lib, /var/log, /opt, /usr/libexec and /run are overlays whose upper
# layers live in the run dir, so /etc/kubernetes, /var/lib/kubelet,
# /var/lib/etcd, /etc/cni/net.d, /opt/cni/bin, ... are written where kubeadm,
# kubelet and eni-cni write them on a node, and vanish with the run. The
# node's address is on a dummy interface of that network namespace (its
# default route leads nowhere: nothing leaves it). containerd is lib.sh's
# private one. No systemd runs here: kubeadm's `systemctl restart kubelet`
# reaches a stand-in (in the run dir, first in PATH) that starts kubelet
# exactly as kubeadm's systemd drop-in (10-kubeadm.conf) would, with the
# flags kubeadm wrote. kubelet's cgroups live under the run's cgroup; the
# kernel tunables kubelet sets are restored at the end.
#
# Usage: scripts/e2e/kubeadm.sh /abs/path/to/bin/eni-cni
# Root; after scripts/install-test-deps.sh --with-kubeadm (`make test-kubeadm`).
# Holds lib.sh's host lock (one kubelet per machine).
# Env: E2E_KEEP_RUN=1 keeps the run dir (logs, the overlays' upper layers).
#   E2E_IP_FAMILY=ipv6|dual|dual6 runs kubeadm6.sh: the cluster in IPv6
#   single-stack or dual-stack (ipv4, the default, is this script).
#   E2E_CLUSTER_HOOK=/path/to/exe runs it after the checks, before teardown,
#   in the node's namespaces with KUBECONFIG (admin.conf) and E2E_SOCK
#   exported (e.g. scripts/e2e/conformance.sh); its failure fails the run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# E2E_IP_FAMILY=ipv6|dual|dual6: the same quick start on a cluster of
# that family (dual6: dual-stack, IPv6 first), checks per family (kubeadm6.sh).
case ${E2E_IP_FAMILY:-ipv4} in
ipv4) ;;
ipv6 | dual | dual6) exec bash "$here/kubeadm6.sh" "$@" ;;
*) echo "kubeadm-e2e: E2E_IP_FAMILY=$E2E_IP_FAMILY: want ipv4, ipv6, dual or dual6" >&2 && exit 2 ;;
esac
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
# shellcheck source-path=SCRIPTDIR source=kubelet-lib.sh
. "$here/kubelet-lib.sh"
# shellcheck source-path=SCRIPTDIR source=kubeadm-lib.sh
. "$here/kubeadm-lib.sh"

ENI_BIN=$(realpath "${1:?usage: kubeadm.sh /path/to/eni-cni}")
NODE=kadm-node
NODE_IP=10.199.0.10                    # on a dummy interface of the private netns
NODE_GW=10.199.0.1                     # nobody: the default route leads nowhere
POOL_RANGE=10.199.1.10-10.199.1.29
POOL_RE='^10\.199\.1\.'

say() { printf 'kubeadm-e2e: %s\n' "$*"; }

# ------------------------------------------------------------------ outside
# The host's side: the lock, what must not change, the private namespaces.
[ "${KADM_INNER:-0}" = 1 ] || kadm_outside KADM_INNER "$0" "$@"

# ------------------------------------------------------------------ inside
# A private mount namespace and network namespace, ours alone.

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
	echo "--- nodes and pods"
	k get nodes -o wide 2>&1 | head
	k get pods -A -o wide 2>&1 | head -20
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

# node_network: the private network namespace as a node's: lo, eth0 with
# the node's address and a default route. eth0's veth peer stays in this
# namespace without an address: the gateway never answers ARP, so nothing
# sent to the default route goes anywhere (no dummy driver on this kernel).
node_network() {
	ip link set lo up
	ip link add eth0 type veth peer name eth0-peer
	ip addr add "$NODE_IP/24" dev eth0
	ip link set eth0 up
	ip link set eth0-peer up
	ip route add default via "$NODE_GW" dev eth0
	sysctl -qw net.ipv4.ip_forward=1 # this namespace's own (kubeadm's preflight wants it)
	printf '%s %s\n' "$NODE_IP" "$NODE" >>/etc/hosts
}

write_kubeadm_config() {
	cat >"$E2E_RUN/kubeadm.yaml" <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: $NODE_IP
  bindPort: 6443
nodeRegistration:
  name: $NODE
  criSocket: $E2E_ENDPOINT
  kubeletExtraArgs:
  - name: node-ip
    value: $NODE_IP
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $KUBE_VER
clusterName: eni-cni-kubeadm
# The images scripts/install-test-deps.sh --with-kubeadm built and this run imported.
imageRepository: $REPO
EOF
	kadm_kubelet_config 20 >>"$E2E_RUN/kubeadm.yaml"
}

pod_phase() { k get pod web -o jsonpath='{.status.phase}' 2>/dev/null; }
pod_ready() { [ "$(k get pod web -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; }
ip_free() { [ -z "$(alloc_json | jq -r --arg ip "$1" '.allocations[] | select(.ip == $ip) | .ip')" ]; }
pod_gone() { ! k get pod web >/dev/null 2>&1; }

trap cleanup EXIT
kadm_node_setup
node_network
kadm_node_runtime
write_kubeadm_config
say "run dir $E2E_RUN; node $NODE at $NODE_IP (private netns); containerd $E2E_ENDPOINT"
say "$(kubeadm version -o short), $("$KL_BIN" --version), images imported in ${E2E_TIME_IMPORT}s:"
kubeadm config images list --config "$E2E_RUN/kubeadm.yaml" 2>/dev/null | sed 's/^/  /'

# ------------------------------------------------------------------ cases

begin kubeadm-init
t0=$EPOCHREALTIME
kubeadm init --config "$E2E_RUN/kubeadm.yaml" \
	>"$E2E_RUN/logs/kubeadm-init.log" 2>&1 || fail "kubeadm init failed (exit $?)"
INIT_S=$(e2e_since "$t0")
grep -E '^\[(init|preflight|certs|kubeconfig|etcd|control-plane|kubelet-start|wait-control-plane|api-check|kubelet-check|mark-control-plane|bootstrap-token|kubelet-finalize|addons)\]|^W[0-9]{4}|\[(WARNING|ERROR) |successfully' \
	"$E2E_RUN/logs/kubeadm-init.log" | sed 's/^/  | /'
pass "control plane up in ${INIT_S}s"

begin node-notready-without-cni
show k get nodes -o wide
reason=$(k get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}')
! node_ready "$NODE" || fail "node Ready before any CNI was installed"
say "  Ready=False: $reason"
pass "NotReady, as expected without a CNI"

begin eni-cni-install
install -m 0755 "$ENI_BIN" "$E2E_RUN/eni-cni"
show "$E2E_RUN/eni-cni" install --pool static --ranges "$POOL_RANGE" --mtu 1500 || fail "eni-cni install failed"
[ -x /opt/cni/bin/eni-cni ] && [ -s /etc/cni/net.d/10-eni-cni.conflist ] || fail "binary or conflist not installed"
pass "binary and conflist in place"

begin node-ready
t0=$EPOCHREALTIME
wait_for 90 node_ready "$NODE" || fail "node not Ready 90 s after eni-cni install"
READY_S=$(e2e_since "$t0")
show k get nodes -o wide
pass "Ready ${READY_S}s after eni-cni install"

begin addons-ready
wait_for 120 addons_ready || fail "kube-proxy or CoreDNS not Ready within 120 s"
show k get pods -n kube-system -o wide
for ip in $(k get pods -n kube-system -l k8s-app=kube-dns -o jsonpath='{.items[*].status.podIP}'); do
	[[ $ip =~ $POOL_RE ]] || fail "CoreDNS pod IP $ip is not from the pool"
done
pass "kube-proxy Running, CoreDNS Ready on $(k get pods -n kube-system -l k8s-app=kube-dns -o jsonpath='{.items[*].status.podIP}')"

begin kubectl-run-pod
show k taint nodes --all node-role.kubernetes.io/control-plane- || fail "kubectl taint failed"
t0=$EPOCHREALTIME
show k run web --image="$WEB_IMAGE" --image-pull-policy=Never --port=8080 || fail "kubectl run failed"
wait_for 120 pod_ready || fail "pod web not Ready within 120 s (phase $(pod_phase))"
POD_S=$(e2e_since "$t0")
show k get pod web -o wide
POD_IP=$(k get pod web -o jsonpath='{.status.podIP}')
[[ $POD_IP =~ $POOL_RE ]] || fail "pod IP $POD_IP is not from the pool $POOL_RANGE"
show eni list
got=$(alloc_json | jq -r --arg ip "$POD_IP" '.allocations[] | select(.ip == $ip) | "\(.podNamespace)/\(.podName)"')
[ "$got" = default/web ] || fail "eni-cni list: $POD_IP belongs to '${got:-nobody}', want default/web"
pass "Running with $POD_IP ${POD_S}s after kubectl run; eni-cni list: default/web"

begin pod-reachable
reply=$(curl -s --max-time 5 "http://$POD_IP:8080/") || fail "no HTTP answer from $POD_IP:8080"
say "  curl http://$POD_IP:8080/ -> $reply"
[[ $reply == "web $POD_IP:8080 "* ]] || fail "unexpected answer: $reply"
# The pod's resolver (kubelet points it at the kube-dns Service) answers
# through kube-proxy's DNAT to a CoreDNS pod: pod to pod over eni-cni.
reply=$(curl -s --max-time 10 "http://$POD_IP:8080/resolve?name=kubernetes.default.svc.cluster.local") ||
	fail "the pod could not resolve kubernetes.default.svc.cluster.local: $reply"
say "  curl http://$POD_IP:8080/resolve?name=kubernetes.default.svc.cluster.local -> $reply"
[ "$reply" = 10.96.0.1 ] || fail "kubernetes.default resolved to '$reply', want 10.96.0.1"
pass "HTTP from the node to the pod; the pod resolves cluster DNS through CoreDNS's Service"

begin kubectl-delete-frees-address
VETH=$(alloc_json | jq -r --arg ip "$POD_IP" '.allocations[] | select(.ip == $ip) | .hostVeth')
show k delete pod web --wait=true --timeout=60s || fail "kubectl delete failed"
wait_for 30 pod_gone || fail "pod web still listed 30 s after kubectl delete"
wait_for 30 ip_free "$POD_IP" ||
	fail "$POD_IP still allocated 30 s after the pod was deleted"
show eni list
! ip link show "$VETH" >/dev/null 2>&1 || fail "host veth $VETH of $POD_IP left"
! ip -4 rule show | grep -qw "$POD_IP" || fail "rule of $POD_IP left: $(ip -4 rule show | grep -w "$POD_IP")"
pass "$POD_IP freed, its veth $VETH and rules gone"

if [ -n "${E2E_CLUSTER_HOOK:-}" ]; then
	begin cluster-hook
	"$E2E_CLUSTER_HOOK" || fail "E2E_CLUSTER_HOOK $E2E_CLUSTER_HOOK failed (exit $?)"
	pass "$E2E_CLUSTER_HOOK exited 0"
fi

begin kubeadm-reset
kubeadm reset -f --cri-socket "$E2E_ENDPOINT" >"$E2E_RUN/logs/kubeadm-reset.log" 2>&1 || {
	tail -n 20 "$E2E_RUN/logs/kubeadm-reset.log" >&2
	fail "kubeadm reset failed"
}
grep -E '^\[(reset|preflight)\]' "$E2E_RUN/logs/kubeadm-reset.log" | sed 's/^/  | /'
! kubelet_pid >/dev/null || fail "kubelet still running after kubeadm reset"
[ -z "$(ls -A /etc/kubernetes/manifests 2>/dev/null)" ] || fail "static pod manifests left: $(ls /etc/kubernetes/manifests)"
[ -z "$(e2e_pods)" ] || fail "sandboxes left after kubeadm reset: $(e2e_pods | tr '\n' ' ')"
left=$(alloc_json | jq -r '[.allocations[] | "\(.podNamespace)/\(.podName) \(.ip)"] | join(", ")')
[ -z "$left" ] || fail "addresses still allocated after every pod was removed: $left"
pass "kubelet stopped, control plane and every pod removed; the CoreDNS pods' addresses freed by their DELs"

begin eni-cni-uninstall
show eni uninstall || fail "eni-cni uninstall failed"
[ ! -e /etc/cni/net.d/10-eni-cni.conflist ] && [ ! -e /opt/cni/bin/eni-cni ] || fail "conflist or binary left"
pass "conflist and binary removed"

begin teardown-leaves-nothing
e2e_stop || fail "stopping containerd failed"
kl_cleanup_cgroups
e2e_check_clean || fail "left behind (above)"
[ -z "$(ip -o link show | grep -v -E ': (lo|eth0|eth0-peer)[@:]')" ] || fail "links left in the node namespace: $(ip -o link show | cut -d: -f2 | tr '\n' ' ')"
pass "containerd stopped; no shim, sandbox, mount, netns, cgroup or link left"

say "kubeadm init ${INIT_S}s; node Ready ${READY_S}s after eni-cni install; pod Running ${POD_S}s after kubectl run"
