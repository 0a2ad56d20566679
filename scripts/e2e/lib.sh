# shellcheck shell=bash
# scripts/e2e/lib.sh: a private containerd (CRI) + runc + crictl for
# end-to-end tests of CNI plugins. Source it from a bash script:
#
#   . scripts/e2e/lib.sh
#   e2e_init                                   # run dir, variables
#   trap e2e_cleanup EXIT                      # always undo everything
#   e2e_install_cni_plugins "$E2E_TOOLS/bin/ptp" "$E2E_TOOLS/bin/host-local"
#   e2e_write_conflist 10-pods.conflist <<<"$json"
#   e2e_start_containerd                       # config, start, wait, import pause
#   id=$(e2e_runp pod-a); ip=$(e2e_pod_ip "$id")
#   e2e_netns_exec "$id" ping -c1 10.250.0.3
#   e2e_stopp "$id"; e2e_rmp "$id"
#   e2e_stop && e2e_check_clean
#
# Everything the runtime makes lives under the run dir $E2E_RUN
# (/tmp/eni-e2e.XXXX): containerd root and state, its sockets, runc root, CNI
# bin and conf dirs (unless the caller gives others), logs, and whatever the
# conflist points there with "@RUN@" (host-local dataDir, a plugin's stateDir).
# Outside it: pod network namespaces (/run/netns/cni-*, or
# $E2E_RUN/state/io.containerd.grpc.v1.cri/netns with E2E_NETNS_UNDER_STATE=1),
# shim sockets (/run/containerd/s/<hash>), cgroups under
# /sys/fs/cgroup/<ctrl>/$E2E_CGROUP_PARENT, libcni's cache in
# /var/lib/cni/results. Each is recorded or derivable from the run, and only
# those are removed: processes are signalled only by the PID this library
# started, or when their command line names this run's socket, or they sit in
# this run's cgroup.
#
# Functions:
#   e2e_init                      make the run dir, set and export the paths below
#   e2e_install_cni_plugins F...  copy plugin binaries into the CNI bin dir (+ loopback)
#   e2e_write_conflist NAME       conflist from stdin into the conf dir (@RUN@ -> run dir)
#   e2e_write_containerd_config   containerd.toml for E2E_CONTAINERD=1 (v2 format) or 2 (v3)
#   e2e_start_containerd          start it (writes the config if absent), wait, import pause
#   e2e_import_pause              ctr images import of the pause tar, wait for CRI to see it
#   e2e_wait_network_ready [S]    wait for CRI NetworkReady=true
#   e2e_crictl ARGS / e2e_ctr ARGS  crictl / ctr (namespace k8s.io) on this run's socket
#   e2e_pod_config NAME [NS [UID [ATTEMPT]]]  write a sandbox config JSON, print its path
#   e2e_runp NAME [NS [UID [ATTEMPT]]]        runp with such a config, print the pod ID
#   e2e_runp_file CONFIG          runp with the caller's config, print the pod ID
#   e2e_inspectp ID / e2e_pod_ip ID / e2e_pod_netns ID   inspectp JSON / pod IP / netns path
#   e2e_netns_exec ID CMD...      run CMD in the pod's netns (ip netns exec, or nsenter)
#   e2e_stopp ID / e2e_rmp ID     stop / remove a sandbox (each = one CNI DEL)
#   e2e_pods                      IDs of all sandboxes of this containerd
#   e2e_remove_all_pods           stopp + rmp them all
#   e2e_stop_containerd           TERM (10 s) then KILL our containerd, by recorded PID
#   e2e_stop                      e2e_remove_all_pods + e2e_stop_containerd
#   e2e_check_clean               fail, listing them, if things of this run are left
#   e2e_cleanup                   undo everything (EXIT trap), graceful then forced
#   e2e_now / e2e_since T         timestamps / elapsed seconds
#   e2e_host_lock                 wait for, then hold, the machine-wide lock of suites that
#                                 touch the host (network namespace, kubelet's fixed paths)
#   e2e_save_sysctls KEY...       remember sysctls (e.g. net.ipv4.ip_forward) of the host
#   e2e_restore_sysctls           put them back and say which ones changed (EXIT trap)
#   e2e_free_port                 a free TCP port on 127.0.0.1 (for private listeners)
#
# Settings (set before e2e_init / e2e_start_containerd; defaults in brackets):
#   E2E_TOOLS             tools dir of scripts/install-test-deps.sh [${ENI_CNI_TOOLS:-/opt/eni-cni-test}]
#   E2E_CONTAINERD        1 = Debian containerd 1.6 (config version 2, sandbox_image),
#                         2 = containerd v2 from $E2E_TOOLS/containerd2/bin
#                         (config version 3, pinned_images.sandbox) [1]
#   E2E_CNI_BIN_DIR       CNI bin dir [$E2E_RUN/cni/bin]
#   E2E_CNI_CONF_DIR      CNI conf dir [$E2E_RUN/cni/net.d]
#   E2E_SNAPSHOTTER       overlayfs | native | auto (overlayfs if an overlay mount works here) [auto]
#   E2E_NETNS_UNDER_STATE 1 = pod netns under the run's state dir instead of /run/netns [0]
#   E2E_PAUSE_TAR         [$E2E_TOOLS/pause.tar]
#   E2E_PAUSE_IMAGE       [localhost/eni-cni/pause:test]
#   E2E_START_TIMEOUT     seconds to wait for containerd to answer [20]
#   E2E_WAIT_NETWORK_READY 1 = e2e_start_containerd waits for CRI NetworkReady when a
#                         conflist is present (0 to test a plugin whose STATUS fails) [1]
#   E2E_LOG_LEVEL         containerd log level [info]
#   E2E_KEEP_RUN          1 = e2e_cleanup keeps the run dir (logs) [0]
#   E2E_CLEANUP_RESTART   1 = e2e_cleanup restarts a dead containerd to remove left pods [1]
#   E2E_NETNS             run containerd (and so every CNI call) in this network namespace
#                         (a path such as /run/netns/NAME) instead of the caller's [unset]
#   E2E_HOST_LOCK         lock file of e2e_host_lock [/run/eni-cni-test/host.lock]
#   E2E_HOST_LOCK_WAIT    seconds e2e_host_lock waits before giving up [3600]
# Exported by e2e_init / e2e_start_containerd:
#   E2E_RUN, E2E_SOCK (path), E2E_ENDPOINT (unix://...), E2E_CRICTL_CONFIG,
#   E2E_CONTAINERD_CONFIG, E2E_CONTAINERD_LOG, E2E_CONTAINERD_PID,
#   E2E_CGROUP_PARENT, E2E_SNAPSHOTTER (resolved), E2E_CNI_BIN_DIR, E2E_CNI_CONF_DIR,
#   E2E_PAUSE_TAR, E2E_CRICTL, E2E_CTR, E2E_CONTAINERD_BIN,
#   E2E_TIME_UP / E2E_TIME_IMPORT / E2E_TIME_READY (seconds, from e2e_start_containerd)

