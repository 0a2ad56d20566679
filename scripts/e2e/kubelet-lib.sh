# shellcheck shell=bash
# scripts/e2e/kubelet-lib.sh: a real kubelet, standalone (no API server,
# static pods only), on top of lib.sh's private containerd. Source lib.sh
# first, then this file:
#
#   e2e_host_lock                        # one kubelet per machine (see below)
#   e2e_init; kl_init                    # run dir; kubelet paths, ports, config
#   e2e_start_containerd; kl_start       # kubelet talks CRI to that containerd
#   kl_put web-0 web-1                   # static pod manifests, written at once
#   kl_wait_ready 60 web-0 web-1         # until kubelet reports them Ready
#   kl_status web-0                      # "uid ip ready restarts" from kubelet's /pods
#   kl_rm web-1; kl_stop; kl_cleanup     # kl_cleanup is part of the EXIT trap
#
# Everything kubelet keeps lives under $KL_DIR ($E2E_RUN/kubelet): root dir,
# cert dir, static pod dir, pod logs, config, log; its cgroups live under
# lib.sh's $E2E_CGROUP_PARENT (kubelet's cgroupRoot), its ports are free
# loopback ports picked per run. kubelet also writes where no flag moves it:
# /var/lib/kubelet/device-plugins/{kubelet.sock,kubelet_internal_checkpoint}
# and links /var/log/containers/*.log; kl_cleanup removes what this run made
# there (and the directories, if this run created them). And it sets the
# kernel tunables of KL_SYSCTLS; kl_init saves them and the caller restores
# them with e2e_restore_sysctls. The device-plugins path is fixed, so only one
# kubelet can run on a machine: hold e2e_host_lock around a run; kl_start
# refuses to start while another kubelet listens there.
#
# Functions:
#   kl_init                  paths, ports, cgroupRoot, config; saves KL_SYSCTLS
#   kl_start / kl_stop       start and wait for healthz and /pods / TERM by recorded PID
#   kl_manifest NAME [JSON]  print a pod manifest (JSON merged into the default pod)
#   kl_put NAME[=JSON]...    write manifests into the static pod dir in one rename each
#   kl_rm NAME...            remove manifests
#   kl_pods                  kubelet's /pods (read-only port) as JSON
#   kl_status NAME           "uid ip ready restarts sandbox-attempts" of a static pod
#   kl_uid NAME / kl_ip NAME
#   kl_wait_ready SECS NAME...   until each is Ready with an IP in kubelet's /pods
#   kl_wait_gone SECS NAME...    until kubelet no longer lists them
#   kl_sandboxes [STATE]     crictl pods -o json of this run's namespace (ready|notready|all)
#   kl_cleanup               kubelet, its files outside $KL_DIR, its cgroups (EXIT trap)
#   kl_version               "Kubernetes vX.Y.Z"
#
# Settings: KL_BIN [$E2E_TOOLS/kubelet-v1.34.2/kubelet], KL_NAMESPACE [eni-kubelet],
# KL_NODE [derived from the run dir], KL_START_TIMEOUT [60], KL_VERBOSITY [2].

: "${KL_BIN:=$E2E_TOOLS/kubelet-v1.34.2/kubelet}"
: "${KL_NAMESPACE:=eni-kubelet}"
: "${KL_START_TIMEOUT:=60}"
: "${KL_VERBOSITY:=2}"
# Kernel tunables kubelet sets at start-up (pkg/kubelet/cm setupKernelTunables).
KL_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
KL_DEVICE_PLUGINS=/var/lib/kubelet/device-plugins
KL_CONTAINER_LOGS=/var/log/containers

