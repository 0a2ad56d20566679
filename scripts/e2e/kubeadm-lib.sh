# shellcheck shell=bash
# scripts/e2e/kubeadm-lib.sh: what the kubeadm suites share: a kubeadm node
# made of a private mount namespace (overlays on the node's paths, upper
# layers in the run dir) and a private network namespace, kubelet started by
# a systemctl stand-in as kubeadm's systemd drop-in would, the kubeadm
# configuration as the quick start runs it, and the checks that the machine
# is left as found. Sourced after lib.sh and kubelet-lib.sh by kubeadm.sh
# (one node) and cluster.sh (several); the caller defines say, pass, fail
# and k (kubectl with the cluster's admin.conf).
#
#   kadm_outside INNER_VAR SCRIPT ARGS...   the host's side: tools present, host lock,
#                                node paths and kubelet's sysctls as found afterwards;
#                                re-runs SCRIPT with INNER_VAR=1 under unshare -m -n
#   kadm_node_setup              run dir, kadm_node_paths, HOME (in the node's mount namespace)
#   kadm_node_runtime            containerd, CNI dirs, cgroupRoot, systemctl stand-in
#   kadm_node_paths              overlays on KADM_OVERLAYS, FRESH_PATHS emptied in them
#   kadm_unmount_overlays        deepest first (lazily if something still holds one)
#   write_systemctl              the systemctl stand-in and kubelet-service in $E2E_RUN/bin
#   kadm_kubelet_config          the KubeletConfiguration + KubeProxyConfiguration documents
#   kubelet_pid                  the stand-in's kubelet, if alive
#   kadm_stop_kubelet            stop it, remove its cgroups
#   node_ready NODE / addons_ready / show CMD... / wait_for SECS CMD...
#   host_paths_state             digest of HOST_PATHS (absent, or names/sizes/modes/times)

KUBE_VER=v1.34.2
KADM_DIR=${KADM_DIR:-$E2E_TOOLS/kubeadm-$KUBE_VER}
KL_BIN=$KADM_DIR/bin/kubelet         # reports v1.34.2, as kubeadm's preflight wants
KUBECTL=$KADM_DIR/bin/kubectl
REPO=localhost/eni-cni-kubeadm       # kubeadm's imageRepository
WEB_IMAGE=localhost/eni-cni/web:test # the pods of `kubectl run`
KADM_OVERLAYS=(/etc /var/lib /var/log /opt /usr/libexec /run)
# What a kubeadm node with eni-cni has on disk: must be as found after the run.
HOST_PATHS=(/etc/kubernetes /var/lib/kubelet /var/lib/etcd /etc/cni/net.d /opt/cni/bin
	/var/lib/eni-cni /etc/cron.d/eni-cni /usr/libexec/kubernetes /var/log/pods /var/log/containers
	/etc/crictl.yaml /root/.kube /run/xtables.lock)
# Emptied in the overlays at the start: a new node has none of them.
FRESH_PATHS=(/etc/kubernetes /var/lib/kubelet /var/lib/etcd /etc/cni/net.d /opt/cni/bin /var/lib/eni-cni
	/var/lib/cni /etc/cron.d/eni-cni /usr/libexec/kubernetes /var/log/pods /var/log/containers
	/etc/crictl.yaml /run/xtables.lock)

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