: "${E2E_TOOLS:=${ENI_CNI_TOOLS:-/opt/eni-cni-test}}"
: "${E2E_CONTAINERD:=1}"
: "${E2E_SNAPSHOTTER:=auto}"
: "${E2E_NETNS_UNDER_STATE:=0}"
: "${E2E_PAUSE_IMAGE:=localhost/eni-cni/pause:test}"
: "${E2E_START_TIMEOUT:=20}"
: "${E2E_WAIT_NETWORK_READY:=1}"
: "${E2E_LOG_LEVEL:=info}"
: "${E2E_HOST_LOCK:=/run/eni-cni-test/host.lock}"
: "${E2E_HOST_LOCK_WAIT:=3600}"

# ------------------------------------------------------------------ helpers

e2e_log() { printf 'e2e: %s\n' "$*" >&2; }
e2e_die() {
	printf 'e2e: FATAL: %s\n' "$*" >&2
	return 1
}

# e2e_now: wall clock in seconds with microseconds.
e2e_now() { printf '%s\n' "$EPOCHREALTIME"; }
# e2e_since START: seconds elapsed since START (from e2e_now), 3 decimals.
e2e_since() { awk -v s="$1" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.3f\n", e - s }'; }

# Named checks of the suites that use them: begin NAME starts one, pass
# MESSAGE ends it, fail MESSAGE ends it and the run after the suite's own
# diagnostics (each suite defines say and diagnostics; a suite with checks
# of another shape defines its own begin, pass and fail after sourcing).
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

# _e2e_alive PID: the process exists and is not a zombie.
_e2e_alive() {
	local st
	[ -r "/proc/$1/stat" ] || return 1
	st=$(sed -E 's/^.*\) (.).*$/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# _e2e_cmdline PID: the command line with NULs as spaces.
_e2e_cmdline() { tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline"; }

# _e2e_kill_wait PID SECONDS: TERM, wait up to SECONDS, then KILL and wait.
_e2e_kill_wait() {
	local pid=$1 secs=$2 i
	_e2e_alive "$pid" || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < secs * 10; i++)); do
		_e2e_alive "$pid" || break
		sleep 0.1
	done
	if _e2e_alive "$pid"; then
		e2e_log "pid $pid did not exit on TERM within ${secs}s: KILL"
		kill -KILL "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			_e2e_alive "$pid" || break
			sleep 0.1
		done
	fi
	# Reap it if it is our child (no-op otherwise).
	wait "$pid" 2>/dev/null || true
}

# ------------------------------------------------------------------ host

# e2e_host_lock: take the machine-wide lock of the suites that change the host
# itself (pods wired in the host's network namespace, its sysctls, kubelet's
# fixed /var/lib/kubelet/device-plugins socket), waiting while another run
# holds it. Held until the calling shell exits; the daemons this library
# starts do not inherit it (so a leftover daemon never holds it).
e2e_host_lock() {
	local f=$E2E_HOST_LOCK
	[ -z "${E2E_HOST_LOCK_FD:-}" ] || return 0
	mkdir -p "${f%/*}" || return 1
	exec {E2E_HOST_LOCK_FD}>>"$f" || { e2e_die "cannot open $f"; return 1; }
	if ! flock -n "$E2E_HOST_LOCK_FD"; then
		e2e_log "waiting for $f: another eni-cni test run holds it ($(head -c 200 "$f" 2>/dev/null | tr '\n' ' '))"
		flock -w "$E2E_HOST_LOCK_WAIT" "$E2E_HOST_LOCK_FD" ||
			{ e2e_die "$f still held after ${E2E_HOST_LOCK_WAIT}s; giving up"; return 1; }
	fi
	# Who holds it, for the message of the next run that waits.
	truncate -s 0 "$f" 2>/dev/null || true
	printf 'pid %s (%s) since %s\n' "$$" "${0##*/}" "$(date '+%F %T')" >&"$E2E_HOST_LOCK_FD"
	export E2E_HOST_LOCK_FD
}

# _e2e_nolock CMD...: exec CMD without the host lock's descriptor. Start
# daemons as `_e2e_nolock cmd ... &`: $! is then the daemon itself.
_e2e_nolock() {
	if [ -n "${E2E_HOST_LOCK_FD:-}" ]; then exec {E2E_HOST_LOCK_FD}>&-; fi
	exec "$@"
}

declare -gA _E2E_SYSCTLS=()

# e2e_save_sysctls KEY...: remember the host's values of these sysctls (dotted
# names, e.g. net.ipv4.ip_forward) the first time each is named, so that
# e2e_restore_sysctls can put them back. Network sysctls are per namespace:
# call it from the namespace whose values must be kept (normally the host's).
e2e_save_sysctls() {
	local k v
	for k in "$@"; do
		[ -z "${_E2E_SYSCTLS[$k]+set}" ] || continue
		v=$(cat "/proc/sys/${k//.//}") || { e2e_die "cannot read sysctl $k"; return 1; }
		_E2E_SYSCTLS[$k]=$v
	done
}

# e2e_restore_sysctls: write back every saved sysctl whose value changed, with
# a line saying so; fails if one cannot be restored.
e2e_restore_sysctls() {
	local k now rc=0
	for k in "${!_E2E_SYSCTLS[@]}"; do
		now=$(cat "/proc/sys/${k//.//}" 2>/dev/null) || continue
		[ "$now" != "${_E2E_SYSCTLS[$k]}" ] || continue
		if printf '%s\n' "${_E2E_SYSCTLS[$k]}" >"/proc/sys/${k//.//}" 2>/dev/null; then
			e2e_log "restored sysctl $k: $now -> ${_E2E_SYSCTLS[$k]}"
		else
			e2e_log "cannot restore sysctl $k to ${_E2E_SYSCTLS[$k]} (now $now)"
			rc=1
		fi
	done
	return $rc
}

# e2e_free_port: print a TCP port nobody listens on (20000-39999), for the
# private listeners of a run.
e2e_free_port() {
	local p used i
	used=$(ss -Htln 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }')
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 20000))
		grep -qx "$p" <<<"$used" || { echo "$p"; return 0; }
	done
	e2e_die "no free TCP port found"
}

