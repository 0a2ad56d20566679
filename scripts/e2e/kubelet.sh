#!/usr/bin/env bash
# Kubelet suite: a real kubelet (v1.34.2, standalone: static pods, no API
# server) drives eni-cni through a private containerd 1.6, as on a node.
# Everything is observed through kubelet (its /pods on the read-only port)
# and the runtime (crictl), never by calling the plugin by hand. Each case
# is a named check that fails the run when broken:
#
# static pool, containerd and kubelet in the host's network namespace (as on a node):
#   static-pods-get-pool-addresses   pods get distinct pool addresses; `eni-cni list`
#                                    records kubelet's namespace, pod name and UID
#   pods-reachable-from-node         ping node -> pods and pod -> pod
#   manifest-removal-frees-address   removing a manifest: DEL frees the address,
#                                    host veth and rule gone
#   crashloop-keeps-sandbox          a container that keeps exiting is restarted
#                                    (CrashLoopBackOff) in the same sandbox: same
#                                    address, no CNI call
#   sandbox-recreated-without-leak   that pod's sandbox dies (twice): kubelet makes a
#                                    new one, the old address is freed, one address
#                                    for the pod
#   burst-20-ready                   20 manifests at once: all Ready, distinct
#                                    addresses, time to the last one reported
#   kubelet-restart-keeps-addresses  kubelet stopped and started under running pods:
#                                    same sandboxes and addresses, no ADD, no DEL of a live one
#   containerd-restart-keeps-addresses   the same for containerd
#   pool-exhausted-add-retried       full pool: ADD fails (code 11) with nothing
#                                    half-made, kubelet retries, the pod starts
#                                    when an address is freed
#   kubelet-sandbox-gc-harmless      kubelet's own sandbox GC removes the dead
#                                    sandboxes (its late DELs free nothing alive,
#                                    even an address that a new pod reuses) and
#                                    leaves nothing behind
#   gc-loop-frees-nothing-live       `eni-cni gc --grace 60s` every 2 s during all
#                                    of the above freed nothing
#   teardown-leaves-nothing          all manifests removed: every address freed;
#                                    kubelet and containerd stopped: nothing left
# ec2 pool on the fake IMDS + EC2 (containerd in a throwaway "node" namespace):
#   ec2-burst-20-ready               20 manifests at once on a pool warmed first
#                                    (KUBELET_EC2_POOL=dry: no warm before, ADD
#                                    waits for its own warm pass, addWaitSeconds)
#   ec2-teardown-leaves-nothing
# with KUBELET_EC2_FAMILY=ipv6 (or dual: both families; the ec2 pool of
# this tree refuses it) the fake's subnet has an IPv6 /64, the node's ens5
# the primary ENI's IPv6 address of it, the conflist ipFamilies, and the
# burst's checks are instead:
#   ec2-burst-20-ready-ipv6          all Running and Ready, one address a family in
#                                    status.podIPs, store = runtime = host
#   ec2-ipv6-addresses-of-the-delegated-80   each pod's IPv6 address of the /80
#                                    the fake delegated (its describe JSON and
#                                    IMDS ipv6-prefix agree), distinct, not its
#                                    first; dual: an IPv4 secondary address too
#   ec2-pods-reachable-from-node-ipv6   ping -6 node -> every pod, pod -> pod
#   ec2-ipv6-fill-ec2-calls          one AssignIpv6Addresses filled the node (and,
#                                    in ipv6, no IPv4 address or ENI asked for)
#   ec2-selftest-route-removed       (KUBELET_EC2_SELFTEST=1) the node's route to
#                                    one pod removed: the reachability and the
#                                    store/host checks fail, put back: pass
#   ec2-pods-deleted-addresses-freed-ipv6   manifests removed: every address freed,
#                                    no veth or /128 route left, the /80 kept
#   ec2-teardown-leaves-nothing
# and at the end:
#   host-restored                    sysctls (ip_forward and kubelet's tunables) and
#                                    kubelet's paths outside its root dir as found
#
# Bench mode (used by `make bench`, scripts/bench): containerd in a throwaway
# namespace, one kubelet, rounds of N manifests at once, alternating eni-cni
# (static pool) and ptp + host-local, JSON timings to OUT:
#   scripts/e2e/kubelet.sh --bench OUT.json [--rounds R] [--pods N] /abs/path/eni-cni
#
# Usage: scripts/e2e/kubelet.sh [--phases "static ec2"] /abs/path/to/eni-cni
# Root; after scripts/install-test-deps.sh --with-kubelet. Holds the host lock
# of lib.sh (one kubelet per machine): a second run waits for the first.
# Env: KUBELET_EC2_POOL=warm|dry [warm], KUBELET_EC2_FAMILY=ipv4|ipv6|dual [ipv4],
# KUBELET_EC2_SELFTEST=1 (ipv6, dual), KUBELET_BURST [20], E2E_KEEP_RUN=1 keeps logs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
# shellcheck source-path=SCRIPTDIR source=kubelet-lib.sh
. "$here/kubelet-lib.sh"

MODE=test PHASES="static ec2" BENCH_OUT='' ROUNDS=3 BENCH_PODS=20
while [ $# -gt 1 ]; do
	case $1 in
	--phases) PHASES=$2; shift ;;
	--bench) MODE=bench BENCH_OUT=$2; shift ;;
	--rounds) ROUNDS=$2; shift ;;
	--pods) BENCH_PODS=$2; shift ;;
	*) echo "kubelet.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
ENI_BIN=$(realpath "${1:?usage: kubelet.sh [--phases P] [--bench OUT] /path/to/eni-cni}")
BURST=${KUBELET_BURST:-20}
EC2_POOL=${KUBELET_EC2_POOL:-warm}
case $EC2_POOL in warm | dry) ;; *) echo "KUBELET_EC2_POOL must be warm or dry" >&2; exit 2 ;; esac
EC2_FAMILY=${KUBELET_EC2_FAMILY:-ipv4}
case $EC2_FAMILY in ipv4 | ipv6 | dual) ;; *) echo "KUBELET_EC2_FAMILY must be ipv4, ipv6 or dual" >&2; exit 2 ;; esac
EC2_SELFTEST=${KUBELET_EC2_SELFTEST:-0}

VPFX=kub                              # host veth prefix: kub + 12 hex
POOL_RANGE=10.77.0.10-10.77.0.33      # 24 addresses, static phase (host namespace)
POOL_RE='^10\.77\.0\.'
SUBNET6=2600:1f18:76:7600::/64        # the fake subnet's IPv6 block (ec2 phase in ipv6 or dual)
POOL6_RE='^2600:1f18:76:7600:'
GC_GRACE=60s                          # the minimum of gc --grace, as of gcGraceSeconds
COOLDOWN=5                            # cooldownSeconds cannot go below 5
E2E_CONTAINERD=1
E2E_NETNS_UNDER_STATE=1               # netns of this run's pods under its state dir

say() { printf 'kubelet-e2e: %s\n' "$*"; }
CASE=setup CASE_T0=$EPOCHREALTIME
RESULTS=()
TIMINGS=()
begin() {
	CASE=$1 CASE_T0=$EPOCHREALTIME
	say "--- $1"
}
pass() {
	local line="PASS $CASE ($(e2e_since "$CASE_T0")s): $*"
	RESULTS+=("$line")
	say "$line"
}
fail() {
	say "FAIL $CASE: $*" >&2
	diagnostics >&2 || true
	exit 1
}
diagnostics() {
	[ -n "${E2E_RUN:-}" ] && [ -d "$E2E_RUN" ] || return 0
	[ -f "$E2E_RUN/logs/eni-cni.log" ] && { echo "--- eni-cni log (last 15)"; tail -n 15 "$E2E_RUN/logs/eni-cni.log"; }
	[ -f "${CALLS:-/nonexistent}" ] && { echo "--- CNI calls (last 15)"; tail -n 15 "$CALLS"; }
	[ -f "${KL_LOG:-/nonexistent}" ] && { echo "--- kubelet errors (last 15)"; grep -E '^E[0-9]{4}' "$KL_LOG" | tail -n 15; }
	echo "--- kubelet /pods"
	kl_pods 2>/dev/null | jq -c '(.items // [])[] | [.metadata.name, .status.podIP, .status.phase]' 2>/dev/null | head -40
	echo "--- sandboxes"
	kl_sandboxes 2>/dev/null | head -60
}

# node_exec CMD...: run CMD in the node's network namespace (the host's in
# the static phase; the throwaway node of the ec2 phase and the bench).
node_exec() {
	if [ -n "${E2E_NETNS:-}" ]; then nsenter --net="$E2E_NETNS" -- "$@"; else "$@"; fi
}
eni() { node_exec "$E2E_RUN/eni-cni.real" "$@"; }
alloc_json() { eni list --config "$CONF" --json; }
ip_of_sandbox() { alloc_json | jq -r --arg c "$1" '.allocations[] | select(.containerID == $c) | .ip'; }
pool_counts() { alloc_json | jq -c .pool; }
# sandbox_of NAME [STATE]: the newest sandbox ID of static pod NAME.
sandbox_of() { kl_sandboxes "${2:-ready}" | awk -v n="$1" '$2 == n { print $3, $1 }' | sort -n | tail -n 1 | cut -d' ' -f2; }
# calls VERB ID: the CNI calls of a sandbox, from the wrapper's log.
calls() { awk -v v="$1" -v c="$2" '$2 == v && $3 == c' "$CALLS"; }
failed_calls() { awk -v v="$1" -v c="$2" '$2 == v && $3 == c && $NF != "exit=0"' "$CALLS"; }
pod_calls() { awk -v v="$1" -v p="$2-$KL_NODE" '$2 == v && $4 == p' "$CALLS"; }

