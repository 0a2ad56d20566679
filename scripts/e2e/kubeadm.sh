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
#   E2E_CLUSTER_HOOK=/path/to/exe runs it after the checks, before teardown,
#   in the node's namespaces with KUBECONFIG (admin.conf) and E2E_SOCK
#   exported (e.g. scripts/e2e/conformance.sh); its failure fails the run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
# shellcheck source-path=SCRIPTDIR source=kubelet-lib.sh
. "$here/kubelet-lib.sh"

ENI_BIN=$(realpath "${1:?usage: kubeadm.sh /path/to/eni-cni}")
KUBE_VER=v1.34.2
KADM_DIR=${KADM_DIR:-$E2E_TOOLS/kubeadm-$KUBE_VER}
KL_BIN=$KADM_DIR/bin/kubelet           # reports v1.34.2, as kubeadm's preflight wants
REPO=localhost/eni-cni-kubeadm         # kubeadm's imageRepository
WEB_IMAGE=localhost/eni-cni/web:test   # the pod of `kubectl run`
NODE=kadm-node
NODE_IP=10.199.0.10                    # on a dummy interface of the private netns
NODE_GW=10.199.0.1                     # nobody: the default route leads nowhere
POOL_RANGE=10.199.1.10-10.199.1.29
POOL_RE='^10\.199\.1\.'
OVERLAYS=(/etc /var/lib /var/log /opt /usr/libexec /run)
# What a kubeadm node with eni-cni has on disk: must be as found after the run.
HOST_PATHS=(/etc/kubernetes /var/lib/kubelet /var/lib/etcd /etc/cni/net.d /opt/cni/bin
	/var/lib/eni-cni /etc/cron.d/eni-cni /usr/libexec/kubernetes /var/log/pods /var/log/containers
	/etc/crictl.yaml /root/.kube /run/xtables.lock)

# Emptied in the overlays at the start: a new node has none of them.
FRESH_PATHS=(/etc/kubernetes /var/lib/kubelet /var/lib/etcd /etc/cni/net.d /opt/cni/bin /var/lib/eni-cni
	/var/lib/cni /etc/cron.d/eni-cni /usr/libexec/kubernetes /var/log/pods /var/log/containers
	/etc/crictl.yaml /run/xtables.lock)

say() { printf 'kubeadm-e2e: %s\n' "$*"; }
CASE=setup CASE_T0=$EPOCHREALTIME
begin() {
	CASE=$1 CASE_T0=$EPOCHREALTIME
	say "--- $1"
}
pass() { say "PASS $CASE ($(e2e_since "$CASE_T0")s): $*"; }
fail() {
	say "FAIL $CASE: $*" >&2
	diagnostics >&2 || true
	exit 1
}

# host_paths_state: one line per HOST_PATHS entry: absent, or a digest of
# what is there and below it (names, sizes, modes, times).
host_paths_state() {
	local p
	for p in "${HOST_PATHS[@]}"; do
		if [ -e "$p" ] || [ -L "$p" ]; then
			printf '%s %s\n' "$p" "$(find "$p" -printf '%p %s %m %T@\n' 2>/dev/null | sha256sum | cut -c1-16)"
		else
			printf '%s absent\n' "$p"
		fi
	done
}

# ------------------------------------------------------------------ outside
# The host's side: the lock, what must not change, the private namespaces.
if [ "${KADM_INNER:-0}" != 1 ]; then
	[ "$(id -u)" = 0 ] || { say "needs root" >&2; exit 1; }
	for b in kubeadm kubectl kubelet images.tar; do
		[ -e "$KADM_DIR/bin/$b" ] || [ -e "$KADM_DIR/$b" ] ||
			{ say "$KADM_DIR has no $b: run scripts/install-test-deps.sh --with-kubeadm" >&2; exit 1; }
	done
	e2e_host_lock
	T_START=$EPOCHREALTIME # the run, not the wait for the lock
	before=$(host_paths_state)
	# kubelet sets these kernel-wide tunables (no namespace holds them).
	e2e_save_sysctls "${KL_SYSCTLS[@]}"
	trap 'e2e_restore_sysctls' EXIT # also on Ctrl-C; a no-op once restored
	rc=0
	KADM_INNER=1 unshare --mount --net --propagation private -- bash "$0" "$@" || rc=$?
	CASE=host-untouched CASE_T0=$EPOCHREALTIME
	say "--- host-untouched"
	e2e_restore_sysctls || rc=1
	after=$(host_paths_state)
	if [ "$before" != "$after" ]; then
		say "FAIL host-untouched: node paths changed on this machine:" >&2
		diff <(echo "$before") <(echo "$after") >&2 || true
		exit 1
	fi
	[ "$rc" = 0 ] && pass "${HOST_PATHS[*]} as found; kubelet's sysctls restored" &&
		say "whole run: $(e2e_since "$T_START")s"
	exit "$rc"
fi

# ------------------------------------------------------------------ inside
# A private mount namespace and network namespace, ours alone.