# ------------------------------------------------------------------ setup

# Deepest first (e2e_cleanup removes them in this order).
_E2E_HOST_DIRS=(/var/lib/cni/results /var/lib/cni /run/containerd/s /run/containerd /run/netns)

# e2e_init: create the run dir and export the paths. Call once per run.
e2e_init() {
	[ "$(id -u)" = 0 ] || e2e_die "e2e tests need root" || return 1
	E2E_RUN=$(mktemp -d /tmp/eni-e2e.XXXX) || return 1
	chmod 0755 "$E2E_RUN"
	E2E_SOCK=$E2E_RUN/containerd.sock
	E2E_ENDPOINT=unix://$E2E_SOCK
	E2E_CRICTL_CONFIG=$E2E_RUN/crictl.yaml
	E2E_CONTAINERD_CONFIG=$E2E_RUN/containerd.toml
	E2E_CONTAINERD_LOG=$E2E_RUN/containerd.log
	E2E_CONTAINERD_PID=
	E2E_CGROUP_PARENT=/${E2E_RUN##*/}
	# Defaults are per run; a value the caller set is kept across runs.
	if [ -z "${E2E_CNI_BIN_DIR:-}" ] || [ "$E2E_CNI_BIN_DIR" = "${_E2E_DEFAULT_BIN_DIR:-}" ]; then
		E2E_CNI_BIN_DIR=$E2E_RUN/cni/bin _E2E_DEFAULT_BIN_DIR=$E2E_RUN/cni/bin
	fi
	if [ -z "${E2E_CNI_CONF_DIR:-}" ] || [ "$E2E_CNI_CONF_DIR" = "${_E2E_DEFAULT_CONF_DIR:-}" ]; then
		E2E_CNI_CONF_DIR=$E2E_RUN/cni/net.d _E2E_DEFAULT_CONF_DIR=$E2E_RUN/cni/net.d
	fi
	# Shared directories that containerd, its shims and libcni create when
	# missing: e2e_cleanup removes those this run made, once empty.
	: >"$E2E_RUN/host-dirs.made"
	local d
	for d in "${_E2E_HOST_DIRS[@]}"; do
		[ -e "$d" ] || echo "$d" >>"$E2E_RUN/host-dirs.made"
	done
	: "${E2E_PAUSE_TAR:=$E2E_TOOLS/pause.tar}"
	E2E_CRICTL=$E2E_TOOLS/bin/crictl
	case $E2E_CONTAINERD in
	1) E2E_CONTAINERD_BIN=$(command -v containerd) E2E_CTR=$(command -v ctr) ;;
	2) E2E_CONTAINERD_BIN=$E2E_TOOLS/containerd2/bin/containerd E2E_CTR=$E2E_TOOLS/containerd2/bin/ctr ;;
	*) e2e_die "E2E_CONTAINERD must be 1 or 2, not $E2E_CONTAINERD" || return 1 ;;
	esac
	[ -x "$E2E_CONTAINERD_BIN" ] || e2e_die "containerd binary not found ($E2E_CONTAINERD_BIN); run scripts/install-test-deps.sh${E2E_CONTAINERD/#1/}${E2E_CONTAINERD/#2/ --with-containerd2}" || return 1
	[ -x "$E2E_CRICTL" ] || e2e_die "crictl not found at $E2E_CRICTL; run scripts/install-test-deps.sh" || return 1
	mkdir -p "$E2E_CNI_BIN_DIR" "$E2E_CNI_CONF_DIR" "$E2E_RUN/pods" "$E2E_RUN/logs"
	: >"$E2E_RUN/netns.list"
	: >"$E2E_RUN/pods.list"
	cat >"$E2E_CRICTL_CONFIG" <<EOF