# kl_init: after e2e_init. Sets and exports KL_DIR, KL_NODE, KL_CONFIG,
# KL_LOG, KL_MANIFESTS, KL_PORT, KL_RO_PORT, KL_HEALTHZ_PORT; creates the
# cgroupRoot in every hierarchy; writes the KubeletConfiguration.
kl_init() {
	[ -x "$KL_BIN" ] || e2e_die "kubelet not found at $KL_BIN; run scripts/install-test-deps.sh --with-kubelet" || return 1
	KL_DIR=$E2E_RUN/kubelet
	: "${KL_NODE:=eni-node-${E2E_RUN##*.}}"
	KL_NODE=$(printf '%s' "$KL_NODE" | tr '[:upper:]' '[:lower:]')
	KL_CONFIG=$KL_DIR/config.yaml
	KL_LOG=$KL_DIR/kubelet.log
	KL_MANIFESTS=$KL_DIR/manifests
	KL_PID=
	mkdir -p "$KL_DIR/root" "$KL_DIR/pki" "$KL_MANIFESTS" "$KL_DIR/staging" "$KL_DIR/pod-logs" || return 1
	KL_PORT=$(e2e_free_port) && KL_RO_PORT=$(e2e_free_port) && KL_HEALTHZ_PORT=$(e2e_free_port) || return 1
	# What exists before kubelet first runs: kl_cleanup removes only the rest.
	local d
	: >"$KL_DIR/preexisting"
	for d in /var/lib/kubelet "$KL_DEVICE_PLUGINS" "$KL_DEVICE_PLUGINS/kubelet.sock" \
		"$KL_DEVICE_PLUGINS/kubelet_internal_checkpoint" "$KL_CONTAINER_LOGS"; do
		[ -e "$d" ] && echo "$d" >>"$KL_DIR/preexisting"
	done
	e2e_save_sysctls "${KL_SYSCTLS[@]}" || return 1
	_kl_make_cgroup_root || return 1
	_kl_write_config || return 1
	export KL_DIR KL_NODE KL_CONFIG KL_LOG KL_MANIFESTS KL_PORT KL_RO_PORT KL_HEALTHZ_PORT
}