KUBECTL=$KADM_DIR/bin/kubectl
export KUBECONFIG=/etc/kubernetes/admin.conf
E2E_CONTAINERD=1
E2E_NETNS_UNDER_STATE=1
E2E_PAUSE_TAR=$KADM_DIR/images.tar
E2E_PAUSE_IMAGE=$REPO/pause:3.10.1
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

# show CMD...: run CMD, print its output indented; its exit status.
show() {
	local out rc=0
	out=$("$@" 2>&1) || rc=$?
	[ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/  | /'
	return $rc
}

# wait_for SECS CMD...: until CMD succeeds.
wait_for() {
	local secs=$1 i
	shift
	for ((i = 0; i < secs * 5; i++)); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

# kubelet_pid: the PID of the kubelet the systemctl stand-in started, if alive.
kubelet_pid() {
	local pid
	pid=$(cat "$E2E_RUN/kubelet.pid" 2>/dev/null) || return 1
	_e2e_alive "$pid" && case $(_e2e_cmdline "$pid") in *"--config=/var/lib/kubelet/config.yaml"*) ;; *) return 1 ;; esac &&
		echo "$pid"
}

cleanup() {
	local rc=$? pid d
	trap - EXIT
	set +e
	pid=$(kubelet_pid) && _e2e_kill_wait "$pid" 20
	kl_cleanup_cgroups
	E2E_KEEP_RUN=1 e2e_cleanup 2>/dev/null
	# Deepest first; lazily if something still holds one (the namespace dies anyway).
	for d in $(printf '%s\n' "${OVERLAYS[@]}" | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2-); do
		mountpoint -q "$d" && { umount "$d" 2>/dev/null || umount -l "$d"; }
	done
	if [ "$KEEP_RUN" = 1 ]; then
		say "kept run dir $E2E_RUN"
	else
		rm -rf "$E2E_RUN"
	fi
	exit "$rc"
}

