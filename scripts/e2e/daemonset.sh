#!/usr/bin/env bash
# DaemonSet suite: the pod template of scripts/k8s/eni-cni.yaml, run as a
# static pod by a real standalone kubelet on lib.sh's private containerd,
# from the image scripts/k8s/build-image.sh builds, installs eni-cni onto a
# stand-in host root ($E2E_RUN/host: every hostPath of the pod points below
# it, so this machine's /opt, /etc and /var are never touched). The host's
# "systemd" is the fake of install/systemdfake on host/run/systemd/private.
# containerd's CNI bin and conf dirs are the stand-in host's, as on a node:
# pods get their network from what the DaemonSet installed. Each case is a
# named check that fails the run when broken:
#
#   image-imports                  the offline image archive imports; one layer, no shell
#   install-from-configmap         the ConfigMap as shipped (ec2 pool): the init container
#                                  exits 0 and the idle one runs; binary = the image's,
#                                  conflist = the ConfigMap's, units and their
#                                  timers.target.wants links, no cron file; systemd
#                                  reloaded, both timers and a first warm started; the state
#                                  dir (a 0755 hostPath) now 0700 and empty: no state.json
#   reinstall-after-config-change  the ConfigMap changed to a static pool and the pod
#                                  recreated (rollout restart): the conflist is replaced,
#                                  the binary and units are left as they were
#   pod-gets-address               a regular pod becomes Ready with a pool address, which
#                                  the installed binary's `list` records
#   pod-removal-frees-address      removing it frees the address, its veth and rule
#   idle-ends-on-sigterm           removing the DaemonSet pod: the idle container exits 0
#   host-untouched                 this machine's eni-cni paths as found; sysctls restored
#
# Usage: scripts/e2e/daemonset.sh /abs/path/to/bin/eni-cni
# Root; after scripts/install-test-deps.sh --with-kubelet; needs yq (Debian
# package yq) for the manifest. Holds lib.sh's host lock (one kubelet per machine).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
# shellcheck source-path=SCRIPTDIR source=kubelet-lib.sh
. "$here/kubelet-lib.sh"

ENI_BIN=$(realpath "${1:?usage: daemonset.sh /path/to/eni-cni}")
MANIFEST=$ROOT/scripts/k8s/eni-cni.yaml
IMAGE=localhost/eni-cni:e2e-daemonset
POD=eni-cni                        # static pod name; kubelet adds -$KL_NODE
VPFX=dst                           # host veths of the regular pod: dst + 12 hex
POOL_RANGE=10.76.0.10-10.76.0.20
POOL_RE='^10\.76\.0\.'
E2E_CONTAINERD=1
E2E_NETNS_UNDER_STATE=1
# Where a real install would write on this machine: must stay as found.
HOST_PATHS=(/opt/cni/bin/eni-cni /etc/cni/net.d/10-eni-cni.conflist /etc/cron.d/eni-cni
	/etc/systemd/system/eni-cni-gc.timer /etc/systemd/system/eni-cni-warm.timer
	/etc/systemd/system/eni-cni-gc.service /etc/systemd/system/eni-cni-warm.service /etc/systemd/system/eni-cni-warm-lean.service
	/var/lib/eni-cni/state.json)

say() { printf 'daemonset-e2e: %s\n' "$*"; }
diagnostics() {
	[ -n "${E2E_RUN:-}" ] && [ -d "$E2E_RUN" ] || return 0
	echo "--- kubelet /pods"
	kl_pods 2>/dev/null | jq -c '.items[] | [.metadata.name, .status.phase, .status.initContainerStatuses, .status.containerStatuses]' 2>/dev/null | head -20
	[ -f "${KL_LOG:-/nonexistent}" ] && { echo "--- kubelet errors (last 15)"; grep -E '^E[0-9]{4}' "$KL_LOG" | tail -n 15; }
	echo "--- install log"
	install_log 2>/dev/null | tail -n 30
	[ -f "$E2E_RUN/logs/systemd-calls.log" ] && { echo "--- systemd calls"; cat "$E2E_RUN/logs/systemd-calls.log"; }
}

host_snapshot() {
	local p
	for p in "${HOST_PATHS[@]}"; do
		if [ -e "$p" ]; then stat -c '%n %a %Y %s' "$p"; else echo "$p absent"; fi
	done
}