# _kl_make_cgroup_root: kubelet wants its cgroupRoot to exist in every
# hierarchy (cgroup v1 here); cpuset needs cpus and mems before use.
_kl_make_cgroup_root() {
	local h
	for h in /sys/fs/cgroup/*/; do
		[ -d "$h" ] || continue
		mkdir -p "$h${E2E_CGROUP_PARENT#/}" || { e2e_die "cannot create cgroup $h${E2E_CGROUP_PARENT#/}"; return 1; }
	done
	if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
		cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset${E2E_CGROUP_PARENT}/cpuset.cpus" &&
			cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset${E2E_CGROUP_PARENT}/cpuset.mems" ||
			{ e2e_die "cannot set up cpuset ${E2E_CGROUP_PARENT}"; return 1; }
	fi
}

_kl_write_config() {
	cat >"$KL_CONFIG" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Standalone: static pods from this directory only, no API server.
staticPodPath: $KL_MANIFESTS
fileCheckFrequency: 5s
containerRuntimeEndpoint: $E2E_ENDPOINT
imageServiceEndpoint: $E2E_ENDPOINT
# Private listeners on loopback: /pods on the read-only port needs no credentials.
address: 127.0.0.1
port: $KL_PORT
readOnlyPort: $KL_RO_PORT
healthzBindAddress: 127.0.0.1
healthzPort: $KL_HEALTHZ_PORT
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
# No systemd here; cgroup v1; pods' cgroups under this run's cgroup.
cgroupDriver: cgroupfs
cgroupRoot: $E2E_CGROUP_PARENT
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
podLogsDir: $KL_DIR/pod-logs
# Never delete the offline pause image, never evict a test pod over a busy disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
shutdownGracePeriod: 0s
registerNode: false
EOF
}

# kl_version: "Kubernetes vX.Y.Z". A build without version ldflags says
# v0.0.0-master: then the recipe stamp of install-test-deps.sh tells.
kl_version() {
	local v
	v=$("$KL_BIN" --version 2>/dev/null) || v=
	case $v in
	*v0.0.0*) awk '{ print "Kubernetes " $2 }' "${KL_BIN%/*}/kubelet.stamp" 2>/dev/null || echo "$v" ;;
	*) echo "$v" ;;
	esac
}

# kl_other_kubelet: succeed (and say who) if some kubelet other than ours
# listens on the fixed device-plugins socket.
kl_other_kubelet() {
	local s=$KL_DEVICE_PLUGINS/kubelet.sock
	[ -S "$s" ] || return 1
	ss -Hxl 2>/dev/null | awk -v s="$s" '$5 == s { found = 1 } END { exit !found }'
}

# kl_start: start kubelet in the background (log $KL_LOG, PID $KL_PID and
# $KL_DIR/kubelet.pid) and wait until healthz says ok and /pods answers.
kl_start() {
	local i t0=$EPOCHREALTIME
	[ -z "$KL_PID" ] || ! _e2e_alive "$KL_PID" || { e2e_die "kubelet already running (pid $KL_PID)"; return 1; }
	if kl_other_kubelet; then
		e2e_die "another kubelet listens on $KL_DEVICE_PLUGINS/kubelet.sock; only one kubelet can run on a machine (the path is fixed)"
		return 1
	fi
	_e2e_nolock "$KL_BIN" --config="$KL_CONFIG" --root-dir="$KL_DIR/root" --cert-dir="$KL_DIR/pki" \
		--hostname-override="$KL_NODE" --v="$KL_VERBOSITY" </dev/null >>"$KL_LOG" 2>&1 &
	KL_PID=$!
	echo "$KL_PID" >"$KL_DIR/kubelet.pid"
	export KL_PID
	for ((i = 0; i < KL_START_TIMEOUT * 10; i++)); do
		if ! _e2e_alive "$KL_PID"; then
			wait "$KL_PID" 2>/dev/null || true
			grep -E '^[EF][0-9]{4}' "$KL_LOG" | tail -n 20 >&2
			e2e_die "kubelet exited during start-up (log: $KL_LOG)"
			return 1
		fi
		if [ "$(curl -s --max-time 2 "http://127.0.0.1:$KL_HEALTHZ_PORT/healthz" 2>/dev/null)" = ok ] &&
			kl_pods >/dev/null 2>&1; then
			KL_TIME_UP=$(e2e_since "$t0")
			export KL_TIME_UP
			return 0
		fi
		sleep 0.1
	done
	grep -E '^[EF][0-9]{4}' "$KL_LOG" | tail -n 20 >&2
	e2e_die "kubelet not healthy within ${KL_START_TIMEOUT}s (log: $KL_LOG)"
}

# kl_stop: TERM our kubelet (by recorded PID, checking its command line),
# KILL after 20 s. Pods keep running: they belong to containerd.
kl_stop() {
	local pid=${KL_PID:-}
	[ -n "$pid" ] || pid=$(cat "$KL_DIR/kubelet.pid" 2>/dev/null) || true
	[ -n "$pid" ] || return 0
	if _e2e_alive "$pid"; then
		case $(_e2e_cmdline "$pid") in
		*"--config=$KL_CONFIG"*) _e2e_kill_wait "$pid" 20 ;;
		*) e2e_log "pid $pid is not our kubelet any more; not touching it" ;;
		esac
	else
		wait "$pid" 2>/dev/null || true
	fi
	KL_PID=
}

# kl_manifest NAME [JSON]: a static pod running the offline pause image,
# with JSON (an object) merged into it, e.g.
#   '{"spec": {"containers": [{"name": "main", "image": "...", "command": ["/pause", "-v"]}]}}'
kl_manifest() {
	local extra=${2:-}
	[ -n "$extra" ] || extra='{}'
	jq -n --arg name "$1" --arg ns "$KL_NAMESPACE" --arg img "$E2E_PAUSE_IMAGE" --argjson extra "$extra" '{
		apiVersion: "v1", kind: "Pod",
		metadata: { name: $name, namespace: $ns, labels: { app: "eni-cni-kubelet-e2e" } },
		spec: {
			terminationGracePeriodSeconds: 1,
			restartPolicy: "Always",
			containers: [ { name: "main", image: $img, imagePullPolicy: "Never" } ]
		}
	} * $extra'
}

# kl_put NAME[=JSON]...: write the manifests into a staging directory, then
# rename them all into the static pod dir with one mv: kubelet sees them at
# once and never reads a half-written file.
kl_put() {
	local a name extra files=()
	for a in "$@"; do
		name=${a%%=*}
		extra=
		[ "$a" = "$name" ] || extra=${a#*=}
		kl_manifest "$name" "$extra" >"$KL_DIR/staging/$name.json" || return 1
		files+=("$KL_DIR/staging/$name.json")
	done
	mv "${files[@]}" "$KL_MANIFESTS/"
}

# kl_rm NAME...: remove manifests (kubelet then stops and removes the pods).
kl_rm() {
	local n files=()
	for n in "$@"; do files+=("$KL_MANIFESTS/$n.json"); done
	rm -f "${files[@]}"
}

# kl_pods: kubelet's /pods. Standalone, it carries the static pods' status
# (the status manager's view: conditions, podIP, container states).
kl_pods() { curl -sf --max-time 5 "http://127.0.0.1:$KL_RO_PORT/pods"; }

# kl_status NAME: "uid ip ready restarts" of static pod NAME as kubelet
# reports it ("-" for what it does not report).
kl_status() {
	kl_pods | jq -r --arg n "$1-$KL_NODE" '(.items // [])[] | select(.metadata.name == $n) |
		[ .metadata.uid, (.status.podIP // "-"),
		  ((.status.conditions // []) | map(select(.type == "Ready"))[0].status // "-"),
		  ((.status.containerStatuses // [])[0].restartCount // 0) ] | map(tostring) | join(" ")'
}
kl_uid() { kl_status "$1" | cut -d' ' -f1; }
kl_ip() { kl_status "$1" | cut -d' ' -f2; }

# kl_ready_names: short names of this namespace's static pods that kubelet
# reports Ready with an IP, one "name ip" a line.
kl_ready_names() {
	kl_pods | jq -r --arg sfx "-$KL_NODE" --arg ns "$KL_NAMESPACE" '(.items // [])[] |
		select(.metadata.namespace == $ns and (.status.podIP // "") != "" and
			((.status.conditions // []) | any(.type == "Ready" and .status == "True"))) |
		"\(.metadata.name | rtrimstr($sfx)) \(.status.podIP)"'
}

# kl_wait_ready SECS NAME...: until kubelet reports every NAME Ready with an
# IP; on timeout, print what it reports and fail.
kl_wait_ready() {
	local secs=$1 i n missing
	shift
	for ((i = 0; i < secs * 5; i++)); do
		missing=$(comm -23 <(printf '%s\n' "$@" | sort) <(kl_ready_names 2>/dev/null | cut -d' ' -f1 | sort))
		[ -n "$missing" ] || return 0
		sleep 0.2
	done
	for n in $missing; do e2e_log "not Ready after ${secs}s: $n ($(kl_status "$n"))"; done
	return 1
}

# kl_wait_gone SECS NAME...: until kubelet lists none of them.
kl_wait_gone() {
	local secs=$1 i left
	shift
	for ((i = 0; i < secs * 5; i++)); do
		left=$(comm -12 <(printf '%s\n' "$@" | sort) <(kl_pods 2>/dev/null |
			jq -r --arg sfx "-$KL_NODE" '(.items // [])[].metadata.name | rtrimstr($sfx)' | sort))
		[ -n "$left" ] || return 0
		sleep 0.2
	done
	e2e_log "still listed by kubelet after ${secs}s: $(tr "\n" " " <<<"$left")"
	return 1
}

# kl_sandboxes [ready|notready|all]: this namespace's sandboxes as the
# runtime lists them: "id name attempt state uid" a line (name without the
# node suffix).
kl_sandboxes() {
	local st=()
	case ${1:-all} in
	ready) st=(--state ready) ;;
	notready) st=(--state notready) ;;
	esac
	e2e_crictl pods "${st[@]}" --namespace "$KL_NAMESPACE" -o json |
		jq -r --arg sfx "-$KL_NODE" '(.items // [])[] |
			"\(.id) \(.metadata.name | rtrimstr($sfx)) \(.metadata.attempt) \(.state) \(.metadata.uid)"'
}

# kl_cleanup_cgroups: remove the cgroups kubelet made under the run's
# cgroupRoot (kubepods, QoS classes, pods), deepest first, keeping the root
# for lib.sh's own cleanup and check.
kl_cleanup_cgroups() {
	local d
	for d in $(_e2e_cgroup_dirs); do
		[ "$d" = "${d%/*}/${E2E_CGROUP_PARENT#/}" ] && continue
		[ -s "$d/cgroup.procs" ] || rmdir "$d" 2>/dev/null || true
	done
}

# kl_cleanup: stop kubelet, remove what it made outside $KL_DIR (our links in
# /var/log/containers, the device-plugins socket and checkpoint, directories
# it created) and its cgroups. Safe to call twice and before kl_init.
kl_cleanup() {
	local f t i m
	[ -n "${KL_DIR:-}" ] && [ -d "$KL_DIR" ] || return 0
	kl_stop
	# kubelet makes its root dir a shared bind mount of itself (and would
	# mount pod volumes under it): unmount, deepest first, repeated for
	# mounts stacked on one point.
	for ((i = 0; i < 5; i++)); do
		m=$(awk -v r="$KL_DIR/" 'index($5 "/", r) == 1 { print length($5) "\t" $5 }' /proc/self/mountinfo | sort -rn | cut -f2-)
		[ -n "$m" ] || break
		for f in $m; do umount "$f" 2>/dev/null || umount -l "$f" 2>/dev/null || e2e_log "cannot unmount $f"; done
	done
	if [ -d "$KL_CONTAINER_LOGS" ]; then
		for f in "$KL_CONTAINER_LOGS"/*; do
			[ -L "$f" ] || continue
			t=$(readlink "$f")
			case $t in "$KL_DIR"/*) rm -f "$f" ;; esac
		done
	fi
	if kl_other_kubelet; then
		: # the socket is someone else's now
	else
		for f in "$KL_DEVICE_PLUGINS/kubelet.sock" "$KL_DEVICE_PLUGINS/kubelet_internal_checkpoint"; do
			grep -qxF "$f" "$KL_DIR/preexisting" || rm -f "$f"
		done
	fi
	for f in "$KL_DEVICE_PLUGINS" /var/lib/kubelet "$KL_CONTAINER_LOGS"; do
		grep -qxF "$f" "$KL_DIR/preexisting" || rmdir "$f" 2>/dev/null || true
	done
	kl_cleanup_cgroups
}

# kl_check_host_clean: fail, listing them, if kubelet's files outside
# $KL_DIR are left (what kl_init did not find before the run).
kl_check_host_clean() {
	local f bad=0
	for f in /var/lib/kubelet "$KL_DEVICE_PLUGINS" "$KL_DEVICE_PLUGINS/kubelet.sock" \
		"$KL_DEVICE_PLUGINS/kubelet_internal_checkpoint" "$KL_CONTAINER_LOGS"; do
		if [ -e "$f" ] && ! grep -qxF "$f" "$KL_DIR/preexisting"; then
			e2e_log "left: $f"
			bad=1
		fi
	done
	if [ -d "$KL_CONTAINER_LOGS" ]; then
		for f in "$KL_CONTAINER_LOGS"/*; do
			[ -L "$f" ] || continue
			case $(readlink "$f") in "$KL_DIR"/*) e2e_log "left: $f"; bad=1 ;; esac
		done
	fi
	return $bad
}