# overlay_node_paths: an overlay on each of OVERLAYS, upper layer in the run
# dir: the node's paths are writable here and nothing reaches the host.
overlay_node_paths() {
	local d n
	for d in "${OVERLAYS[@]}"; do
		[ -d "$d" ] || continue
		n=$E2E_RUN/overlay/${d//\//_}
		mkdir -p "$n/upper" "$n/work"
		mount -t overlay overlay -o "lowerdir=$d,upperdir=$n/upper,workdir=$n/work" "$d" ||
			fail "overlay on $d"
	done
}

# fresh_node_paths: the paths a new node has empty or not at all, emptied in
# the overlays (whiteouts in the upper layer: the host's copies, e.g. another
# suite's /var/lib/eni-cni or a conflist in /etc/cni/net.d, stay as they are
# and out of this node's sight). Refuses unless this is a mount namespace of
# its own with the overlay mounted.
fresh_node_paths() {
	local p o top
	[ "$(readlink /proc/self/ns/mnt)" != "$(readlink /proc/1/ns/mnt)" ] || fail "not in a private mount namespace"
	for p in "${FRESH_PATHS[@]}"; do
		top=
		for o in "${OVERLAYS[@]}"; do
			case $p in "$o"/*) top=$o ;; esac
		done
		[ -n "$top" ] && [ "$(findmnt -n -o FSTYPE --mountpoint "$top")" = overlay ] ||
			fail "$p is not under one of this run's overlays"
		rm -rf "$p"
	done
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

# write_systemctl: the stand-in for systemd's systemctl, for the kubelet
# unit only; starts kubelet as kubeadm's drop-in 10-kubeadm.conf does.
write_systemctl() {
	mkdir -p "$E2E_RUN/bin"
	cat >"$E2E_RUN/bin/kubelet-service" <<EOF
#!/bin/bash
# What /usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf runs.
KUBELET_KUBECONFIG_ARGS="--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
KUBELET_CONFIG_ARGS="--config=/var/lib/kubelet/config.yaml"
[ ! -f /var/lib/kubelet/kubeadm-flags.env ] || . /var/lib/kubelet/kubeadm-flags.env
[ ! -f /etc/default/kubelet ] || . /etc/default/kubelet
exec $KL_BIN \$KUBELET_KUBECONFIG_ARGS \$KUBELET_CONFIG_ARGS \$KUBELET_KUBEADM_ARGS \$KUBELET_EXTRA_ARGS
EOF
	cat >"$E2E_RUN/bin/systemctl" <<EOF
#!/bin/bash
# scripts/e2e/kubeadm.sh's stand-in for systemctl (no systemd on this
# machine): knows the kubelet unit only.
run=$E2E_RUN
EOF
	cat >>"$E2E_RUN/bin/systemctl" <<'EOF'
[ -z "${E2E_HOST_LOCK_FD:-}" ] || eval "exec ${E2E_HOST_LOCK_FD}>&-"
echo "$(date +%T.%N) systemctl $*" >>"$run/logs/systemctl.log"
verb=$1 unit=${2%.service}
[ "$verb" = daemon-reload ] && exit 0
if [ "$unit" != kubelet ]; then
	echo "systemctl (stand-in): unit $unit not found; only kubelet is known here" >&2
	exit 5
fi
alive() {
	local pid
	pid=$(cat "$run/kubelet.pid" 2>/dev/null) && [ -r "/proc/$pid/stat" ] &&
		! grep -q '^[0-9]* ([^)]*) [ZX]' "/proc/$pid/stat" && echo "$pid"
}
stop() {
	local pid i
	pid=$(alive) || return 0
	kill -TERM "$pid"
	for ((i = 0; i < 200; i++)); do alive >/dev/null || return 0; sleep 0.1; done
	kill -KILL "$pid"
}
start() {
	alive >/dev/null && return 0
	setsid "$run/bin/kubelet-service" </dev/null >>"$run/logs/kubelet.log" 2>&1 &
	echo $! >"$run/kubelet.pid"
}
case $verb in
start) start ;;
restart) stop; start ;;
stop) stop ;;
is-active) if alive >/dev/null; then echo active; else echo inactive; exit 3; fi ;;
is-enabled) echo enabled ;;
enable) ;;
status)
	echo "* kubelet.service - kubelet (scripts/e2e/kubeadm.sh stand-in)"
	echo "     Loaded: loaded (stand-in; enabled)"
	if alive >/dev/null; then echo "     Active: active (running), pid $(alive)"; else echo "     Active: inactive (dead)"; exit 3; fi ;;
*) echo "systemctl (stand-in): $verb not supported" >&2; exit 1 ;;
esac
EOF
	chmod 0755 "$E2E_RUN/bin/systemctl" "$E2E_RUN/bin/kubelet-service"
	ln -sf "$KL_BIN" "$E2E_RUN/bin/kubelet"
	ln -sf "$KADM_DIR/bin/kubeadm" "$E2E_RUN/bin/kubeadm"
	ln -sf "$KADM_DIR/bin/kubectl" "$E2E_RUN/bin/kubectl"
	ln -sf "$E2E_TOOLS/bin/crictl" "$E2E_RUN/bin/crictl"
	export PATH=$E2E_RUN/bin:$PATH
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
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# No systemd, cgroup v1 and swap on this machine; pods' cgroups under the run's.
cgroupDriver: cgroupfs
cgroupRoot: $E2E_CGROUP_PARENT
failCgroupV1: false
failSwapOn: false
maxPods: 20
# Never delete an offline image, never evict over a busy shared disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
# nf_conntrack_max is kernel-wide: leave it (and the timeouts) as they are.
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

node_ready() {
	[ "$(k get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
# addons_ready: the kube-proxy pod Running, every CoreDNS pod Ready.
addons_ready() {
	local p d
	p=$(k get pods -n kube-system -l k8s-app=kube-proxy -o jsonpath='{.items[*].status.phase}' 2>/dev/null)
	d=$(k get pods -n kube-system -l k8s-app=kube-dns -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{" "}{end}' 2>/dev/null)
	[ "$p" = Running ] && [ -n "$d" ] && [ -z "${d//True /}" ]
}
pod_phase() { k get pod web -o jsonpath='{.status.phase}' 2>/dev/null; }
pod_ready() { [ "$(k get pod web -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; }
ip_free() { [ -z "$(alloc_json | jq -r --arg ip "$1" '.allocations[] | select(.ip == $ip) | .ip')" ]; }
pod_gone() { ! k get pod web >/dev/null 2>&1; }

trap cleanup EXIT
e2e_init
chmod 0755 "$E2E_RUN"
overlay_node_paths
fresh_node_paths
export HOME=$E2E_RUN/home # kubectl's cache (~/.kube) too stays in the run
mkdir -p "$HOME"
node_network
# containerd as on a node: CNI in /opt/cni/bin and /etc/cni/net.d (the
# overlays), sandbox image = kubeadm's pause.
E2E_CNI_BIN_DIR=/opt/cni/bin E2E_CNI_CONF_DIR=/etc/cni/net.d
mkdir -p "$E2E_CNI_BIN_DIR" "$E2E_CNI_CONF_DIR"
# loopback (containerd 1.6 sets up lo with it) and portmap, as a node's
# kubernetes-cni package has them: eni-cni install chains portmap (hostPort).
e2e_install_cni_plugins "$E2E_TOOLS/bin/portmap"
_kl_make_cgroup_root
write_systemctl
e2e_start_containerd
printf 'runtime-endpoint: %s\nimage-endpoint: %s\n' "$E2E_ENDPOINT" "$E2E_ENDPOINT" >/etc/crictl.yaml
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
! node_ready || fail "node Ready before any CNI was installed"
say "  Ready=False: $reason"
pass "NotReady, as expected without a CNI"

begin eni-cni-install
install -m 0755 "$ENI_BIN" "$E2E_RUN/eni-cni"
show "$E2E_RUN/eni-cni" install --pool static --ranges "$POOL_RANGE" --mtu 1500 || fail "eni-cni install failed"
[ -x /opt/cni/bin/eni-cni ] && [ -s /etc/cni/net.d/10-eni-cni.conflist ] || fail "binary or conflist not installed"
pass "binary and conflist in place"

begin node-ready
t0=$EPOCHREALTIME
wait_for 90 node_ready || fail "node not Ready 90 s after eni-cni install"
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