# setup_run NAME CONFLIST-JSON: a run dir with eni-cni behind a wrapper that
# logs every CNI call (verb, sandbox, pod, netns, exit) to $CALLS.
setup_run() {
	e2e_init
	kl_init
	install -m 0755 "$ENI_BIN" "$E2E_RUN/eni-cni.real"
	CALLS=$E2E_RUN/logs/cni-calls.log
	: >"$CALLS"
	cat >"$E2E_RUN/eni-cni" <<EOF
#!/bin/sh
# Test wrapper: the real plugin, then one line per call in $CALLS.
"$E2E_RUN/eni-cni.real" "\$@"
rc=\$?
pod=\$(printf '%s' "\$CNI_ARGS" | tr ';' '\n' | sed -n 's/^K8S_POD_NAME=//p')
printf '%s %s %s %s netns=%s exit=%s\n' "\$(date +%s.%N)" "\$CNI_COMMAND" "\$CNI_CONTAINERID" "\${pod:--}" "\${CNI_NETNS:-}" "\$rc" >>"$CALLS"
exit \$rc
EOF
	chmod 0755 "$E2E_RUN/eni-cni"
	e2e_install_cni_plugins "$E2E_RUN/eni-cni"
	e2e_write_conflist 10-pods.conflist <<<"$1"
	CONF=$E2E_CNI_CONF_DIR/10-pods.conflist
	NETNS_DIR=$E2E_RUN/state/io.containerd.grpc.v1.cri/netns
	DOWN_WINDOWS=()
	REMOVED=() # sandboxes whose pods kubelet stopped: its GC must remove them
}

# ------------------------------------------------------------------ checks