# static_pod CONFIGDIR [RESTARTED]: the DaemonSet's pod template as a static pod: the
# image ours (never pulled), every hostPath moved below $HOST, the
# ConfigMap volume a hostPath of CONFIGDIR (static pods cannot use
# ConfigMaps), and the state volume also mounted where the conflist's
# stateDir points below /host (the stand-in host's state dir is not at
# /var/lib/eni-cni).
static_pod() {
	yq -c 'select(.kind == "DaemonSet")' "$MANIFEST" | jq --arg host "$HOST" --arg img "$IMAGE" \
		--arg cfg "$1" --arg ns "$KL_NAMESPACE" --arg name "$POD" --arg restarted "${2:-}" '
		def ours: .image = $img | .imagePullPolicy = "Never";
		{ apiVersion: "v1", kind: "Pod",
		  metadata: { name: $name, namespace: $ns, labels: .spec.template.metadata.labels,
			annotations: (if $restarted == "" then {} else { "kubectl.kubernetes.io/restartedAt": $restarted } end) },
		  spec: (.spec.template.spec
			| .initContainers |= map(ours | .volumeMounts += [{ name: "state", mountPath: ("/host" + $host + "/var/lib/eni-cni") }])
			| .containers |= map(ours)
			| .volumes |= map(
				if .hostPath then .hostPath.path = $host + .hostPath.path
				elif .configMap then { name: .name, hostPath: { path: $cfg, type: "Directory" } }
				else . end)) }'
}

# configmap_conflist: the ConfigMap's conflist as shipped.
configmap_conflist() { yq -r 'select(.kind == "ConfigMap") | .data["10-eni-cni.conflist"]' "$MANIFEST"; }

static_conflist() {
	cat <<EOF
{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    { "type": "eni-cni",
      "stateDir": "$HOST/var/lib/eni-cni",
      "logFile": "$E2E_RUN/logs/eni-cni.log",
      "hostVethPrefix": "$VPFX",
      "mtu": 1500,
      "pool": { "source": "static", "ranges": ["$POOL_RANGE"] } }
  ]
}
EOF
}

# pod_json: the DaemonSet pod as kubelet reports it ({} before it does).
pod_json() {
	kl_pods | jq -c --arg n "$POD-$KL_NODE" '[(.items // [])[] | select(.metadata.name == $n)] | first // {}'
}
# pod_state: "init-exit running" of the DaemonSet pod as kubelet reports it.
pod_state() {
	pod_json | jq -r '"\(.status.initContainerStatuses[0].state.terminated.exitCode // "-") \(if .status.containerStatuses[0].state.running then "running" else "-" end)"'
}
installed() { [ "$(pod_state 2>/dev/null)" = "0 running" ]; }
# container_id install|idle: the runtime's ID of that container of the pod.
container_id() {
	local f=containerStatuses
	[ "$1" = install ] && f=initContainerStatuses
	pod_json | jq -r --arg f "$f" '.status[$f][0].containerID // "" | sub("^containerd://"; "")'
}
install_log() {
	local id
	id=$(container_id install)
	[ -n "$id" ] && e2e_crictl logs "$id"
}
wait_for() {
	local secs=$1 i
	shift
	for ((i = 0; i < secs * 5; i++)); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}
put_daemonset_pod() {
	static_pod "$CONFIGDIR" "${1:-}" >"$KL_DIR/staging/$POD.json" || fail "cannot convert $MANIFEST"
	mv "$KL_DIR/staging/$POD.json" "$KL_MANIFESTS/"
}
eni() { "$HOST/opt/cni/bin/eni-cni" "$@"; }
alloc_json() { eni list --config "$HOST/etc/cni/net.d/10-eni-cni.conflist" --json; }

on_exit() {
	local rc=$?
	set +e
	[ -z "${SD_PID:-}" ] || { kill "$SD_PID"; wait "$SD_PID"; }
	kl_cleanup
	e2e_cleanup
	e2e_restore_sysctls || rc=1
	exit "$rc"
}

