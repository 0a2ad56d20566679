#!/usr/bin/env bash
# Smoke test of the e2e harness (scripts/e2e/lib.sh) with a real containerd,
# runc and crictl: N pods (default 3) through a CNI conflist, pod-to-pod ping
# inside the pods' network namespaces, stopp + rmp, containerd stopped, and a
# check that nothing of the run is left on the host.
#
# Default network: reference plugins ptp + host-local, cniVersion 1.0.0,
# subnet 10.250.0.0/24 (addresses exist only in the pods and on their host
# veths). Another plugin can be swapped in without editing this file:
#   SMOKE_PLUGINS="/path/eni-cni"        binaries to put in the run's CNI bin dir
#   SMOKE_CONFLIST=/path/x.conflist       conflist to use ("@RUN@" -> run dir)
#   SMOKE_PODS=3                          number of pods (>= 2)
# plus lib.sh's E2E_* settings (E2E_CONTAINERD=2 for containerd v2, ...).
# Needs root and scripts/install-test-deps.sh. Exit 0 = passed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"

SMOKE_PODS=${SMOKE_PODS:-3}
SMOKE_SUBNET=${SMOKE_SUBNET:-10.250.0.0/24}

t_all=$EPOCHREALTIME
e2e_host_lock
e2e_save_sysctls net.ipv4.ip_forward # ptp turns it on in the host namespace
e2e_init
echo "smoke: init $(e2e_since "$t_all")s"
trap 'e2e_cleanup; e2e_restore_sysctls' EXIT
echo "smoke: run dir $E2E_RUN (containerd $E2E_CONTAINERD)"

if [ -n "${SMOKE_PLUGINS:-}" ]; then
	# shellcheck disable=SC2086 # a list of paths
	e2e_install_cni_plugins $SMOKE_PLUGINS
else
	e2e_install_cni_plugins "$E2E_TOOLS/bin/ptp" "$E2E_TOOLS/bin/host-local"
fi
if [ -n "${SMOKE_CONFLIST:-}" ]; then
	e2e_write_conflist 10-smoke.conflist <"$SMOKE_CONFLIST"
else
	e2e_write_conflist 10-smoke.conflist <<EOF
{
  "cniVersion": "1.0.0",
  "name": "e2e-smoke",
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "mtu": 1500,
      "ipam": {
        "type": "host-local",
        "dataDir": "@RUN@/host-local",
        "ranges": [[{ "subnet": "$SMOKE_SUBNET" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    }
  ]
}
EOF
fi

e2e_start_containerd
echo "smoke: containerd up in ${E2E_TIME_UP}s, pause import ${E2E_TIME_IMPORT}s, ready (NetworkReady) ${E2E_TIME_READY}s; snapshotter $E2E_SNAPSHOTTER"

ids=() ips=()
for ((i = 0; i < SMOKE_PODS; i++)); do
	t=$EPOCHREALTIME
	id=$(e2e_runp "smoke-$i" smoke)
	dt=$(e2e_since "$t")
	ip=$(e2e_pod_ip "$id")
	[ -n "$ip" ] || { echo "smoke: FAIL: pod smoke-$i ($id) has no IP" >&2; exit 1; }
	ids+=("$id") ips+=("$ip")
	echo "smoke: runp smoke-$i ${dt}s id ${id:0:12} ip $ip netns $(e2e_pod_netns "$id")"
done

# Distinct IPs.
if [ "$(printf '%s\n' "${ips[@]}" | sort -u | wc -l)" != "$SMOKE_PODS" ]; then
	echo "smoke: FAIL: duplicate pod IPs: ${ips[*]}" >&2
	exit 1
fi

# Each pod pings the next one (a ring), inside the pod's own netns.
for ((i = 0; i < SMOKE_PODS; i++)); do
	j=$(((i + 1) % SMOKE_PODS))
	t=$EPOCHREALTIME
	if ! e2e_netns_exec "${ids[$i]}" ping -c 2 -i 0.2 -W 2 -q "${ips[$j]}" >"$E2E_RUN/logs/ping-$i.log" 2>&1; then
		cat "$E2E_RUN/logs/ping-$i.log" >&2
		echo "smoke: FAIL: ping ${ips[$i]} -> ${ips[$j]}" >&2
		exit 1
	fi
	echo "smoke: ping smoke-$i ${ips[$i]} -> smoke-$j ${ips[$j]} ok ($(e2e_since "$t")s)"
done

for ((i = 0; i < SMOKE_PODS; i++)); do
	t=$EPOCHREALTIME
	e2e_stopp "${ids[$i]}"
	t2=$EPOCHREALTIME
	e2e_rmp "${ids[$i]}"
	echo "smoke: stopp smoke-$i $(awk -v s="$t" -v e="$t2" 'BEGIN { printf "%.3f", e - s }')s, rmp $(e2e_since "$t2")s"
done
left=$(e2e_pods)
[ -z "$left" ] || { echo "smoke: FAIL: pods left after rmp: $left" >&2; exit 1; }

t=$EPOCHREALTIME
e2e_stop
echo "smoke: containerd stopped in $(e2e_since "$t")s"

t=$EPOCHREALTIME
fail=0
e2e_check_clean || fail=1
# Host side of the pod network: no address or route for a pod IP left.
for ip in "${ips[@]}"; do
	if ip -4 route show table all | grep -qw "$ip"; then echo "smoke: left: route for $ip" >&2; fail=1; fi
	if ip -4 addr show | grep -qw "inet $ip"; then echo "smoke: left: address $ip" >&2; fail=1; fi
done
if [ -d "$E2E_RUN/host-local" ] && find "$E2E_RUN/host-local" -type f -name '[0-9]*' | grep -q .; then
	echo "smoke: left: host-local allocations: $(find "$E2E_RUN/host-local" -type f -name '[0-9]*' | tr '\n' ' ')" >&2
	fail=1
fi
[ $fail = 0 ] || { echo "smoke: FAIL: leftovers (see above)" >&2; exit 1; }
echo "smoke: nothing left on the host (checked in $(e2e_since "$t")s)"

t=$EPOCHREALTIME
e2e_cleanup
echo "smoke: cleanup $(e2e_since "$t")s"
[ ! -e "$E2E_RUN" ] || { echo "smoke: FAIL: run dir $E2E_RUN still there" >&2; exit 1; }
echo "smoke: PASS: $SMOKE_PODS pods, whole run $(e2e_since "$t_all")s"