runtime-endpoint: $E2E_ENDPOINT
image-endpoint: $E2E_ENDPOINT
timeout: 30
debug: false
pull-image-on-create: false
EOF
	export E2E_RUN E2E_SOCK E2E_ENDPOINT E2E_CRICTL_CONFIG E2E_CONTAINERD_CONFIG \
		E2E_CONTAINERD_LOG E2E_CONTAINERD_PID E2E_CGROUP_PARENT E2E_CNI_BIN_DIR \
		E2E_CNI_CONF_DIR E2E_PAUSE_TAR E2E_CRICTL E2E_CTR E2E_CONTAINERD_BIN
}

# e2e_install_cni_plugins FILE...: copy plugin binaries into $E2E_CNI_BIN_DIR.
# The runtime also needs "loopback" there (it sets up lo through it); it is
# added from $E2E_TOOLS/bin when not given.
e2e_install_cni_plugins() {
	local f
	for f in "$@"; do
		[ -x "$f" ] || e2e_die "CNI plugin $f is not an executable file" || return 1
		install -m 0755 "$f" "$E2E_CNI_BIN_DIR/${f##*/}" || return 1
	done
	if [ ! -x "$E2E_CNI_BIN_DIR/loopback" ]; then
		install -m 0755 "$E2E_TOOLS/bin/loopback" "$E2E_CNI_BIN_DIR/loopback" || return 1
	fi
}

# e2e_write_conflist NAME < JSON: validate JSON on stdin and write it as
# $E2E_CNI_CONF_DIR/NAME. Any "@RUN@" in it becomes $E2E_RUN. With
# max_conf_num = 1 containerd uses the alphabetically first file there.
e2e_write_conflist() {
	local name=$1 tmp
	tmp=$E2E_CNI_CONF_DIR/.${name}.tmp
	sed "s#@RUN@#$E2E_RUN#g" >"$tmp" || return 1
	jq -e '.cniVersion and .name and (.plugins | length > 0)' "$tmp" >/dev/null ||
		{ rm -f "$tmp"; e2e_die "conflist $name: not valid JSON or lacks cniVersion/name/plugins"; return 1; }
	mv "$tmp" "$E2E_CNI_CONF_DIR/$name"
}

# _e2e_pick_snapshotter: overlayfs if an overlay mount works in the run dir.
_e2e_pick_snapshotter() {
	case $E2E_SNAPSHOTTER in
	overlayfs | native) return 0 ;;
	esac
	local d=$E2E_RUN/.ovl-probe
	mkdir -p "$d/l" "$d/u" "$d/w" "$d/m"
	if mount -t overlay overlay -o "lowerdir=$d/l,upperdir=$d/u,workdir=$d/w" "$d/m" 2>/dev/null; then
		umount "$d/m"
		E2E_SNAPSHOTTER=overlayfs
	else
		E2E_SNAPSHOTTER=native
	fi
	rm -rf "$d"
	export E2E_SNAPSHOTTER
}

# Plugins that need things this machine does not have, or that write outside
# the run dir (opt: /opt/containerd; nri: /var/run/nri; tracing: exporters).
_E2E_DISABLED_PLUGINS='"io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing", "io.containerd.nri.v1.nri"'