[ "$(id -u)" = 0 ] || { echo "daemonset.sh: needs root" >&2; exit 1; }
[ -x "$ENI_BIN" ] || { echo "daemonset.sh: $ENI_BIN is not executable (make build)" >&2; exit 1; }
command -v yq >/dev/null || { echo "daemonset.sh: yq not found (apt-get install yq)" >&2; exit 1; }
e2e_host_lock
trap on_exit EXIT
trap 'exit 130' INT TERM
T_ALL=$EPOCHREALTIME
HOST_BEFORE=$(host_snapshot)
e2e_save_sysctls net.ipv4.ip_forward
e2e_init
kl_init
HOST=$E2E_RUN/host
CONFIGDIR=$E2E_RUN/configmap
mkdir -p "$HOST/opt/cni/bin" "$HOST/etc/cni/net.d" "$CONFIGDIR"
# containerd gets its CNI from the stand-in host, as on a node; loopback is
# there already, as kubeadm's kubernetes-cni package puts it.
E2E_CNI_BIN_DIR=$HOST/opt/cni/bin E2E_CNI_CONF_DIR=$HOST/etc/cni/net.d
export E2E_CNI_BIN_DIR E2E_CNI_CONF_DIR
e2e_install_cni_plugins
# A node whose state dir a hostPath volume made (0755) and whose systemd runs.
mkdir -p "$HOST/var/lib/eni-cni" && chmod 0755 "$HOST/var/lib/eni-cni"
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$E2E_RUN/systemdfake" ./install/systemdfake/cmd/systemdfake) || fail "build systemdfake"
"$E2E_RUN/systemdfake" --root "$HOST" --calls "$E2E_RUN/logs/systemd-calls.log" >"$E2E_RUN/logs/systemdfake.out" 2>&1 &
SD_PID=$!
wait_for 10 test -S "$HOST/run/systemd/private" || fail "the fake systemd did not start"

begin image-imports
bash "$ROOT/scripts/k8s/build-image.sh" "$ENI_BIN" "$E2E_RUN/eni-cni-image.tar" "$IMAGE" >/dev/null || fail "build-image.sh failed"
tar -xOf "$E2E_RUN/eni-cni-image.tar" manifest.json | jq -e 'length == 1 and (.[0].Layers | length) == 1' >/dev/null || fail "not one image with one layer"
layer=$(tar -xOf "$E2E_RUN/eni-cni-image.tar" manifest.json | jq -r '.[0].Layers[0]')
[ "$(tar -xOf "$E2E_RUN/eni-cni-image.tar" "$layer" | tar -t)" = eni-cni ] || fail "the layer holds more than the binary"
e2e_start_containerd
e2e_ctr images import "$E2E_RUN/eni-cni-image.tar" >/dev/null || fail "ctr images import failed"
e2e_crictl inspecti "$IMAGE" >/dev/null || fail "CRI does not see $IMAGE"
pass "$(du -h "$E2E_RUN/eni-cni-image.tar" | cut -f1) archive, one layer holding /eni-cni only"

begin install-from-configmap
configmap_conflist >"$CONFIGDIR/10-eni-cni.conflist"
kl_start
t0=$EPOCHREALTIME
put_daemonset_pod
wait_for 90 installed || fail "the DaemonSet pod did not install and go idle (state: $(pod_state))"
t_install=$(e2e_since "$t0")
cmp -s "$ENI_BIN" "$HOST/opt/cni/bin/eni-cni" || fail "the installed binary is not the image's"
cmp -s "$CONFIGDIR/10-eni-cni.conflist" "$HOST/etc/cni/net.d/10-eni-cni.conflist" || fail "the installed conflist is not the ConfigMap's"
for u in eni-cni-gc.service eni-cni-warm.service eni-cni-warm-lean.service eni-cni-gc.timer eni-cni-warm.timer; do
	[ -s "$HOST/etc/systemd/system/$u" ] || fail "no unit $u"
done
for t in eni-cni-gc.timer eni-cni-warm.timer; do
	[ "$(readlink "$HOST/etc/systemd/system/timers.target.wants/$t")" = "/etc/systemd/system/$t" ] || fail "$t not enabled"
done
grep -qx 'ExecStart=/var/lib/eni-cni/.bin/timer-warm warm' "$HOST/etc/systemd/system/eni-cni-warm.service" || fail "warm unit does not run the build the host's binary publishes"
grep -qx 'ExecStart=/opt/cni/bin/eni-cni warm' "$HOST/etc/systemd/system/eni-cni-warm-lean.service" || fail "warm fallback unit does not run the host's binary"
[ ! -e "$HOST/etc/cron.d/eni-cni" ] || fail "a cron file on a systemd node"
want='Reload()
StartUnit(eni-cni-gc.timer, replace)
StartUnit(eni-cni-warm.timer, replace)
StartUnit(eni-cni-warm-lean.service, replace)'
wait_for 5 eval '[ "$(cat "$E2E_RUN/logs/systemd-calls.log" 2>/dev/null)" = "$want" ]' ||
	fail "systemd calls: $(tr '\n' ' ' <"$E2E_RUN/logs/systemd-calls.log" 2>/dev/null), want $(tr '\n' ' ' <<<"$want")"