# kadm_outside INNER_VAR SCRIPT ARGS...: the host's side of a suite. Holds
# lib.sh's host lock, runs SCRIPT again with INNER_VAR=1 in a private mount
# and network namespace, then checks (named check host-untouched) that the
# node paths are as found and puts back the kernel-wide tunables kubelet
# sets (no namespace holds them). Exits with the suite's status.
kadm_outside() {
	local inner=$1 script=$2 b rc=0 before after
	shift 2
	[ "$(id -u)" = 0 ] || { say "needs root" >&2; exit 1; }
	for b in kubeadm kubectl kubelet images.tar; do
		[ -e "$KADM_DIR/bin/$b" ] || [ -e "$KADM_DIR/$b" ] ||
			{ say "$KADM_DIR has no $b: run scripts/install-test-deps.sh --with-kubeadm" >&2; exit 1; }
	done
	e2e_host_lock
	T_START=$EPOCHREALTIME # the run, not the wait for the lock
	before=$(host_paths_state)
	e2e_save_sysctls "${KL_SYSCTLS[@]}"
	trap 'e2e_restore_sysctls' EXIT # also on Ctrl-C; a no-op once restored
	env "$inner=1" unshare --mount --net --propagation private -- bash "$script" "$@" || rc=$?
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

# kadm_stop_kubelet: stop the stand-in's kubelet, remove its pod cgroups.
kadm_stop_kubelet() {
	local pid
	pid=$(kubelet_pid) && _e2e_kill_wait "$pid" 20
	kl_cleanup_cgroups
}

# kadm_node_paths: an overlay on each of KADM_OVERLAYS, upper layer in the
# run dir: the node's paths are writable here and nothing reaches the host.
# Then the paths a new node has empty or not at all are emptied in the
# overlays (whiteouts in the upper layer: the host's copies, e.g. another
# suite's /var/lib/eni-cni or a conflist in /etc/cni/net.d, stay as they are
# and out of this node's sight). Refuses unless this is a mount namespace of
# its own.
kadm_node_paths() {
	local d n p o top
	[ "$(readlink /proc/self/ns/mnt)" != "$(readlink /proc/1/ns/mnt)" ] || fail "not in a private mount namespace"
	for d in "${KADM_OVERLAYS[@]}"; do
		[ -d "$d" ] || continue
		n=$E2E_RUN/overlay/${d//\//_}
		mkdir -p "$n/upper" "$n/work"
		mount -t overlay overlay -o "lowerdir=$d,upperdir=$n/upper,workdir=$n/work" "$d" ||
			fail "overlay on $d"
	done
	for p in "${FRESH_PATHS[@]}"; do
		top=
		for o in "${KADM_OVERLAYS[@]}"; do
			case $p in "$o"/*) top=$o ;; esac
		done
		[ -n "$top" ] && [ "$(findmnt -n -o FSTYPE --mountpoint "$top")" = overlay ] ||
			fail "$p is not under one of this run's overlays"
		rm -rf "$p"
	done
}

# kadm_unmount_overlays: deepest first; lazily if something still holds one
# (the mount namespace dies with the node anyway).
kadm_unmount_overlays() {
	local d
	for d in $(printf '%s\n' "${KADM_OVERLAYS[@]}" | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2-); do
		mountpoint -q "$d" && { umount "$d" 2>/dev/null || umount -l "$d"; }
	done
	return 0
}

# write_systemctl: the stand-in for systemd's systemctl, for the kubelet
# unit only; starts kubelet as kubeadm's drop-in 10-kubeadm.conf does. Puts
# $E2E_RUN/bin (with kubeadm, kubectl, crictl) first in PATH.
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
# scripts/e2e/kubeadm-lib.sh's stand-in for systemctl (no systemd on this
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
	echo "* kubelet.service - kubelet (scripts/e2e/kubeadm-lib.sh stand-in)"
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

# kadm_kubelet_config MAXPODS: the KubeletConfiguration and
# KubeProxyConfiguration documents of the kubeadm configuration; kube-proxy
# in E2E_PROXY_MODE (iptables, the default, or nftables).
kadm_kubelet_config() {
	cat <<EOF
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# No systemd, cgroup v1 and swap on this machine; pods' cgroups under the run's.
cgroupDriver: cgroupfs
cgroupRoot: $E2E_CGROUP_PARENT
failCgroupV1: false
failSwapOn: false
maxPods: $1
# Never delete an offline image, never evict over a busy shared disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ${E2E_PROXY_MODE:-iptables}
# nf_conntrack_max is kernel-wide: leave it (and the timeouts) as they are.
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

# node_ready NODE: its Ready condition is True.
node_ready() {
	[ "$(k get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# addons_ready: every kube-proxy pod Running, every CoreDNS pod Ready.
addons_ready() {
	local p d
	p=$(k get pods -n kube-system -l k8s-app=kube-proxy -o jsonpath='{range .items[*]}{.status.phase}{" "}{end}' 2>/dev/null)
	d=$(k get pods -n kube-system -l k8s-app=kube-dns -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{" "}{end}' 2>/dev/null)
	[ -n "$p" ] && [ -z "${p//Running /}" ] && [ -n "$d" ] && [ -z "${d//True /}" ]
}

# kadm_node_setup: in the node's private mount namespace: the run dir
# (e2e_init), the node's paths (kadm_node_paths), HOME in the run dir
# (kubectl's cache, ~/.kube, stays there too).
kadm_node_setup() {
	E2E_CONTAINERD=1
	E2E_NETNS_UNDER_STATE=1
	E2E_PAUSE_TAR=$KADM_DIR/images.tar # every image kubeadm wants, pause included
	E2E_PAUSE_IMAGE=$REPO/pause:3.10.1
	e2e_init
	chmod 0755 "$E2E_RUN"
	kadm_node_paths
	export HOME=$E2E_RUN/home
	mkdir -p "$HOME"
}

# kadm_node_runtime: containerd as on a node (CNI in /opt/cni/bin and
# /etc/cni/net.d, the overlays; sandbox image kubeadm's pause; loopback,
# which containerd 1.6 sets up lo with), the cgroupRoot, the systemctl
# stand-in, /etc/crictl.yaml. After the node's network is up.
kadm_node_runtime() {
	E2E_CNI_BIN_DIR=/opt/cni/bin E2E_CNI_CONF_DIR=/etc/cni/net.d
	mkdir -p "$E2E_CNI_BIN_DIR" "$E2E_CNI_CONF_DIR"
	# loopback (containerd 1.6 sets up lo with it) and portmap, as a node's
	# kubernetes-cni package has them: eni-cni install chains portmap (hostPort).
	e2e_install_cni_plugins "$E2E_TOOLS/bin/portmap"
	_kl_make_cgroup_root
	write_systemctl
	e2e_start_containerd
	printf 'runtime-endpoint: %s\nimage-endpoint: %s\n' "$E2E_ENDPOINT" "$E2E_ENDPOINT" >/etc/crictl.yaml
}