# consistent: print why and fail unless the store matches the runtime and the
# host: allocations = READY sandboxes (same IPs as CRI reports, both of a
# dual-stack pod), no address twice, one host veth, one `to` rule and one
# /32 route per IPv4 address and one /128 route per IPv6 address and no
# other in the pool, one netns per READY sandbox.
consistent() {
	local aj ready alloc got want want6 id ips cip
	aj=$(alloc_json) || { echo "eni-cni list failed"; return 1; }
	ready=$(kl_sandboxes ready | awk '{ print $1 }' | sort)
	alloc=$(jq -r '.allocations[].containerID' <<<"$aj" | sort)
	[ "$ready" = "$alloc" ] || {
		echo "READY sandboxes vs allocations:" $(diff <(echo "$ready") <(echo "$alloc") | grep '^[<>]')
		return 1
	}
	got=$(jq -r '.allocations[] | .ip, (.ip6 // empty)' <<<"$aj" | sort | uniq -d)
	[ -z "$got" ] || { echo "allocated twice: $got"; return 1; }
	while read -r id ips; do
		[ -n "$id" ] || continue
		cip=$(runtime_ips "$id" 2>/dev/null) || cip=
		[ "$cip" = "$ips" ] || { echo "sandbox $id: runtime reports ${cip:-no IP}, store $ips"; return 1; }
	done < <(jq -r '.allocations[] | "\(.containerID) \([.ip, (.ip6 // empty)] | sort | join(" "))"' <<<"$aj")
	want=$(jq -r '.allocations[].hostVeth' <<<"$aj" | sort)
	got=$(node_exec ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -E "^${VPFX}[0-9a-f]{12}$" | sort || true)
	[ "$got" = "$want" ] || { echo "host veths:" $(diff <(echo "$got") <(echo "$want") | grep '^[<>]'); return 1; }
	want=$(jq -r '.allocations[] | .ip, (.ip6 // empty) | select(contains(":") | not)' <<<"$aj" | sort)
	want6=$(jq -r '.allocations[] | .ip, (.ip6 // empty) | select(contains(":"))' <<<"$aj" | sort)
	got=$(node_exec ip -4 rule show pref 512 | sed -nE 's/.* to ([0-9.]+) lookup main.*/\1/p' | grep -E "$POOL_RE" | sort || true)
	[ "$got" = "$want" ] || { echo "rules at 512:" $(diff <(echo "$got") <(echo "$want") | grep '^[<>]'); return 1; }
	got=$(node_exec ip -4 route show | awk -v p="$VPFX" '$2 == "dev" && index($3, p) == 1 { print $1 }' | grep -E "$POOL_RE" | sort || true)
	[ "$got" = "$want" ] || { echo "/32 routes:" $(diff <(echo "$got") <(echo "$want") | grep '^[<>]'); return 1; }
	got=$(veth_routes6 | sort)
	[ "$got" = "$want6" ] || { echo "/128 routes:" $(diff <(echo "$got") <(echo "$want6") | grep '^[<>]'); return 1; }
	got=$(find "$NETNS_DIR" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	[ "$got" = "$(grep -c . <<<"$ready" || true)" ] || { echo "$got netns for $(grep -c . <<<"$ready" || true) READY sandboxes"; return 1; }
}

# runtime_ips ID: the sandbox's addresses as CRI reports them (the CNI
# result's: its primary IP and the additional one of a dual-stack pod),
# sorted as jq sorts, space-separated.
runtime_ips() {
	e2e_inspectp "$1" | jq -er '[.status.network.ip // empty, ((.status.network.additionalIps // [])[].ip)] | sort | join(" ")'
}

# veth_routes6: the node's IPv6 host routes through a pod's veth (not the
# link-local /64 the kernel puts on every link), one address a line.
veth_routes6() {
	node_exec ip -6 route show | awk -v p="$VPFX" '$2 == "dev" && index($3, p) == 1 && $1 !~ /^fe80:/ { sub(/\/128$/, "", $1); print $1 }'
}

# check_consistent: consistent, allowing a few seconds for work in flight.
check_consistent() {
	local i why
	for ((i = 0; i < 8; i++)); do
		why=$(consistent 2>&1) && return 0
		sleep 1
	done
	fail "store, runtime and host disagree: $why"
}

# snapshot: what must not change across a restart: READY sandboxes with
# their pods and addresses, and the allocations.
snapshot() {
	kl_sandboxes ready | awk '{ print $2, $1 }' | sort
	alloc_json | jq -r '.allocations[] | "\(.containerID) \(.ip) \(.podName)"' | sort
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
no_alloc() { [ -z "$(ip_of_sandbox "$1")" ]; }

# freed_by_del ID IP SECS: kubelet's DEL of sandbox ID comes within SECS,
# succeeds, and has freed IP when it returns (not gc later, not a retry).
freed_by_del() {
	local sb=$1
	wait_for "$3" eval '[ -n "$(calls DEL "$sb")" ]' || fail "no DEL of sandbox $1 ($2) reached eni-cni within $3 s"
	[ -z "$(failed_calls DEL "$1")" ] || fail "DEL failed: $(failed_calls DEL "$1")"
	# The wrapper logs the call once the plugin has returned: the address is
	# free by then (a second look covers a store read racing that write).
	no_alloc "$1" || { sleep 1 && no_alloc "$1"; } || fail "DEL of sandbox $1 returned 0 but $2 is still allocated"
	! grep -q "gc: freed $2 " "$GC_LOG" || fail "$2 was freed by gc, not by the DEL"
}

# poll SECS CMD...: run CMD until it succeeds with some output; print it.
poll() {
	local secs=$1 i out
	shift
	for ((i = 0; i < secs * 5; i++)); do
		if out=$("$@" 2>/dev/null) && [ -n "$out" ]; then
			printf '%s\n' "$out"
			return 0
		fi
		sleep 0.2
	done
	return 1
}
# other_sandbox NAME OLD: the READY sandbox of NAME if it is not OLD.
other_sandbox() {
	local s
	s=$(sandbox_of "$1") && [ -n "$s" ] && [ "$s" != "$2" ] && echo "$s"
}

# watch_ready T0 SECS NAME...: poll kubelet's /pods until every NAME is
# Ready with an IP; print "name seconds-since-T0 ip" per pod, by first sight.
watch_ready() {
	local t0=$1 secs=$2 n ip now deadline
	shift 2
	local -A want=() seen=()
	for n in "$@"; do want[$n]=1; done
	deadline=$(awk -v t="$EPOCHREALTIME" -v s="$secs" 'BEGIN { printf "%.0f", t + s }')
	while [ ${#seen[@]} -lt ${#want[@]} ]; do
		now=$EPOCHREALTIME
		while read -r n ip; do
			[ -n "$n" ] && [ -n "${want[$n]+x}" ] && [ -z "${seen[$n]+x}" ] || continue
			seen[$n]="$(awk -v a="$t0" -v b="$now" 'BEGIN { printf "%.3f", b - a }') $ip"
		done < <(kl_ready_names 2>/dev/null)
		[ "${now%.*}" -lt "$deadline" ] || break
		sleep 0.1
	done
	for n in "${!seen[@]}"; do echo "$n ${seen[$n]}"; done
	[ ${#seen[@]} -eq ${#want[@]} ]
}

# ------------------------------------------------------------------ gc loop

# start_gc_loop: `eni-cni gc` every 2 s, as a timer would run it, with the
# shortest grace allowed, so that it could free a live pod's address if it
# were wrong.
start_gc_loop() {
	GC_LOG=$E2E_RUN/logs/gc-loop.log
	GC_STOP=$E2E_RUN/gc-loop.stop
	: >"$GC_LOG"
	(
		set +e
		while [ ! -e "$GC_STOP" ]; do
			t=$EPOCHREALTIME
			out=$(eni gc --config "$CONF" --cri-endpoint "$E2E_ENDPOINT" --grace "$GC_GRACE" 2>&1)
			rc=$?
			printf '%s rc=%s %s\n' "$t" "$rc" "$(printf '%s' "$out" | tr '\n' '|')" >>"$GC_LOG"
			sleep 2
		done
	) &
	GC_PID=$!
}
stop_gc_loop() {
	[ -n "${GC_PID:-}" ] || return 0
	touch "$GC_STOP"
	wait "$GC_PID" 2>/dev/null || true
	GC_PID=
}

# in_down_window T: T falls in a window where containerd was down (+10 s).
in_down_window() {
	local w
	for w in "${DOWN_WINDOWS[@]}"; do
		awk -v t="$1" -v a="${w% *}" -v b="${w#* }" 'BEGIN { exit !(t >= a && t <= b + 10) }' && return 0
	done
	return 1
}

check_gc_loop() {
	local passes freed bad t rc
	stop_gc_loop
	passes=$(grep -c . "$GC_LOG" || true)
	[ "$passes" -ge 5 ] || fail "the gc loop ran only $passes times"
	freed=$(grep -oE 'gc: freed [0-9.]+ sandbox [^|]*' "$GC_LOG" || true)
	[ -z "$freed" ] || fail "the gc loop freed addresses of pods kubelet runs or ran: $freed"
	bad=0
	while read -r t rc _; do
		[ "$rc" = rc=0 ] && continue
		in_down_window "$t" || { say "gc pass at $t failed outside a containerd restart: $(grep -F "$t" "$GC_LOG")"; bad=1; }
	done <"$GC_LOG"
	[ "$bad" = 0 ] || fail "gc failed while the runtime was up"
	local left
	left=$(grep -oE 'gc: [a-z ]*leftover (veth|rule|route)[^|]*' "$GC_LOG" | sed 's/^gc: //' | tr '\n' ';' || true)
	GC_SUMMARY="$passes passes, $(grep -c 'rc=0' "$GC_LOG" || true) ok (the others while containerd restarted), freed nothing; host leftovers: ${left:-none}"
}

# ------------------------------------------------------------------ static phase

static_conflist() {
	cat <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kubelet-pods",
  "plugins": [
    { "type": "eni-cni",
      "stateDir": "@RUN@/eni-state",
      "logFile": "@RUN@/logs/eni-cni.log",
      "hostVethPrefix": "$VPFX",
      "cooldownSeconds": $COOLDOWN,
      "mtu": 1500,
      "pool": { "source": "static", "ranges": ["$POOL_RANGE"] } }
  ]
}
EOF
}

CRASH_SPEC=
case_static_pods() {
	begin static-pods-get-pool-addresses
	CRASH_SPEC=$(jq -cn --arg img "$E2E_PAUSE_IMAGE" '{spec: {containers: [{name: "main", image: $img, imagePullPolicy: "Never", command: ["/pause", "-v"]}]}}')
	kl_put web-0 web-1 "crash=$CRASH_SPEC"
	kl_wait_ready 60 web-0 web-1 || fail "web-0 and web-1 not Ready"
	poll 60 sandbox_of crash >/dev/null || fail "no sandbox for crash"
	local p uid ip ready aj cid ips=()
	aj=$(alloc_json)
	for p in web-0 web-1; do
		read -r uid ip ready _ < <(kl_status "$p")
		[[ $ip =~ $POOL_RE ]] || fail "$p: kubelet reports IP $ip, not from the pool $POOL_RANGE"
		cid=$(sandbox_of "$p")
		jq -e --arg c "$cid" --arg ip "$ip" --arg ns "$KL_NAMESPACE" --arg n "$p-$KL_NODE" --arg uid "$uid" \
			'.allocations[] | select(.containerID == $c and .ip == $ip and .podNamespace == $ns and .podName == $n and .podUID == $uid)' \
			<<<"$aj" >/dev/null || fail "$p: eni-cni list lacks sandbox $cid $ip $KL_NAMESPACE/$p-$KL_NODE uid $uid: $(jq -c '.allocations' <<<"$aj")"
		ips+=("$ip")
	done
	[ "${ips[0]}" != "${ips[1]}" ] || fail "same address ${ips[0]} twice"
	check_consistent
	pass "web-0 ${ips[0]}, web-1 ${ips[1]}, crash $(ip_of_sandbox "$(sandbox_of crash)"); eni-cni list has $KL_NAMESPACE/<pod>-$KL_NODE and kubelet's UIDs"
}

case_reachable() {
	begin pods-reachable-from-node
	local a b
	a=$(kl_ip web-0) b=$(kl_ip web-1)
	node_exec ping -c1 -W2 -q "$a" >/dev/null || fail "node cannot ping web-0 $a"
	node_exec ping -c1 -W2 -q "$b" >/dev/null || fail "node cannot ping web-1 $b"
	e2e_netns_exec "$(sandbox_of web-0)" ping -c1 -W2 -q "$b" >/dev/null || fail "web-0 cannot ping web-1 $b"
	pass "node -> $a, $b; web-0 -> web-1"
}

case_manifest_removal() {
	begin manifest-removal-frees-address
	local cid ip veth t
	cid=$(sandbox_of web-1) ip=$(kl_ip web-1)
	veth=$(alloc_json | jq -r --arg c "$cid" '.allocations[] | select(.containerID == $c) | .hostVeth')
	t=$EPOCHREALTIME
	kl_rm web-1
	freed_by_del "$cid" "$ip" 60
	local freed_after
	freed_after=$(e2e_since "$t")
	kl_wait_gone 30 web-1 || fail "kubelet still lists web-1"
	node_exec ip link show "$veth" >/dev/null 2>&1 && fail "host veth $veth of web-1 left"
	grep -q " to $ip " <<<"$(node_exec ip -4 rule show pref 512)" && fail "rule for $ip left"
	REMOVED+=("$cid")
	check_consistent
	pass "freed $ip ${freed_after}s after the manifest went; veth, rule and route gone; pool $(pool_counts)"
}

case_sandbox_recreated() {
	begin sandbox-recreated-without-leak
	local k old oldip new pid uid n
	uid=$(kl_uid crash)
	for k in 1 2; do
		old=$(sandbox_of crash)
		oldip=$(ip_of_sandbox "$old")
		[ -n "$oldip" ] || fail "crash sandbox $old has no allocation"
		pid=$(e2e_inspectp "$old" | jq -r '.info.pid')
		[ "${pid:-0}" -gt 1 ] || fail "no pid for sandbox $old"
		kill -KILL "$pid"
		new=$(poll 90 other_sandbox crash "$old") || fail "kubelet made no new sandbox for crash after its sandbox $old died"
		freed_by_del "$old" "$oldip" 60
		n=$(alloc_json | jq --arg u "$uid" '[.allocations[] | select(.podUID == $u)] | length')
		[ "$n" = 1 ] || fail "pod crash (uid $uid) holds $n addresses"
		[ -n "$(ip_of_sandbox "$new")" ] || fail "new sandbox $new of crash has no address"
		REMOVED+=("$old")
		say "sandbox $old ($oldip) killed: kubelet made $new ($(ip_of_sandbox "$new")), $oldip freed"
	done
	[ "$(pod_calls ADD crash | wc -l)" = 3 ] || fail "expected 3 ADDs for crash (3 sandboxes): $(pod_calls ADD crash)"
	check_consistent
	pass "2 sandboxes killed, 2 recreated by kubelet; 3 ADDs, old addresses freed, one address for the pod"
}

# burst_ready PREFIX TIMEOUT: BURST static pods PREFIX-00.. written at once
# must all be Ready within TIMEOUT s with distinct addresses and no failed
# ADD (warmed first, or each ADD waiting for its warm pass on a dry ec2
# pool: no sandbox creation failed and was retried by kubelet). Sets
# BURST_OUT (watch_ready's lines), BURST_LAST and BURST_P50 (seconds).
burst_ready() {
	local prefix=$1 timeout=$2 names=() i t0 ips n
	for ((i = 0; i < BURST; i++)); do names+=("$(printf '%s-%02d' "$prefix" "$i")"); done
	t0=$EPOCHREALTIME
	kl_put "${names[@]}"
	BURST_OUT=$(watch_ready "$t0" "$timeout" "${names[@]}") || fail "not all $BURST Ready in $timeout s: $(wc -l <<<"$BURST_OUT") were"
	BURST_LAST=$(awk '{ print $2 }' <<<"$BURST_OUT" | sort -n | tail -n 1)
	BURST_P50=$(awk '{ print $2 }' <<<"$BURST_OUT" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
	ips=$(awk '{ print $3 }' <<<"$BURST_OUT" | sort -u | wc -l)
	[ "$ips" = "$BURST" ] || fail "$BURST pods got $ips distinct addresses"
	n=$(awk -v p="^$prefix-" '$2 == "ADD" && $4 ~ p && $NF != "exit=0"' "$CALLS" | wc -l)
	[ "$n" = 0 ] || fail "$n ADDs of the burst failed: $(awk -v p="^$prefix-" '$2 == "ADD" && $4 ~ p && $NF != "exit=0"' "$CALLS" | head -3)"
}

case_burst() {
	begin burst-$BURST-ready
	local last p50
	burst_ready burst 120
	last=$BURST_LAST p50=$BURST_P50
	check_consistent
	TIMINGS+=("static burst of $BURST: last Ready ${last}s, median ${p50}s after the manifests")
	pass "$BURST Ready, distinct addresses; last reported Ready ${last}s after the manifests (median ${p50}s)"
}

case_crashloop() {
	begin crashloop-keeps-sandbox
	local sb restarts adds0
	sb=$(sandbox_of crash)
	adds0=$(pod_calls ADD crash | wc -l)
	# Back-off: restarts after about 10 s, then 20 s more, doubling.
	wait_for 90 eval '[ "$(kl_status crash | cut -d" " -f4)" -ge 2 ]' ||
		fail "container of crash restarted $(kl_status crash | cut -d' ' -f4) times in 90 s, expected >= 2"
	restarts=$(kl_status crash | cut -d' ' -f4)
	[ "$(sandbox_of crash)" = "$sb" ] || fail "container restarts replaced the sandbox"
	[ "$(pod_calls ADD crash | wc -l)" = "$adds0" ] && [ "$adds0" = 1 ] || fail "container restarts made CNI ADDs: $(pod_calls ADD crash)"
	[ -n "$(ip_of_sandbox "$sb")" ] || fail "sandbox $sb lost its address"
	pass "container exited and was restarted $restarts times in sandbox ${sb:0:12}: same address, one ADD, no other CNI call"
}

# restart_case NAME STOP START [MAY_LOSE]: stop and start a daemon under
# running pods. Every sandbox that is still READY afterwards keeps its
# address, no live sandbox gets a DEL, nothing is allocated twice. With
# MAY_LOSE=1 (containerd), a sandbox whose task containerd cannot reach again
# on start-up (seen under heavy load) may go NOTREADY: kubelet then replaces
# it; its address must be freed and the new one's allocated, one per pod.
restart_case() {
	begin "$1"
	local before live lines0 t new bad id name ip lost=() kept=0 why=
	before=$(kl_sandboxes ready | awk '{ print $1, $2 }')
	local -A ip0=()
	while read -r id ip; do ip0[$id]=$ip; done < <(alloc_json | jq -r '.allocations[] | "\(.containerID) \(.ip)"')
	lines0=$(wc -l <"$CALLS")
	t=$EPOCHREALTIME
	$2
	sleep 1
	$3
	kl_wait_ready 90 $(kl_ready_expected) || fail "pods not Ready again after the restart"
	sleep 5 # a few PLEG relists and sync loops
	live=$(kl_sandboxes ready | awk '{ print $1 }')
	while read -r id name; do
		if grep -qx "$id" <<<"$live"; then
			ip=$(ip_of_sandbox "$id")
			[ "$ip" = "${ip0[$id]}" ] || fail "$name (sandbox ${id:0:12}) had ${ip0[$id]}, now ${ip:-nothing}"
			kept=$((kept + 1))
		else
			lost+=("$id")
			why=$(grep -F "$id" "$E2E_CONTAINERD_LOG" | grep -m1 -iE 'level=(error|warn)' | sed -E 's/.*msg="([^"]*)".*/\1/' || true)
			say "$name: sandbox ${id:0:12} is no longer READY after the restart${why:+ (containerd: $why)}"
		fi
	done <<<"$before"
	[ ${#lost[@]} = 0 ] || [ "${4:-0}" = 1 ] || fail "the restart replaced sandboxes: ${lost[*]}"
	[ "$kept" -gt "${#lost[@]}" ] || fail "only $kept of $((kept + ${#lost[@]})) sandboxes survived the restart"
	new=$(tail -n +"$((lines0 + 1))" "$CALLS")
	bad=$(awk 'NR == FNR { live[$1] = 1; next } $2 == "DEL" && ($3 in live)' <(echo "$live") <(echo "$new"))
	[ -z "$bad" ] || fail "DEL of a live sandbox after the restart: $bad"
	[ "$(awk '$2 == "ADD"' <<<"$new" | wc -l)" = "${#lost[@]}" ] || fail "ADDs after the restart, ${#lost[@]} sandboxes lost: $(awk '$2 == "ADD"' <<<"$new")"
	for id in "${lost[@]}"; do
		no_alloc "$id" || fail "the lost sandbox $id still holds $(ip_of_sandbox "$id")"
		[ -n "$(awk -v c="$id" '$2 == "DEL" && $3 == c && $NF == "exit=0"' <<<"$new")" ] || fail "no DEL for the lost sandbox $id"
	done
	check_consistent
	pass "$kept sandboxes kept their addresses, back in $(e2e_since "$t")s; no DEL of a live one$([ ${#lost[@]} = 0 ] ||
		echo "; ${#lost[@]} lost by the runtime on start-up, replaced by kubelet, old address freed")"
}
# kl_ready_expected: the pods that must be Ready now (all manifests but the
# crash-looping one and a starved one).
kl_ready_expected() {
	local f
	for f in "$KL_MANIFESTS"/*.json; do
		f=${f##*/}
		f=${f%.json}
		case $f in crash | starved) ;; *) echo "$f" ;; esac
	done
}
restart_kubelet_stop() { kl_stop; }
restart_kubelet_start() { kl_start; }
restart_containerd_stop() {
	DOWN_FROM=$EPOCHREALTIME
	e2e_stop_containerd
}
restart_containerd_start() {
	e2e_start_containerd
	DOWN_WINDOWS+=("$DOWN_FROM $EPOCHREALTIME")
}

case_pool_exhausted() {
	begin pool-exhausted-add-retried
	local c free i fills=() failed victim vip t uid
	wait_for 30 eval '[ "$(pool_counts | jq .cooling)" = 0 ]' || fail "addresses still cooling: $(pool_counts)"
	c=$(pool_counts)
	free=$(jq .free <<<"$c")
	for ((i = 0; i < free; i++)); do fills+=("fill-$i"); done
	if [ ${#fills[@]} -gt 0 ]; then
		kl_put "${fills[@]}"
		kl_wait_ready 60 "${fills[@]}" || fail "fill pods not Ready"
	fi
	c=$(pool_counts)
	jq -e '.free == 0 and .cooling == 0' <<<"$c" >/dev/null || fail "pool not full: $c"
	kl_put starved
	wait_for 90 eval '[ "$(pod_calls ADD starved | grep -vc "exit=0$")" -ge 2 ]' ||
		fail "kubelet did not retry the failing ADD: $(pod_calls ADD starved)"
	grep -q 'no free address' "$E2E_RUN/logs/eni-cni.log" || fail "eni-cni log does not say 'no free address'"
	[ -z "$(kl_ip starved | grep -v '^-$' || true)" ] || fail "starved reports an IP on a full pool"
	[ -z "$(kl_sandboxes ready | awk '$2 == "starved"')" ] || fail "starved has a READY sandbox on a full pool"
	check_consistent # nothing half-made: no veth, rule, route or netns without an allocation
	failed=$(pod_calls ADD starved | wc -l)
	victim=$(sandbox_of burst-00) vip=$(kl_ip burst-00)
	t=$EPOCHREALTIME
	kl_rm burst-00
	REMOVED+=("$victim")
	kl_wait_ready 120 starved || fail "starved not Ready after $vip was freed"
	[ "$(kl_ip starved)" = "$vip" ] || fail "starved got $(kl_ip starved), not the freed $vip"
	uid=$(kl_uid starved)
	[ "$(alloc_json | jq --arg u "$uid" '[.allocations[] | select(.podUID == $u)] | length')" = 1 ] || fail "starved holds more than one address"
	STARVED_IP=$vip
	check_consistent
	pass "pool of $(jq .total <<<"$c") full; $failed failed ADDs retried by kubelet, nothing half-made; starved Ready with $vip $(e2e_since "$t")s after burst-00 went"
}

case_kubelet_gc() {
	begin kubelet-sandbox-gc-harmless
	local id left f n dels=0
	# kubelet removes dead sandboxes of deleted pods on its own schedule
	# (every minute): the DELs it sends then must free nothing alive.
	gone() {
		local all
		all=$(kl_sandboxes all | awk '{ print $1 }')
		for id in "${REMOVED[@]}"; do grep -qx "$id" <<<"$all" && return 1; done
		return 0
	}
	wait_for 150 gone || fail "kubelet's sandbox GC left: $(kl_sandboxes all | grep -F -f <(printf '%s\n' "${REMOVED[@]}") | tr '\n' ' ')"
	for id in "${REMOVED[@]}"; do
		no_alloc "$id" || fail "removed sandbox $id still holds $(ip_of_sandbox "$id")"
		[ -z "$(failed_calls DEL "$id")" ] || fail "DEL failed: $(failed_calls DEL "$id")"
		n=$(calls DEL "$id" | wc -l)
		dels=$((dels + n))
		for f in /var/lib/cni/results/*"-$id-"*; do [ -e "$f" ] && fail "libcni cache $f left"; done
	done
	[ "$(kl_ip starved)" = "$STARVED_IP" ] && [ "$(ip_of_sandbox "$(sandbox_of starved)")" = "$STARVED_IP" ] ||
		fail "starved lost $STARVED_IP, the address it reused from burst-00, to the late DELs of burst-00's sandbox"
	check_consistent
	pass "${#REMOVED[@]} dead sandboxes removed by kubelet with $dels DELs in all (every one exit 0); starved keeps $STARVED_IP reused from burst-00; nothing left"
}

case_gc_loop() {
	begin gc-loop-frees-nothing-live
	check_gc_loop
	pass "$GC_SUMMARY"
}

# teardown NAME: remove every manifest, wait for every address to be freed,
# stop kubelet and containerd, check that nothing of the run is left.
teardown() {
	begin "$1"
	local t n
	stop_gc_loop
	t=$EPOCHREALTIME
	rm -f "$KL_MANIFESTS"/*.json
	wait_for 90 eval '[ "$(alloc_json | jq ".allocations | length")" = 0 ]' ||
		fail "$(alloc_json | jq '.allocations | length') addresses still allocated 90 s after all manifests went"
	local freed=$(e2e_since "$t")
	kl_wait_gone 60 $(kl_pods | jq -r --arg sfx "-$KL_NODE" '.items // [] | .[].metadata.name | rtrimstr($sfx)') || fail "kubelet still lists pods"
	kl_stop
	# Every sandbox the plugin saw, for e2e_check_clean's look at libcni's
	# cache and shim sockets.
	awk '{ print $3 }' "$CALLS" | sort -u >>"$E2E_RUN/pods.list"
	# kubelet stopped them (DEL done); remove them a few at a time rather
	# than wait for its GC, then whatever is left one by one.
	kl_sandboxes all | awk '{ print $1 }' | xargs -r -n 1 -P 6 "$E2E_CRICTL" --config "$E2E_CRICTL_CONFIG" \
		--runtime-endpoint "$E2E_ENDPOINT" rmp -f >/dev/null 2>&1 || true
	e2e_stop || fail "removing the stopped sandboxes failed"
	n=$(alloc_json | jq '.allocations | length')
	[ "$n" = 0 ] || fail "$n allocations left"
	kl_cleanup
	e2e_check_clean || fail "containerd left things behind"
	kl_check_host_clean || fail "kubelet left things behind outside its root dir"
	n=$(node_exec ip -o link show | awk -F': ' '{ print $2 }' | grep -cE "^${VPFX}[0-9a-f]{12}" || true)
	[ "$n" = 0 ] || fail "$n host veths left"
	n=$(node_exec ip -4 rule | grep -E "^(512|1536):.*[[:space:]](to|from) ${POOL_RE#^}[0-9.]* " || true)
	[ -z "$n" ] || fail "rules left for freed addresses (every DEL succeeded and nothing is allocated):$(printf ' [%s]' "$n" | tr '\n\t' '; ')"
	n=$(veth_routes6)
	[ -z "$n" ] || fail "/128 routes left: $(echo $n)"
	n=$(node_exec ip -6 rule | grep -E "(to|from) ${POOL6_RE#^}" || true)
	[ -z "$n" ] || fail "IPv6 rules left for pod addresses:$(printf ' [%s]' "$n" | tr '\n\t' '; ')"
	pass "all addresses freed ${freed}s after the manifests went; kubelet and containerd stopped; nothing left"
	e2e_cleanup
}

phase_static() {
	setup_run "$(static_conflist)"
	say "run dir $E2E_RUN, node $KL_NODE; containerd $E2E_CONTAINERD, $(kl_version)"
	e2e_start_containerd
	kl_start
	say "containerd up in ${E2E_TIME_UP}s, kubelet healthy in ${KL_TIME_UP}s"
	start_gc_loop
	case_static_pods
	case_reachable
	case_manifest_removal
	case_crashloop
	case_sandbox_recreated
	case_burst
	restart_case kubelet-restart-keeps-addresses restart_kubelet_stop restart_kubelet_start
	restart_case containerd-restart-keeps-addresses restart_containerd_stop restart_containerd_start 1
	case_pool_exhausted
	case_kubelet_gc
	case_gc_loop
	teardown teardown-leaves-nothing
}

# ------------------------------------------------------------------ ec2 phase

EC2_NODE='' EC2_VPC='' EC2_WORK='' FAKE_PID='' WATCH_PID='' WARM_PID=''

# ec2_setup: a throwaway node namespace with the fake IMDS + EC2 server (as
# scripts/demo-ec2.sh), the primary ENI's link, and a "hypervisor" that adds
# the link of every ENI warm attaches.
ec2_setup() {
	local tag=ecni-kl-$$ url pmac pip
	EC2_NODE=$tag-node EC2_VPC=$tag-vpc
	EC2_WORK=$(mktemp -d "/tmp/$tag.XXXX")
	ip netns add "$EC2_NODE"
	ip netns add "$EC2_VPC"
	ip -n "$EC2_NODE" link set lo up
	(cd "$ROOT" && CGO_ENABLED=0 go build -o "$EC2_WORK/ec2fake" ./ec2/ec2fake/cmd/ec2fake) || fail "build ec2fake"
	local v6=()
	[ "$EC2_FAMILY" = ipv4 ] || v6=(--subnet-ipv6-cidr "$SUBNET6")
	_e2e_nolock nsenter --net="/run/netns/$EC2_NODE" -- "$EC2_WORK/ec2fake" --instance-type m5.xlarge \
		--vpc-cidr 10.76.0.0/16 --subnet-cidr 10.76.0.0/20 "${v6[@]}" --describe "$EC2_WORK/ec2.json" \
		--env-file "$EC2_WORK/ec2.env" >"$EC2_WORK/ec2fake.out" 2>"$EC2_WORK/ec2fake.err" &
	FAKE_PID=$!
	wait_for 10 test -s "$EC2_WORK/ec2fake.out" -a -s "$EC2_WORK/ec2.env" -a -s "$EC2_WORK/ec2.json" ||
		fail "the fake did not start: $(cat "$EC2_WORK/ec2fake.err")"
	url=$(head -n 1 "$EC2_WORK/ec2fake.out")
	EC2_URL=$url
	read -r pmac pip < <(jq -r '.enis[0] | "\(.mac) \(.primaryIp)"' "$EC2_WORK/ec2.json")
	ip -n "$EC2_NODE" link add ens5 address "$pmac" type veth peer name ens5p netns "$EC2_VPC"
	ip -n "$EC2_VPC" link set ens5p up
	ip -n "$EC2_NODE" link set ens5 up
	ip -n "$EC2_NODE" addr add "$pip/20" dev ens5
	ip -n "$EC2_NODE" route add default via 10.76.0.1 dev ens5
	NODE_IP6=
	[ "$EC2_FAMILY" = ipv4 ] || ec2_node_ipv6
	EC2_CALLS0=$(jq -c .calls "$EC2_WORK/ec2.json")
	ec2_hypervisor &
	WATCH_PID=$!
	# The SDK's credentials and endpoints, for warm, gc and (through
	# containerd's environment) the plugin.
	set -a
	# shellcheck disable=SC1091
	. "$EC2_WORK/ec2.env"
	set +a
}

# ec2_hypervisor: add the node link of every ENI the fake shows attached
# (warm waits for it after AttachNetworkInterface), until told to stop.
ec2_hypervisor() {
	set +e
	local mac dev name
	while [ ! -e "$EC2_WORK/stop" ]; do
		jq -r '.enis[] | select(.deviceIndex >= 1) | "\(.mac) \(.deviceIndex)"' "$EC2_WORK/ec2.json" 2>/dev/null |
			while read -r mac dev; do
				name=ens$((5 + dev))
				ip -n "$EC2_NODE" link show "$name" >/dev/null 2>&1 && continue
				ip -n "$EC2_NODE" link add "$name" address "$mac" type veth peer name "${name}p" netns "$EC2_VPC" &&
					ip -n "$EC2_VPC" link set "${name}p" up
			done
		sleep 0.1
	done
}

ec2_teardown() {
	[ -n "$EC2_WORK" ] || return 0
	touch "$EC2_WORK/stop"
	[ -z "$WARM_PID" ] || { wait "$WARM_PID" 2>/dev/null || true; WARM_PID=; }
	[ -z "$WATCH_PID" ] || { wait "$WATCH_PID" 2>/dev/null || true; WATCH_PID=; }
	[ -z "$FAKE_PID" ] || { _e2e_kill_wait "$FAKE_PID" 5; FAKE_PID=; }
	# A warm pass an ADD or STATUS started runs in a session of its own and
	# may outlive kubelet and containerd: it would write into the state
	# directory while the run directory is removed.
	local p
	for p in $(ip netns pids "$EC2_NODE" 2>/dev/null); do _e2e_kill_wait "$p" 5; done
	ip netns del "$EC2_NODE" 2>/dev/null || true
	ip netns del "$EC2_VPC" 2>/dev/null || true
	rm -rf "$EC2_WORK"
	EC2_WORK=
}

ec2_conflist() {
	local wait=
	[ "$EC2_POOL" = dry ] && wait='"addWaitSeconds": 60,'
	local fam=
	case $EC2_FAMILY in
	ipv6) fam='"ipFamilies": ["ipv6"],' ;;
	dual) fam='"ipFamilies": ["ipv4", "ipv6"],' ;;
	esac
	cat <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kubelet-ec2-pods",
  "plugins": [
    { "type": "eni-cni",
      "stateDir": "@RUN@/eni-state",
      "logFile": "@RUN@/logs/eni-cni.log",
      "hostVethPrefix": "$VPFX",
      "cooldownSeconds": $COOLDOWN,
      "imdsEndpoint": "$EC2_URL",
      "ec2Endpoint": "$EC2_URL",
      $fam
      "pool": { "source": "ec2", "warmIPTarget": $((BURST + 2)), $wait "maxENIs": 3 } }
  ]
}
EOF
}

# start_warm_loop: `eni-cni warm` every 10 s, as its timer would.
start_warm_loop() {
	(
		set +e
		while [ ! -e "$EC2_WORK/stop" ]; do
			eni warm --config "$CONF" >>"$E2E_RUN/logs/warm-loop.log" 2>&1
			sleep 10
		done
	) &
	WARM_PID=$!
}

case_ec2_burst() {
	begin ec2-burst-$BURST-ready
	local out last p50 secondary onsec=0 ip tbl rules
	burst_ready ec2 180
	out=$BURST_OUT last=$BURST_LAST p50=$BURST_P50
	secondary=$(jq -r '.enis[] | .secondaryIps[]' "$EC2_WORK/ec2.json")
	rules=$(node_exec ip -4 rule show)
	while read -r _ _ ip; do
		grep -qx "$ip" <<<"$secondary" || fail "$ip is not a secondary address the fake EC2 assigned"
		node_exec ping -c1 -W2 -q "$ip" >/dev/null || fail "node cannot ping $ip"
		# An address of a secondary ENI leaves through that ENI's table.
		tbl=$(jq -r --arg ip "$ip" '.enis[] | select(.secondaryIps | index($ip)) | .deviceIndex + 1' "$EC2_WORK/ec2.json")
		if [ "$tbl" != 1 ]; then
			grep -qE "^1536:\s+from $ip lookup $tbl\b" <<<"$rules" ||
				fail "no 'from $ip lookup $tbl' rule for a pod on an ENI with table $tbl; rules: $(grep '^1536:' <<<"$rules" | tr '\n\t' '; ');
store: $(alloc_json | jq -c --arg ip "$ip" '.allocations[] | select(.ip == $ip)')"
			onsec=$((onsec + 1))
		fi
	done <<<"$out"
	check_consistent
	TIMINGS+=("ec2 burst of $BURST ($EC2_POOL pool): last Ready ${last}s, median ${p50}s after the manifests")
	pass "$BURST Ready on the ec2 pool ($EC2_POOL), no ADD failed, distinct EC2-assigned addresses ($onsec on a second ENI, with its rule), pinged from the node; last Ready ${last}s (median ${p50}s)"
}

# ------------------------------------------------------------------ ec2 phase in IPv6 and dual-stack

ec2_node() { nsenter --net="/run/netns/$EC2_NODE" -- "$@"; }

# ec2_node_ipv6: the primary ENI gets an IPv6 address of the subnet's /64
# (one AssignIpv6Addresses before the suite counts the fill's calls, as a
# launch in a subnet with IPv6 gives it one), which the node carries on
# ens5 with a default route via the VPC router's link-local address.
ec2_node_ipv6() {
	local eni out
	eni=$(jq -r '.enis[] | select(.deviceIndex == 0) | .id' "$EC2_WORK/ec2.json")
	out=$(ec2_node curl -sS -d Action=AssignIpv6Addresses -d Version=2016-11-15 -d "NetworkInterfaceId=$eni" \
		-d Ipv6AddressCount=1 "$EC2_URL/" 2>&1) || fail "assign the node's IPv6 address: $out"
	NODE_IP6=$(poll 10 jq -er '.enis[] | select(.deviceIndex == 0) | .ipv6s[0] // empty' "$EC2_WORK/ec2.json") ||
		fail "the fake shows no IPv6 address on $eni: $out"
	ip -n "$EC2_NODE" addr add "$NODE_IP6/64" dev ens5 nodad
	ip -n "$EC2_NODE" -6 route add default via fe80::1 dev ens5
}

# imds_get PATH: PATH under the node's IMDS meta-data, as the SDK asks (IMDSv2).
imds_get() {
	local tok
	tok=$(ec2_node curl -sSf -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' "$EC2_URL/latest/api/token") &&
		ec2_node curl -sSf -H "X-aws-ec2-metadata-token: $tok" "$EC2_URL/latest/meta-data/$1"
}

# pool_free: the pool's free addresses, of the scarcer family on a network
# of more than IPv4.
pool_free() { pool_counts | jq 'if .families then ([.families[] | .free] | min) else .free end'; }

# pods_ips PREFIX: "name ip..." for each pod PREFIX-* kubelet reports, every
# address of its status.podIPs.
pods_ips() {
	kl_pods | jq -r --arg sfx "-$KL_NODE" --arg p "$1-" '(.items // [])[] | (.metadata.name | rtrimstr($sfx)) as $n |
		select($n | startswith($p)) | "\($n) \([(.status.podIPs // [])[].ip] | join(" "))"'
}
# ips_of FAMILY [POD]: the burst's addresses of FAMILY (4 or 6), or POD's,
# one a line.
ips_of() {
	awk -v f="$1" -v n="${2:-}" 'n == "" || $1 == n { for (i = 2; i <= NF; i++) if (($i ~ /:/) == (f == 6)) print $i }' <<<"$BURST6_IPS"
}

# unreachable IP...: print each IP the node cannot ping (3 tries: the first
# echo may leave while the node still resolves the pod on its veth).
unreachable() {
	local ip i f
	for ip in "$@"; do
		f=-4
		[[ $ip == *:* ]] && f=-6
		for ((i = 0; i < 3; i++)); do
			node_exec ping "$f" -c1 -W1 -q "$ip" >/dev/null 2>&1 && continue 2
		done
		echo "$ip"
	done
}

# ec2_calls_delta: the fake's EC2 calls since the node was set up (the
# warm passes', the burst's), as {action: count}.
ec2_calls_delta() {
	jq -c --argjson a "$EC2_CALLS0" '.calls | with_entries(.value -= ($a[.key] // 0) | select(.value != 0))' "$EC2_WORK/ec2.json"
}

case_ec2_burst6() {
	begin "ec2-burst-$BURST-ready-$EC2_FAMILY"
	local want=1 bad
	[ "$EC2_FAMILY" = dual ] && want=2
	burst_ready ec2 180
	BURST6_IPS=$(pods_ips ec2)
	[ "$(grep -c . <<<"$BURST6_IPS")" = "$BURST" ] || fail "kubelet lists $(grep -c . <<<"$BURST6_IPS") ec2 pods, want $BURST"
	bad=$(awk -v w="$want" 'NF != w + 1' <<<"$BURST6_IPS")
	[ -z "$bad" ] || fail "pods without $want addresses in status.podIPs: $bad"
	check_consistent
	TIMINGS+=("ec2 burst of $BURST ($EC2_FAMILY, $EC2_POOL pool): last Ready ${BURST_LAST}s, median ${BURST_P50}s after the manifests")
	pass "$BURST Running and Ready, $want address(es) each in status.podIPs, no ADD failed, store = runtime = host (veths, /128 routes); last Ready ${BURST_LAST}s (median ${BURST_P50}s)"
}

# case_ec2_prefix6: every pod's IPv6 address is of the /80 the fake
# delegated to the primary ENI (its describe JSON and IMDS ipv6-prefix
# agree), distinct, never the prefix's first; a dual-stack pod's IPv4
# address is a secondary address the fake assigned.
case_ec2_prefix6() {
	begin "ec2-$EC2_FAMILY-addresses-of-the-delegated-80"
	local pmac pfx imds v6 v4 bad secondary
	read -r pmac pfx < <(jq -r '.enis[] | select(.deviceIndex == 0) | "\(.mac) \((.ipv6Prefixes // []) | join(","))"' "$EC2_WORK/ec2.json")
	[[ $pfx == */80 && $pfx != *,* ]] || fail "the primary ENI has IPv6 prefixes '$pfx', want one /80"
	imds=$(imds_get "network/interfaces/macs/$pmac/ipv6-prefix" 2>&1) || fail "IMDS ipv6-prefix of $pmac: $imds"
	[ "$imds" = "$pfx" ] || fail "IMDS says ipv6-prefix '$imds', the fake's describe $pfx"
	v6=$(ips_of 6)
	[ "$(sort -u <<<"$v6" | grep -c .)" = "$BURST" ] || fail "$BURST pods got $(sort -u <<<"$v6" | grep -c .) distinct IPv6 addresses: $(echo $v6)"
	bad=$(python3 -c 'import ipaddress, sys
p = ipaddress.ip_network(sys.argv[1])
for l in sys.stdin.read().split():
    a = ipaddress.ip_address(l)
    if a not in p or a == p.network_address:
        print(a)' "$pfx" <<<"$v6")
	[ -z "$bad" ] || fail "IPv6 addresses not of $pfx (or its first address): $(echo $bad)"
	PFX6=$pfx
	if [ "$EC2_FAMILY" = dual ]; then
		v4=$(ips_of 4)
		[ "$(sort -u <<<"$v4" | grep -c .)" = "$BURST" ] || fail "$BURST pods got $(sort -u <<<"$v4" | grep -c .) distinct IPv4 addresses"
		secondary=$(jq -r '.enis[] | .secondaryIps[]' "$EC2_WORK/ec2.json")
		bad=$(grep -vxF -f <(echo "$secondary") <<<"$v4" || true)
		[ -z "$bad" ] || fail "IPv4 addresses the fake did not assign: $(echo $bad)"
	fi
	pass "$BURST distinct IPv6 addresses of $pfx (the fake's describe and IMDS ipv6-prefix of $pmac agree), none its first$([ "$EC2_FAMILY" != dual ] ||
		echo "; $BURST distinct IPv4 secondary addresses the fake assigned")"
}

case_ec2_reachable6() {
	begin "ec2-pods-reachable-from-node-$EC2_FAMILY"
	local bad a b
	bad=$(unreachable $(awk '{ $1 = ""; print }' <<<"$BURST6_IPS"))
	[ -z "$bad" ] || fail "the node ($NODE_IP6) cannot ping: $(echo $bad)"
	a=$(ips_of 6 ec2-00)
	b=$(ips_of 6 ec2-01)
	e2e_netns_exec "$(sandbox_of ec2-00)" ping -6 -c1 -W2 -q "$b" >/dev/null || fail "ec2-00 ($a) cannot ping ec2-01 ($b)"
	pass "node ($NODE_IP6) pings all $BURST pods at each of their addresses; ec2-00 -> ec2-01 over IPv6"
}

case_ec2_fill_calls6() {
	begin "ec2-$EC2_FAMILY-fill-ec2-calls"
	local d
	d=$(ec2_calls_delta)
	[ "$(jq '.AssignIpv6Addresses // 0' <<<"$d")" = 1 ] || fail "AssignIpv6Addresses $(jq '.AssignIpv6Addresses // 0' <<<"$d") times to fill the node, want 1: $d"
	if [ "$EC2_FAMILY" = ipv6 ]; then
		[ "$(jq '[.AssignPrivateIpAddresses, .CreateNetworkInterface, .AttachNetworkInterface] | add // 0' <<<"$d")" = 0 ] ||
			fail "IPv4 addresses or ENIs asked for on a network of IPv6: $d"
	fi
	pass "1 AssignIpv6Addresses for the /80 filled the node; every EC2 call of the warm passes and the burst: $d"
}

# case_ec2_selftest6: the reachability check can fail: the node's /128
# route to one pod taken away, the check must name that address (and the
# store/host comparison too); a dual-stack pod's IPv4 address still
# passes; the route put back, it passes again.
case_ec2_selftest6() {
	begin ec2-selftest-route-removed
	local a4 a6 route why
	a6=$(ips_of 6 ec2-00)
	a4=$(ips_of 4 ec2-00)
	route=$(node_exec ip -6 route show "$a6/128")
	[ -n "$route" ] || fail "no node route to ec2-00's $a6"
	node_exec ip -6 route del "$a6/128"
	[ "$(unreachable "$a6")" = "$a6" ] || { node_exec ip -6 route add $route; fail "the reachability check passed with the node's route to $a6 removed"; }
	why=$(consistent 2>&1) && { node_exec ip -6 route add $route; fail "the store/host check passed with the node's route to $a6 removed"; }
	if [ -n "$a4" ]; then
		[ -z "$(unreachable "$a4")" ] || { node_exec ip -6 route add $route; fail "ec2-00's IPv4 $a4 unreachable with only its IPv6 route removed"; }
	fi
	node_exec ip -6 route add $route
	[ -z "$(unreachable "$a6")" ] || fail "ec2-00's $a6 still unreachable with its route ($route) put back"
	check_consistent
	pass "route to ec2-00's $a6 removed: the reachability check failed for it, the store/host check said '$why'$([ -z "$a4" ] ||
		echo ", its IPv4 $a4 still passed"); route put back: both pass"
}

# case_ec2_freed6: the burst's manifests removed, every DEL succeeds and
# frees both addresses of its pod: nothing allocated, no veth or /128 route
# left, the /80 still delegated (trim never gives it back).
case_ec2_freed6() {
	begin "ec2-pods-deleted-addresses-freed-$EC2_FAMILY"
	local t names freed c pfx bad
	names=$(awk '{ print $1 }' <<<"$BURST6_IPS")
	t=$EPOCHREALTIME
	kl_rm $names
	wait_for 90 eval '[ "$(alloc_json | jq ".allocations | length")" = 0 ]' ||
		fail "$(alloc_json | jq '.allocations | length') addresses still allocated 90 s after the manifests went"
	freed=$(e2e_since "$t")
	kl_wait_gone 60 $names || fail "kubelet still lists ec2 pods"
	bad=$(awk '$2 == "DEL" && $4 ~ /^ec2-/ && $NF != "exit=0"' "$CALLS")
	[ -z "$bad" ] || fail "DELs failed: $bad"
	c=$(pool_counts)
	jq -e '[.allocated, (.families // {} | .[] | .allocated)] | all(. == 0)' <<<"$c" >/dev/null || fail "pool still counts allocations: $c"
	bad=$(veth_routes6)
	[ -z "$bad" ] || fail "/128 routes left: $(echo $bad)"
	bad=$(node_exec ip -o link show | awk -F': ' '{ print $2 }' | grep -E "^${VPFX}[0-9a-f]{12}" || true)
	[ -z "$bad" ] || fail "host veths left: $(echo $bad)"
	pfx=$(jq -r '.enis[] | select(.deviceIndex == 0) | (.ipv6Prefixes // []) | join(",")' "$EC2_WORK/ec2.json")
	[ "$pfx" = "$PFX6" ] || fail "the primary ENI's IPv6 prefixes went from $PFX6 to '$pfx'"
	pass "every address of the $BURST pods freed ${freed}s after the manifests went (all DELs exit 0); no veth or /128 route left; $PFX6 still delegated; pool $c"
}

phase_ec2() {
	ec2_setup
	E2E_NETNS=/run/netns/$EC2_NODE
	POOL_RE='^10\.76\.'
	setup_run "$(ec2_conflist)"
	say "ec2 phase: run dir $E2E_RUN, fake $EC2_URL (m5.xlarge), node namespace $EC2_NODE, pool $EC2_POOL, family $EC2_FAMILY"
	if [ "$EC2_POOL" = warm ]; then
		local i
		for ((i = 0; i < 5; i++)); do
			eni warm --config "$CONF" >>"$E2E_RUN/logs/warm.log" 2>&1 || fail "eni-cni warm: $(tail -n 5 "$E2E_RUN/logs/warm.log")"
			[ "$(pool_free)" -ge "$BURST" ] && break
		done
		[ "$(pool_free)" -ge "$BURST" ] || fail "warm gave only $(pool_counts)"
		say "pool warmed: $(pool_counts), $(jq '.enis | length' "$EC2_WORK/ec2.json") ENIs"
	fi
	e2e_start_containerd
	kl_start
	start_gc_loop
	[ "$EC2_POOL" = warm ] && start_warm_loop
	if [ "$EC2_FAMILY" = ipv4 ]; then
		case_ec2_burst
	else
		case_ec2_burst6
		case_ec2_prefix6
		case_ec2_reachable6
		case_ec2_fill_calls6
		[ "$EC2_SELFTEST" = 1 ] && case_ec2_selftest6
		case_ec2_freed6
	fi
	teardown ec2-teardown-leaves-nothing
	unset E2E_NETNS
	ec2_teardown
}

# ------------------------------------------------------------------ bench

bench_conflist() {
	if [ "$1" = eni ]; then
		cat <<EOF
{ "cniVersion": "1.0.0", "name": "kubelet-bench-eni",
  "plugins": [ { "type": "eni-cni", "stateDir": "@RUN@/eni-state", "mtu": 9001, "cooldownSeconds": 5,
                 "pool": { "source": "static", "ranges": ["10.99.0.0/24"] } } ] }
EOF
	else
		cat <<EOF
{ "cniVersion": "1.0.0", "name": "kubelet-bench-ref",
  "plugins": [ { "type": "ptp", "ipMasq": false, "mtu": 9001,
                 "ipam": { "type": "host-local", "dataDir": "@RUN@/host-local",
                           "ranges": [[{ "subnet": "10.98.0.0/24" }]], "routes": [{ "dst": "0.0.0.0/0" }] } } ] }
EOF
	fi
}

# bench_use PLUGIN: make PLUGIN's conflist the only one and wait until
# containerd has loaded it.
bench_use() {
	e2e_write_conflist 10-pods.conflist < <(bench_conflist "$1")
	wait_for 30 bench_loaded "kubelet-bench-$1" || fail "containerd did not load the $1 conflist"
}
bench_loaded() { e2e_crictl info 2>/dev/null | jq -e --arg n "$1" '[.cniconfig.Networks[]?.Config.Name] | index($n)' >/dev/null; }

# bench_round PLUGIN ROUND: N manifests at once; per pod the time until the
# runtime lists its sandbox READY and until kubelet reports it Ready; then
# all manifests removed, time until every sandbox is stopped (DEL done).
bench_round() {
	local plugin=$1 round=$2 names=() i t0 now n id st
	local -A sready=() kready=() stopped=()
	for ((i = 0; i < BENCH_PODS; i++)); do names+=("$(printf 'kb-%s-%d-%02d' "$plugin" "$round" "$i")"); done
	local -A want=()
	for n in "${names[@]}"; do want[$n]=1; done
	t0=$EPOCHREALTIME
	kl_put "${names[@]}"
	for ((i = 0; i < 3000; i++)); do
		now=$EPOCHREALTIME
		while read -r id n _ st _; do
			[ -n "${want[$n]+x}" ] && [ "$st" = SANDBOX_READY ] && [ -z "${sready[$n]+x}" ] && sready[$n]=$(awk -v a="$t0" -v b="$now" 'BEGIN { printf "%.3f", b - a }')
		done < <(kl_sandboxes ready 2>/dev/null)
		while read -r n _; do
			[ -n "${want[$n]+x}" ] && [ -z "${kready[$n]+x}" ] && kready[$n]=$(awk -v a="$t0" -v b="$now" 'BEGIN { printf "%.3f", b - a }')
		done < <(kl_ready_names 2>/dev/null)
		[ ${#kready[@]} -ge "$BENCH_PODS" ] && [ ${#sready[@]} -ge "$BENCH_PODS" ] && break
		sleep 0.05
	done
	[ ${#kready[@]} -ge "$BENCH_PODS" ] || fail "$plugin round $round: only ${#kready[@]} of $BENCH_PODS Ready"
	t0=$EPOCHREALTIME
	kl_rm "${names[@]}"
	for ((i = 0; i < 3000; i++)); do
		now=$EPOCHREALTIME
		local live
		live=$(kl_sandboxes ready 2>/dev/null | awk '{ print $2 }')
		for n in "${names[@]}"; do
			[ -z "${stopped[$n]+x}" ] && ! grep -qx "$n" <<<"$live" && stopped[$n]=$(awk -v a="$t0" -v b="$now" 'BEGIN { printf "%.3f", b - a }')
		done
		[ ${#stopped[@]} -ge "$BENCH_PODS" ] && break
		sleep 0.05
	done
	[ ${#stopped[@]} -ge "$BENCH_PODS" ] || fail "$plugin round $round: sandboxes not stopped"
	kl_wait_gone 60 "${names[@]}" || fail "kubelet still lists the pods of $plugin round $round"
	# Remove the stopped sandboxes now (kubelet's GC would, within a minute),
	# so that their last DELs reach the plugin that made them.
	for id in $(kl_sandboxes notready | awk '{ print $1 }'); do e2e_crictl rmp "$id" >/dev/null 2>&1 || true; done
	jq -cn --arg p "$plugin" --argjson r "$round" \
		--argjson s "$(for n in "${names[@]}"; do echo "${sready[$n]:-null}"; done | jq -s .)" \
		--argjson k "$(for n in "${names[@]}"; do echo "${kready[$n]}"; done | jq -s .)" \
		--argjson d "$(for n in "${names[@]}"; do echo "${stopped[$n]}"; done | jq -s .)" \
		'{plugin: $p, round: $r, sandboxReady: $s, kubeletReady: $k, stopped: $d,
		  lastSandboxReady: ($s | max), lastKubeletReady: ($k | max), lastStopped: ($d | max)}' >>"$E2E_RUN/bench-rounds.jsonl"
	say "bench $plugin round $round: last Ready $(printf '%s\n' "${kready[@]}" | sort -n | tail -n 1)s, last stopped $(printf '%s\n' "${stopped[@]}" | sort -n | tail -n 1)s"
}

main_bench() {
	local tag=ecni-klb-$$ r p cver
	BENCH_NODE=$tag-node
	ip netns add "$BENCH_NODE"
	ip -n "$BENCH_NODE" link set lo up
	E2E_NETNS=/run/netns/$BENCH_NODE
	e2e_init
	kl_init
	install -m 0755 "$ENI_BIN" "$E2E_RUN/eni-cni"
	e2e_install_cni_plugins "$E2E_RUN/eni-cni" "$E2E_TOOLS/bin/ptp" "$E2E_TOOLS/bin/host-local"
	e2e_write_conflist 10-pods.conflist < <(bench_conflist eni)
	e2e_start_containerd
	kl_start
	: >"$E2E_RUN/bench-rounds.jsonl"
	for ((r = 0; r < ROUNDS; r++)); do
		for p in eni ref; do
			# Alternate which plugin goes first, as the rest of the bench does.
			[ $((r % 2)) = 1 ] && { [ "$p" = eni ] && p=ref || p=eni; }
			bench_use "$p"
			bench_round "$p" "$r"
		done
	done
	cver=$("$E2E_CONTAINERD_BIN" --version | awk '{ print $3 }')
	jq -s --arg k "$(kl_version)" --arg c "$cver" --argjson n "$BENCH_PODS" \
		'{kubelet: $k, containerd: $c, pods: $n, rounds: .}' "$E2E_RUN/bench-rounds.jsonl" >"$BENCH_OUT"
	rm -f "$KL_MANIFESTS"/*.json
	kl_stop
	e2e_stop || true
	kl_cleanup
	e2e_cleanup
	ip netns del "$BENCH_NODE"
	BENCH_NODE=
}

# ------------------------------------------------------------------ main

on_exit() {
	local rc=$?
	set +e
	stop_gc_loop
	kl_cleanup
	e2e_cleanup
	[ -z "${EC2_WORK:-}" ] || ec2_teardown
	[ -z "${BENCH_NODE:-}" ] || ip netns del "$BENCH_NODE" 2>/dev/null
	e2e_restore_sysctls || rc=1
	exit "$rc"
}

# check_host: the sysctls kubelet and the plugin flip are back to what they
# were, and kubelet's fixed paths as found.
check_host() {
	begin host-restored
	local k v changed=()
	e2e_restore_sysctls || true
	for k in "${!_E2E_SYSCTLS[@]}"; do
		v=$(cat "/proc/sys/${k//.//}")
		[ "$v" = "${_E2E_SYSCTLS[$k]}" ] || changed+=("$k=$v (was ${_E2E_SYSCTLS[$k]})")
	done
	[ ${#changed[@]} = 0 ] || fail "not restored: ${changed[*]}"
	[ ! -e /var/lib/kubelet ] || [ "$KUBELET_DIR_BEFORE" = yes ] || fail "/var/lib/kubelet left"
	[ ! -e /var/log/containers ] || [ "$CONTAINER_LOGS_BEFORE" = yes ] || fail "/var/log/containers left"
	pass "${#_E2E_SYSCTLS[@]} sysctls as found ($(for k in "${!_E2E_SYSCTLS[@]}"; do printf '%s=%s ' "$k" "${_E2E_SYSCTLS[$k]}"; done)); kubelet's paths as found"
}

[ "$(id -u)" = 0 ] || { echo "kubelet.sh: needs root" >&2; exit 1; }
[ -x "$ENI_BIN" ] || { echo "kubelet.sh: $ENI_BIN is not executable (make build)" >&2; exit 1; }
e2e_host_lock
trap on_exit EXIT
# A command failing under set -e says where, instead of ending the run silently.
set -E
trap 'rc=$?; [ "$BASH_SUBSHELL" != 0 ] || say "error: line $LINENO in ${FUNCNAME[*]:-main}: $BASH_COMMAND (exit $rc)" >&2' ERR
trap 'exit 130' INT TERM
T_ALL=$EPOCHREALTIME
KUBELET_DIR_BEFORE=no CONTAINER_LOGS_BEFORE=no
[ -e /var/lib/kubelet ] && KUBELET_DIR_BEFORE=yes
[ -e /var/log/containers ] && CONTAINER_LOGS_BEFORE=yes
e2e_save_sysctls net.ipv4.ip_forward "${KL_SYSCTLS[@]}"

if [ "$MODE" = bench ]; then
	main_bench
	say "bench done in $(e2e_since "$T_ALL")s: $BENCH_OUT"
	exit 0
fi
for ph in $PHASES; do
	case $ph in
	static) phase_static ;;
	ec2) phase_ec2 ;;
	*) fail "unknown phase $ph" ;;
	esac
done
check_host
say "summary:"
for r in "${RESULTS[@]}"; do say "  $r"; done
for r in "${TIMINGS[@]}"; do say "  timing: $r"; done
say "PASS: ${#RESULTS[@]} checks in $(e2e_since "$T_ALL")s"