[ "$(stat -c %a "$HOST/var/lib/eni-cni")" = 700 ] || fail "state dir mode $(stat -c %a "$HOST/var/lib/eni-cni"), want 700"
[ -z "$(ls -A "$HOST/var/lib/eni-cni")" ] || fail "state dir holds $(ls -A "$HOST/var/lib/eni-cni")"
[ -z "$(find "$HOST" -name state.json)" ] || fail "a state.json in the host tree: $(find "$HOST" -name state.json)"
pass "installed and idle ${t_install}s after the manifest; units enabled, systemd: $(tr '\n' ' ' <<<"$want")"

begin reinstall-after-config-change
static_conflist >"$CONFIGDIR/10-eni-cni.conflist"
bin_mtime=$(stat -c %Y.%N "$HOST/opt/cni/bin/eni-cni")
unit_mtime=$(stat -c %Y.%N "$HOST/etc/systemd/system/eni-cni-gc.timer")
first_install=$(container_id install)
kl_rm "$POD"
kl_wait_gone 60 "$POD" || fail "the DaemonSet pod did not go"
put_daemonset_pod "$(date -u +%FT%TZ)"
reinstalled() { installed && [ "$(container_id install)" != "$first_install" ]; }
wait_for 90 reinstalled || fail "the recreated pod did not install (state: $(pod_state))"
cmp -s "$CONFIGDIR/10-eni-cni.conflist" "$HOST/etc/cni/net.d/10-eni-cni.conflist" || fail "the conflist was not replaced"
[ "$(stat -c %Y.%N "$HOST/opt/cni/bin/eni-cni")" = "$bin_mtime" ] || fail "the unchanged binary was rewritten"
[ "$(stat -c %Y.%N "$HOST/etc/systemd/system/eni-cni-gc.timer")" = "$unit_mtime" ] || fail "an unchanged unit was rewritten"
wait_for 10 eval 'install_log 2>/dev/null | grep -q "unchanged .*/opt/cni/bin/eni-cni"' || fail "the install log does not say the binary is unchanged"
pass "conflist replaced; binary and units unchanged"

begin pod-gets-address
e2e_wait_network_ready 30 || fail "containerd does not see the installed conflist (NetworkReady)"
kl_put web-0
kl_wait_ready 60 web-0 || fail "web-0 not Ready"
read -r uid ip _ < <(kl_status web-0)
[[ $ip =~ $POOL_RE ]] || fail "web-0 has $ip, not an address of $POOL_RANGE"
alloc_json | jq -e --arg ip "$ip" --arg uid "$uid" '.allocations[] | select(.ip == $ip and .podUID == $uid)' >/dev/null ||
	fail "the installed binary's list lacks $ip of $uid: $(alloc_json | jq -c .allocations)"
pass "web-0 Ready with $ip"

begin pod-removal-frees-address
kl_rm web-0
kl_wait_gone 60 web-0 || fail "web-0 still listed"
wait_for 20 eval '[ "$(alloc_json | jq ".allocations | length")" = 0 ]' || fail "allocations left: $(alloc_json | jq -c .allocations)"
[ -z "$(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -E "^${VPFX}[0-9a-f]{12}$" || true)" ] || fail "host veths left"
[ -z "$(ip -4 rule show pref 512 | grep -E " to 10\.76\.0\." || true)" ] || fail "rules left"
pass "address, veth and rule gone"

begin idle-ends-on-sigterm
idle_id=$(container_id idle)
[ -n "$idle_id" ] || fail "no idle container"
kl_rm "$POD"
# Polled, so the exit is seen before kubelet removes the container.
exited=
for ((i = 0; i < 150; i++)); do
	exited=$(e2e_crictl inspect "$idle_id" 2>/dev/null | jq -r 'select(.status.state == "CONTAINER_EXITED") | "\(.status.exitCode) \(.status.reason)"') || true
	[ -z "$exited" ] || break
	sleep 0.2
done
[ -n "$exited" ] || fail "idle was not seen exiting within 30 s"
[ "${exited%% *}" = 0 ] || fail "idle exited with $exited, want 0 on SIGTERM (137: killed after the grace period)"
kl_wait_gone 60 "$POD" || fail "the DaemonSet pod did not go"
pass "idle exited: $exited"

begin host-untouched
kill "$SD_PID" && wait "$SD_PID" || true
SD_PID=
kl_cleanup
e2e_cleanup
e2e_restore_sysctls || fail "sysctls not restored"
[ "$(host_snapshot)" = "$HOST_BEFORE" ] || fail "this machine changed: $(diff <(echo "$HOST_BEFORE") <(host_snapshot) | grep '^[<>]')"
pass "eni-cni paths of this machine as found; whole suite $(e2e_since "$T_ALL")s"