# e2e_write_containerd_config: write $E2E_CONTAINERD_CONFIG for
# E2E_CONTAINERD=1 (containerd 1.6, config version 2) or 2 (version 3).
e2e_write_containerd_config() {
	_e2e_pick_snapshotter
	local netns_state=false
	[ "$E2E_NETNS_UNDER_STATE" = 1 ] && netns_state=true
	mkdir -p "$E2E_RUN/root" "$E2E_RUN/state" "$E2E_RUN/runc"
	if [ "$E2E_CONTAINERD" = 1 ]; then
		cat >"$E2E_CONTAINERD_CONFIG" <<EOF
version = 2
root = "$E2E_RUN/root"
state = "$E2E_RUN/state"
disabled_plugins = [$_E2E_DISABLED_PLUGINS]

[grpc]
  address = "$E2E_SOCK"
[ttrpc]
  address = "$E2E_SOCK.ttrpc"
[debug]
  level = "$E2E_LOG_LEVEL"
[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$E2E_PAUSE_IMAGE"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  netns_mounts_under_state_dir = $netns_state
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_tcp_service = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$E2E_SNAPSHOTTER"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$E2E_RUN/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$E2E_CNI_BIN_DIR"
    conf_dir = "$E2E_CNI_CONF_DIR"
    max_conf_num = 1
    conf_template = ""
EOF
	else
		cat >"$E2E_CONTAINERD_CONFIG" <<EOF
version = 3
root = "$E2E_RUN/root"
state = "$E2E_RUN/state"
disabled_plugins = [$_E2E_DISABLED_PLUGINS]

[grpc]
  address = "$E2E_SOCK"
[ttrpc]
  address = "$E2E_SOCK.ttrpc"
[debug]
  level = "$E2E_LOG_LEVEL"
[metrics]
  address = ""

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "$E2E_SNAPSHOTTER"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$E2E_PAUSE_IMAGE"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  netns_mounts_under_state_dir = $netns_state
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$E2E_RUN/runc"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$E2E_CNI_BIN_DIR"]
    conf_dir = "$E2E_CNI_CONF_DIR"
    max_conf_num = 1
    conf_template = ""

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_tcp_service = true
EOF
	fi
}

# e2e_crictl ARGS...: crictl against this run's containerd, with the run's own
# crictl.yaml (never /etc/crictl.yaml).
e2e_crictl() {
	"$E2E_CRICTL" --config "$E2E_CRICTL_CONFIG" --runtime-endpoint "$E2E_ENDPOINT" \
		--image-endpoint "$E2E_ENDPOINT" "$@"
}

# e2e_ctr ARGS...: ctr against this run's containerd, namespace k8s.io.
e2e_ctr() { "$E2E_CTR" --address "$E2E_SOCK" --namespace k8s.io "$@"; }

# e2e_start_containerd: write the config (unless the caller wrote one), start
# containerd in the background (log $E2E_CONTAINERD_LOG, PID in
# $E2E_CONTAINERD_PID and $E2E_RUN/containerd.pid), wait until CRI answers,
# import the pause image and, if a conflist is present, wait for NetworkReady.
# Sets E2E_TIME_UP (start until CRI answers), E2E_TIME_IMPORT (pause import),
# E2E_TIME_READY (whole call), in seconds. Must not run in a subshell ($(...)): the PID is kept in this shell.
e2e_start_containerd() {
	local i path=$PATH t0 t1
	t0=$EPOCHREALTIME
	[ -z "$E2E_CONTAINERD_PID" ] || ! _e2e_alive "$E2E_CONTAINERD_PID" ||
		{ e2e_die "containerd already running (pid $E2E_CONTAINERD_PID)"; return 1; }
	[ -s "$E2E_CONTAINERD_CONFIG" ] || e2e_write_containerd_config || return 1
	# The shim and runc are looked up in PATH; v2 brings its own shim.
	[ "$E2E_CONTAINERD" = 2 ] && path=${E2E_CONTAINERD_BIN%/*}:$PATH
	local pre=()
	[ -z "${E2E_NETNS:-}" ] || pre=(nsenter "--net=$E2E_NETNS" --)
	PATH=$path _e2e_nolock "${pre[@]}" "$E2E_CONTAINERD_BIN" --config "$E2E_CONTAINERD_CONFIG" \
		</dev/null >>"$E2E_CONTAINERD_LOG" 2>&1 &
	E2E_CONTAINERD_PID=$!
	export E2E_CONTAINERD_PID
	echo "$E2E_CONTAINERD_PID" >"$E2E_RUN/containerd.pid"
	for ((i = 0; i < E2E_START_TIMEOUT * 20; i++)); do
		if ! _e2e_alive "$E2E_CONTAINERD_PID"; then
			wait "$E2E_CONTAINERD_PID" 2>/dev/null || true
			tail -n 30 "$E2E_CONTAINERD_LOG" >&2
			e2e_die "containerd exited during start-up (log above: $E2E_CONTAINERD_LOG)"
			return 1
		fi
		if [ -S "$E2E_SOCK" ] && e2e_crictl version >/dev/null 2>&1; then
			break
		fi
		sleep 0.05
	done
	e2e_crictl version >/dev/null 2>&1 ||
		{ tail -n 30 "$E2E_CONTAINERD_LOG" >&2; e2e_die "containerd did not answer within ${E2E_START_TIMEOUT}s"; return 1; }
	E2E_TIME_UP=$(e2e_since "$t0")
	t1=$EPOCHREALTIME
	e2e_import_pause || return 1
	E2E_TIME_IMPORT=$(e2e_since "$t1")
	if [ "$E2E_WAIT_NETWORK_READY" = 1 ] && compgen -G "$E2E_CNI_CONF_DIR/*.conf*" >/dev/null; then
		e2e_wait_network_ready 10 || return 1
	fi
	E2E_TIME_READY=$(e2e_since "$t0")
	export E2E_TIME_UP E2E_TIME_IMPORT E2E_TIME_READY
}

# e2e_import_pause: import $E2E_PAUSE_TAR into namespace k8s.io (unpacked for
# the configured snapshotter) and wait until CRI lists it.
e2e_import_pause() {
	local i
	[ -s "$E2E_PAUSE_TAR" ] || e2e_die "no pause image at $E2E_PAUSE_TAR; run scripts/install-test-deps.sh" || return 1
	e2e_ctr images import --snapshotter "$E2E_SNAPSHOTTER" "$E2E_PAUSE_TAR" >"$E2E_RUN/logs/import.log" 2>&1 ||
		{ cat "$E2E_RUN/logs/import.log" >&2; e2e_die "ctr images import $E2E_PAUSE_TAR failed"; return 1; }
	for ((i = 0; i < 100; i++)); do
		e2e_crictl inspecti "$E2E_PAUSE_IMAGE" >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	e2e_die "CRI does not see $E2E_PAUSE_IMAGE after import"
}

# e2e_wait_network_ready [SECONDS]: wait until CRI reports NetworkReady=true
# (the conflist was loaded). Prints the CRI status on timeout.
e2e_wait_network_ready() {
	local secs=${1:-10} i
	for ((i = 0; i < secs * 20; i++)); do
		if e2e_crictl info 2>/dev/null |
			jq -e '.status.conditions[] | select(.type == "NetworkReady") | .status == true' >/dev/null; then
			return 0
		fi
		sleep 0.05
	done
	e2e_crictl info 2>&1 | jq '.status' >&2 || true
	e2e_die "CRI NetworkReady not true after ${secs}s"
}

# ------------------------------------------------------------------ pods

# e2e_pod_config NAME [NAMESPACE [UID [ATTEMPT]]]: write a pod sandbox config
# (network namespace mode POD, cgroup parent $E2E_CGROUP_PARENT) to
# $E2E_RUN/pods/NAME.json and print its path.
e2e_pod_config() {
	local name=$1 ns=${2:-default} uid=${3:-} attempt=${4:-0} f
	[ -n "$uid" ] || uid=$(cat /proc/sys/kernel/random/uuid)
	f=$E2E_RUN/pods/$name.json
	mkdir -p "$E2E_RUN/logs/$name"
	jq -n --arg name "$name" --arg ns "$ns" --arg uid "$uid" --argjson attempt "$attempt" \
		--arg logdir "$E2E_RUN/logs/$name" --arg cg "$E2E_CGROUP_PARENT" '{
		metadata: { name: $name, namespace: $ns, uid: $uid, attempt: $attempt },
		hostname: $name,
		log_directory: $logdir,
		labels: { "eni-cni.e2e/run": ($cg | ltrimstr("/")) },
		linux: {
			cgroup_parent: $cg,
			security_context: { namespace_options: { network: 0, pid: 0, ipc: 0 } }
		}
	}' >"$f" || return 1
	printf '%s\n' "$f"
}

# e2e_runp NAME [NAMESPACE [UID [ATTEMPT]]]: run a pod sandbox; print its ID.
# The ID and its netns path are recorded for cleanup.
e2e_runp() {
	local cfg
	cfg=$(e2e_pod_config "$@") || return 1
	e2e_runp_file "$cfg"
}

# e2e_runp_file CONFIG.json: crictl runp with a config of the caller's; print
# the ID and record it (and its netns) for the checks and cleanup.
e2e_runp_file() {
	local id
	id=$(e2e_crictl runp "$1") || { e2e_log "crictl runp $1 failed"; return 1; }
	echo "$id" >>"$E2E_RUN/pods.list"
	_e2e_record_netns "$id"
	printf '%s\n' "$id"
}

# e2e_inspectp ID: crictl inspectp JSON.
e2e_inspectp() { e2e_crictl inspectp -o json "$1"; }

# e2e_pod_ip ID: the pod's primary IP as CRI reports it (from the CNI result).
e2e_pod_ip() { e2e_inspectp "$1" | jq -er '.status.network.ip // empty'; }

# e2e_pod_netns ID: the path of the pod's network namespace.
e2e_pod_netns() {
	e2e_inspectp "$1" |
		jq -er '.info.runtimeSpec.linux.namespaces[] | select(.type == "network") | .path // empty'
}

_e2e_record_netns() {
	local p
	p=$(e2e_pod_netns "$1" 2>/dev/null) || return 0
	[ -n "$p" ] && ! grep -qxF "$p" "$E2E_RUN/netns.list" && echo "$p" >>"$E2E_RUN/netns.list"
	return 0
}

# e2e_netns_exec ID CMD...: run CMD in the pod's network namespace
# ("ip netns exec NAME" for /run/netns/NAME, nsenter for other paths).
e2e_netns_exec() {
	local p
	p=$(e2e_pod_netns "$1") || { e2e_die "no netns for pod $1"; return 1; }
	shift
	case $p in
	/run/netns/* | /var/run/netns/*) ip netns exec "${p##*/}" "$@" ;;
	*) nsenter --net="$p" "$@" ;;
	esac
}

# e2e_stopp ID / e2e_rmp ID: crictl stopp / rmp (each makes containerd call CNI DEL).
e2e_stopp() { e2e_crictl stopp "$1" >/dev/null; }
e2e_rmp() { e2e_crictl rmp "$1" >/dev/null; }

# e2e_pods: IDs of all pod sandboxes this containerd knows.
e2e_pods() { e2e_crictl pods -q; }

# ------------------------------------------------------------------ teardown

# e2e_remove_all_pods: stopp + rmp every sandbox this containerd knows.
e2e_remove_all_pods() {
	local id rc=0
	for id in $(e2e_pods 2>/dev/null); do
		grep -qxF "$id" "$E2E_RUN/pods.list" || echo "$id" >>"$E2E_RUN/pods.list"
		_e2e_record_netns "$id"
		e2e_crictl stopp "$id" >/dev/null 2>&1 || { e2e_log "stopp $id failed"; rc=1; }
		e2e_crictl rmp "$id" >/dev/null 2>&1 || { e2e_log "rmp $id failed"; rc=1; }
	done
	return $rc
}

# e2e_stop_containerd: TERM the containerd this library started (by its
# recorded PID, after checking its command line), wait 10 s, then KILL.
e2e_stop_containerd() {
	local pid=${E2E_CONTAINERD_PID:-}
	[ -n "$pid" ] || pid=$(cat "$E2E_RUN/containerd.pid" 2>/dev/null) || true
	[ -n "$pid" ] || return 0
	if _e2e_alive "$pid"; then
		case $(_e2e_cmdline "$pid") in
		*"$E2E_CONTAINERD_CONFIG"*) _e2e_kill_wait "$pid" 10 ;;
		*) e2e_log "pid $pid is not our containerd any more; not touching it" ;;
		esac
	else
		wait "$pid" 2>/dev/null || true
	fi
	E2E_CONTAINERD_PID=
}

# e2e_stop: the graceful path: remove all pods (CNI DEL), stop containerd.
e2e_stop() {
	local rc=0
	[ -n "${E2E_RUN:-}" ] && [ -d "$E2E_RUN" ] || return 0
	if [ -n "${E2E_CONTAINERD_PID:-}" ] && _e2e_alive "$E2E_CONTAINERD_PID"; then
		e2e_remove_all_pods || rc=1
	fi
	e2e_stop_containerd
	return $rc
}

# _e2e_run_shims: PIDs of shims whose command line names this run's socket.
_e2e_run_shims() {
	local f p
	# grep first (one process), then check the few candidates exactly.
	grep -laF -- "$E2E_SOCK" /proc/[0-9]*/cmdline 2>/dev/null | while read -r f; do
		p=${f#/proc/}
		p=${p%/cmdline}
		case "$(_e2e_cmdline "$p") " in
		*containerd-shim*" -address $E2E_SOCK "*) echo "$p" ;;
		esac
	done
}

# _e2e_shim_socket ID: where a shim of this run for sandbox ID listens:
# /run/containerd/s/sha256(<grpc address>/k8s.io/<id>) (fixed, not in state).
_e2e_shim_socket() {
	printf '/run/containerd/s/%s\n' "$(printf '%s' "$E2E_SOCK/k8s.io/$1" | sha256sum | cut -d' ' -f1)"
}

# _e2e_cgroup_dirs: this run's cgroup directories, deepest first.
_e2e_cgroup_dirs() {
	local c
	for c in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
		[ -d "$c${E2E_CGROUP_PARENT#/}" ] && find "$c${E2E_CGROUP_PARENT#/}" -depth -type d
	done 2>/dev/null | awk '!seen[$0]++'
}

# _e2e_run_mounts: mount points under the run dir, deepest first.
_e2e_run_mounts() {
	awk -v r="$E2E_RUN/" 'index($5, r) == 1 { print $5 }' /proc/self/mountinfo |
		awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2-
}

# e2e_check_clean: report (stderr) and fail if anything of this run is left:
# containerd or shims, processes in the run's cgroups, cgroup dirs, mounts
# under the run dir, recorded netns, libcni cache entries of recorded pods.
e2e_check_clean() {
	local bad=0 p id
	if [ -n "${E2E_CONTAINERD_PID:-}" ] && _e2e_alive "$E2E_CONTAINERD_PID"; then
		e2e_log "left: containerd pid $E2E_CONTAINERD_PID"; bad=1
	fi
	for p in $(_e2e_run_shims); do e2e_log "left: shim pid $p: $(_e2e_cmdline "$p")"; bad=1; done
	for p in $(_e2e_cgroup_dirs); do
		if [ -s "$p/cgroup.procs" ]; then e2e_log "left: processes in $p: $(tr '\n' ' ' <"$p/cgroup.procs")"; bad=1; fi
		if [ "$p" != "${p%/*}/${E2E_CGROUP_PARENT#/}" ]; then e2e_log "left: cgroup $p"; bad=1; fi
	done
	for p in $(_e2e_run_mounts); do e2e_log "left: mount $p"; bad=1; done
	while read -r p; do
		[ -n "$p" ] && [ -e "$p" ] && { e2e_log "left: netns $p"; bad=1; }
	done <"$E2E_RUN/netns.list"
	while read -r id; do
		[ -n "$id" ] || continue
		for p in /var/lib/cni/results/*"-$id-"*; do
			[ -e "$p" ] && { e2e_log "left: libcni cache $p"; bad=1; }
		done
		p=$(_e2e_shim_socket "$id")
		[ -e "$p" ] && { e2e_log "left: shim socket $p"; bad=1; }
	done <"$E2E_RUN/pods.list"
	return $bad
}

# e2e_cleanup: undo everything of this run, whatever state it is in
# (use as EXIT trap). Graceful first (pods, containerd; if containerd is gone
# but sandboxes are left, it is started again on the same state to remove
# them, unless E2E_CLEANUP_RESTART=0), then force: runc
# containers of the run, shims naming the run's socket, processes in the run's
# cgroups, mounts under the run dir, recorded netns, cgroup dirs, shim sockets,
# the run dir. Set E2E_KEEP_RUN=1 to keep the run dir (logs) for debugging.
e2e_cleanup() {
	local p id i
	[ -n "${E2E_RUN:-}" ] && [ -d "$E2E_RUN" ] || return 0
	e2e_stop 2>/dev/null || true
	# containerd died (or was stopped) with sandboxes left: start it again on
	# the same root/state so that it tears them down properly (CNI DEL).
	if [ "${E2E_CLEANUP_RESTART:-1}" = 1 ] && [ -s "$E2E_CONTAINERD_CONFIG" ] &&
		compgen -G "$E2E_RUN/root/io.containerd.grpc.v1.cri/sandboxes/*" >/dev/null; then
		e2e_log "sandboxes left without a running containerd: restarting it to remove them"
		if E2E_WAIT_NETWORK_READY=0 e2e_start_containerd; then
			e2e_stop || e2e_log "removing the left sandboxes failed; forcing"
		fi
		e2e_stop_containerd
	fi
	# runc containers of this run (its own runc root): kill and delete.
	if [ -d "$E2E_RUN/runc" ]; then
		for p in "$E2E_RUN"/runc/*/*/; do
			[ -d "$p" ] || continue
			id=${p%/}; id=${id##*/}
			runc --root "${p%/*/}" delete --force "$id" >/dev/null 2>&1 || true
		done
	fi
	for p in $(_e2e_run_shims); do
		id=$(_e2e_cmdline "$p" | sed -nE 's/.* -id ([^ ]+).*/\1/p')
		_e2e_kill_wait "$p" 3
		[ -n "$id" ] && rm -f "$(_e2e_shim_socket "$id")"
	done
	for p in $(_e2e_cgroup_dirs); do
		for ((i = 0; i < 20; i++)); do
			[ -s "$p/cgroup.procs" ] || break
			xargs -r kill -KILL <"$p/cgroup.procs" 2>/dev/null || true
			sleep 0.1
		done
	done
	for p in $(_e2e_run_mounts); do
		umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || e2e_log "cannot unmount $p"
	done
	while read -r p; do
		if [ -z "$p" ] || [ ! -e "$p" ]; then continue; fi
		case $p in "$E2E_RUN"/*) continue ;; esac # went with the run dir's mounts
		umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || true
		rm -f "$p"
	done <"$E2E_RUN/netns.list"
	while read -r id; do
		[ -n "$id" ] || continue
		rm -f /var/lib/cni/results/*"-$id-"* "$(_e2e_shim_socket "$id")" 2>/dev/null
	done <"$E2E_RUN/pods.list"
	for p in $(_e2e_cgroup_dirs); do rmdir "$p" 2>/dev/null || true; done
	# rmdir: only if empty (another runtime on the machine may use them now).
	while read -r p; do
		[ -n "$p" ] && rmdir "$p" 2>/dev/null || true
	done < <(cat "$E2E_RUN/host-dirs.made" 2>/dev/null)
	# What the node started and outlived it, e.g. a warm pass an ADD spawned
	# (setsid, `eni-cni warm --config <stateDir>/warm.conf`): it runs to its
	# end and writes the state dir, so wait for it (then stop it) before the
	# run dir goes, or it recreates what rm just removed.
	for p in $(pgrep -f -- "$E2E_RUN/" 2>/dev/null); do
		[ "$p" != $$ ] && [ "$p" != "$BASHPID" ] || continue
		_e2e_kill_wait_grace "$p" 10
	done
	if [ "${E2E_KEEP_RUN:-0}" = 1 ]; then
		e2e_log "kept run dir $E2E_RUN"
	else
		rm -rf "$E2E_RUN"
	fi
}

# _e2e_kill_wait_grace PID SECS: let PID end by itself for SECS, then stop it.
_e2e_kill_wait_grace() {
	local pid=$1 secs=$2 i
	for ((i = 0; i < secs * 10; i++)); do
		_e2e_alive "$pid" || return 0
		sleep 0.1
	done
	e2e_log "pid $pid ($(_e2e_cmdline "$pid")) still running at teardown: stopping it"
	_e2e_kill_wait "$pid" 3
}
