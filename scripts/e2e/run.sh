#!/usr/bin/env bash
# End-to-end suite: a real containerd + runc + crictl driving the installed
# eni-cni binary, on a socket, conf dir and state of its own.
#
#   1. containerd 1.6 (Debian), conflist cniVersion 1.0.0, static pool:
#      runp pods get distinct pool addresses and ping each other; stopp/rmp
#      free them; a sandbox whose DEL never reached the plugin is freed by
#      `eni-cni gc` once past the grace and not before; pods created while gc
#      runs in a loop keep their addresses; gc with a wrong socket changes
#      nothing.
#   2. containerd v2 (built by install-test-deps.sh --with-containerd2),
#      conflist cniVersion 1.1.0: STATUS reaches the runtime (NetworkReady
#      false with our message while the store is unreadable, true otherwise).
#   3. containerd 1.6 on a dry ec2 pool: the fake IMDS + EC2 (ec2fake, with
#      its realistic latency profile, playing the hypervisor for the ENIs it
#      attaches) and an empty store; 20 pods started at once with crictl all
#      become ready with addresses EC2 assigned, no sandbox creation fails:
#      their ADDs start `eni-cni warm` and wait for it.
#
# Pods live in the host's network namespace (as on a node): the run holds
# lib.sh's host lock and restores net.ipv4.ip_forward when it ends.
#
# Usage: scripts/e2e/run.sh /abs/path/to/eni-cni   (root; after install-test-deps.sh)
# E2E_SUITES="1 2 3" selects suites.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"

ENI_BIN=$(realpath "${1:?usage: run.sh /path/to/eni-cni}")
SUITES=${E2E_SUITES:-1 2 3}
POOL=10.99.0.0/24

say() { printf 'e2e-eni: %s\n' "$*"; }
fail() {
	say "FAIL: $*" >&2
	[ -n "${E2E_RUN:-}" ] && [ -f "$E2E_RUN/logs/eni-cni.log" ] && tail -20 "$E2E_RUN/logs/eni-cni.log" >&2
	exit 1
}

# setup_run VERSION: a run dir with eni-cni behind a wrapper that can be told
# to swallow DEL (to make "DEL never came" happen for real), and a conflist.
setup_run() {
	local version=$1
	e2e_init
	trap 'e2e_cleanup; e2e_restore_sysctls' EXIT
	install -m 0755 "$ENI_BIN" "$E2E_RUN/eni-cni.real"
	cat >"$E2E_RUN/eni-cni" <<EOF
#!/bin/sh
# Test wrapper: with $E2E_RUN/drop-del present, DEL succeeds without reaching eni-cni.
if [ "\$CNI_COMMAND" = DEL ] && [ -e "$E2E_RUN/drop-del" ]; then exit 0; fi
exec "$E2E_RUN/eni-cni.real" "\$@"
EOF
	chmod 0755 "$E2E_RUN/eni-cni"
	e2e_install_cni_plugins "$E2E_RUN/eni-cni"
	e2e_write_conflist 10-pods.conflist <<EOF
{
  "cniVersion": "$version",
  "name": "e2e-pods",
  "plugins": [
    { "type": "eni-cni",
      "stateDir": "@RUN@/eni-state",
      "logFile": "@RUN@/logs/eni-cni.log",
      "gcGraceSeconds": 60,
      "mtu": 1500,
      "pool": { "source": "static", "ranges": ["$POOL"] } }
  ]
}
EOF
	CONF="$E2E_CNI_CONF_DIR/10-pods.conflist"
}

eni() { "$E2E_RUN/eni-cni.real" "$@"; }
allocations() { eni list --config "$CONF" --json | jq -r '.allocations[] | "\(.containerID) \(.ip)"'; }
ip_of() { eni list --config "$CONF" --json | jq -r --arg c "$1" '.allocations[] | select(.containerID == $c) | .ip'; }
counts() { eni list --config "$CONF" --json | jq -c .pool; }
# Neither gcGraceSeconds nor gc --grace can go below 60 s: rather than wait,
# the run ages the store (age_store) as the passing of time would.
gc() { eni gc --config "$CONF" --cri-endpoint "$E2E_ENDPOINT" --grace 60s "$@"; }
# age_store S: every allocation looks S seconds older, on the wall-clock and
# the boot-clock stamps (alloc/clock.go), rewritten under the store's lock
# and renamed into place as the plugin saves.
age_store() {
	local dir=$E2E_RUN/eni-state
	(
		umask 077
		flock 9
		jq --argjson s "$1" '.allocations |= map(
			.allocatedAt = ((.allocatedAt | sub("\\.[0-9]+"; "") | fromdateiso8601) - $s | todateiso8601)
			| if .allocatedBootNs then .allocatedBootNs -= $s * 1000000000 else . end)' \
			"$dir/state.json" >"$dir/state.json.tmp-e2e"
		mv "$dir/state.json.tmp-e2e" "$dir/state.json"
	) 9<"$dir/state.lock"
}

suite_containerd16() {
	E2E_CONTAINERD=1 setup_run 1.0.0
	e2e_start_containerd
	say "containerd 1.6 up in ${E2E_TIME_UP}s"

	local ids=() ips=() t
	for i in 0 1 2; do
		t=$EPOCHREALTIME
		ids+=("$(e2e_runp "web-$i" e2e "uid-web-$i")")
		ips+=("$(e2e_pod_ip "${ids[i]}")")
		say "runp web-$i $(e2e_since "$t")s ip ${ips[i]}"
		[ "$(ip_of "${ids[i]}")" = "${ips[i]}" ] || fail "store does not record ${ips[i]} for ${ids[i]}"
		case ${ips[i]} in 10.99.0.*) ;; *) fail "ip ${ips[i]} not from the pool" ;; esac
	done
	[ "$(printf '%s\n' "${ips[@]}" | sort -u | wc -l)" = 3 ] || fail "duplicate addresses ${ips[*]}"
	eni list --config "$CONF" --json | jq -e '.allocations[] | select(.podName == "web-0" and .podNamespace == "e2e" and .podUID == "uid-web-0")' >/dev/null ||
		fail "pod metadata not recorded"
	for i in 0 1 2; do
		j=$(((i + 1) % 3))
		e2e_netns_exec "${ids[i]}" ping -c1 -W2 -q "${ips[j]}" >/dev/null || fail "ping ${ips[i]} -> ${ips[j]}"
	done
	say "3 pods ping each other"

	e2e_stopp "${ids[0]}"
	e2e_rmp "${ids[0]}"
	[ -z "$(ip_of "${ids[0]}")" ] || fail "stopp/rmp did not free ${ips[0]}"
	counts | jq -e '.cooling == 1 and .allocated == 2' >/dev/null || fail "counts after rmp: $(counts)"
	grep -q "to ${ips[0]} " <<<"$(ip -4 rule)" && fail "rule for ${ips[0]} left after rmp"
	say "stopp+rmp freed ${ips[0]} into cooldown"

	# A sandbox whose DEL never reaches the plugin.
	touch "$E2E_RUN/drop-del"
	e2e_stopp "${ids[1]}"
	e2e_rmp "${ids[1]}"
	rm "$E2E_RUN/drop-del"
	[ "$(ip_of "${ids[1]}")" = "${ips[1]}" ] || fail "the dropped DEL freed ${ips[1]} anyway"
	local before after
	before=$(sha256sum <"$E2E_RUN/eni-state/state.json")
	if gc --cri-endpoint unix:///nonexistent/cri.sock >"$E2E_RUN/logs/gc-wrong.out" 2>&1; then
		fail "gc with a wrong socket exited 0"
	fi
	after=$(sha256sum <"$E2E_RUN/eni-state/state.json")
	[ "$before" = "$after" ] || fail "gc with a wrong socket changed the store"
	say "gc with a wrong socket: $(tail -1 "$E2E_RUN/logs/gc-wrong.out")"
	gc --grace 1h >"$E2E_RUN/logs/gc-young.out" || fail "gc (young) failed: $(cat "$E2E_RUN/logs/gc-young.out")"
	[ "$(ip_of "${ids[1]}")" = "${ips[1]}" ] || fail "gc freed an allocation younger than the grace"
	grep -q "kept 1 young" "$E2E_RUN/logs/gc-young.out" || fail "gc output: $(cat "$E2E_RUN/logs/gc-young.out")"
	say "gc before the grace keeps it: $(tail -1 "$E2E_RUN/logs/gc-young.out")"
	age_store 120
	gc >"$E2E_RUN/logs/gc-old.out" || fail "gc failed: $(cat "$E2E_RUN/logs/gc-old.out")"
	[ -z "$(ip_of "${ids[1]}")" ] || fail "gc did not free ${ips[1]} past the grace"
	grep -q "freed ${ips[1]} " "$E2E_RUN/logs/gc-old.out" || fail "gc output: $(cat "$E2E_RUN/logs/gc-old.out")"
	[ "$(ip_of "${ids[2]}")" = "${ips[2]}" ] || fail "gc freed the live pod ${ips[2]}"
	grep -q "to ${ips[1]} " <<<"$(ip -4 rule)" && fail "gc left the rule of ${ips[1]}"
	say "gc past the grace: $(grep -c freed "$E2E_RUN/logs/gc-old.out") line(s), $(tail -1 "$E2E_RUN/logs/gc-old.out")"

	# Pods born while gc runs in a loop keep their addresses.
	local stop="$E2E_RUN/stop-gc-loop" loops=0
	(while [ ! -e "$stop" ]; do gc >>"$E2E_RUN/logs/gc-loop.out" 2>&1 || true; done) &
	local gcpid=$!
	local born=()
	for i in 0 1 2 3 4; do born+=("$(e2e_runp "born-$i" e2e "uid-born-$i")"); done
	sleep 1
	touch "$stop"
	wait "$gcpid"
	loops=$(grep -c '^gc: freed 0\|^gc: would' "$E2E_RUN/logs/gc-loop.out" || true)
	for id in "${born[@]}"; do
		local pip
		pip=$(e2e_pod_ip "$id")
		[ "$(ip_of "$id")" = "$pip" ] || fail "pod $id lost its address $pip to the gc loop"
		e2e_netns_exec "$id" ping -c1 -W2 -q "${ips[2]}" >/dev/null || fail "born pod $pip cannot reach ${ips[2]}"
	done
	grep -q '^gc: freed [1-9]' "$E2E_RUN/logs/gc-loop.out" && fail "the gc loop freed something: $(grep '^gc: freed [1-9]' "$E2E_RUN/logs/gc-loop.out")"
	say "5 pods created during $loops gc passes all kept their addresses"

	t=$EPOCHREALTIME
	e2e_stop
	counts | jq -e '.allocated == 0' >/dev/null || fail "allocations left after all pods removed: $(counts)"
	e2e_check_clean || fail "leftovers after the run"
	left=$(ip -o link show | grep -c ' eni[0-9a-f]\{12\}' || true)
	[ "$left" = 0 ] || fail "$left host veths left"
	grep -q "to 10\.99\.0\." <<<"$(ip -4 rule)" && fail "rules left: $(ip -4 rule | grep 'to 10\.99\.0\.')"
	e2e_cleanup
	trap e2e_restore_sysctls EXIT
	say "suite 1 PASS (stop and check ${t:+$(e2e_since "$t")s})"
}

suite_containerd2_status() {
	if [ ! -x "$E2E_TOOLS/containerd2/bin/containerd" ]; then
		fail "containerd v2 not built: run scripts/install-test-deps.sh --with-containerd2"
	fi
	E2E_CONTAINERD=2 setup_run 1.1.0
	E2E_CONTAINERD=2 e2e_start_containerd
	say "containerd v2 up in ${E2E_TIME_UP}s"
	ready() { e2e_crictl info -o json | jq -r '.status.conditions[] | select(.type == "NetworkReady") | "\(.status) \(.message)"'; }
	[ "$(ready | cut -d' ' -f1)" = true ] || fail "NetworkReady not true with a good store: $(ready)"
	local id
	id=$(e2e_runp "v2-0" e2e "uid-v2-0")
	[ -n "$(ip_of "$id")" ] || fail "containerd v2 pod got no address"
	cp "$E2E_RUN/eni-state/state.json" "$E2E_RUN/state.good"
	echo '{not json' >"$E2E_RUN/eni-state/state.json"
	local r
	r=$(ready)
	case $r in "false "*state.json*) ;; *) fail "NetworkReady with an unreadable store: $r" ;; esac
	say "unreadable store -> NetworkReady $r"
	cp "$E2E_RUN/state.good" "$E2E_RUN/eni-state/state.json"
	[ "$(ready | cut -d' ' -f1)" = true ] || fail "NetworkReady after repair: $(ready)"
	say "repaired store -> NetworkReady true"
	E2E_CONTAINERD=2 e2e_stop
	e2e_check_clean || fail "leftovers after the v2 run"
	E2E_CONTAINERD=2 e2e_cleanup
	trap e2e_restore_sysctls EXIT
	say "suite 2 PASS"
}

# suite_ec2_dry: 20 pods at once on a dry ec2 pool through containerd 1.6.
# The fake runs in the host namespace (containerd's) on loopback, its VPC
# (10.97.0.0/16) exists nowhere else; the ENI links it makes (e2eeni<dev>)
# have their peers in a namespace of the run, and go with it.
suite_ec2_dry() {
	local n=20 repo vpcns fakepid="" t ids=() id ip i url
	repo=$(cd "$here/../.." && pwd)
	e2e_init
	vpcns=eni-e2e-vpc-$$
	trap 'ec2_dry_cleanup' EXIT
	ec2_dry_cleanup() {
		[ -n "$fakepid" ] && kill "$fakepid" 2>/dev/null && wait "$fakepid" 2>/dev/null
		ip netns del "$vpcns" 2>/dev/null
		e2e_cleanup
	}
	(cd "$repo" && CGO_ENABLED=0 go build -o "$E2E_RUN/ec2fake" ./ec2/ec2fake/cmd/ec2fake) || fail "build ec2fake"
	ip netns add "$vpcns" || fail "ip netns add $vpcns"
	"$E2E_RUN/ec2fake" --instance-type m5.xlarge --vpc-cidr 10.97.0.0/16 --subnet-cidr 10.97.0.0/20 \
		--latency realistic --links e2eeni --links-peer-netns "/run/netns/$vpcns" \
		--describe "$E2E_RUN/ec2.json" >"$E2E_RUN/ec2fake.url" 2>"$E2E_RUN/logs/ec2fake.log" &
	fakepid=$!
	for ((i = 0; i < 100; i++)); do [ -s "$E2E_RUN/ec2.json" ] && break; sleep 0.1; done
	url=$(jq -r .ec2URL "$E2E_RUN/ec2.json") || fail "ec2fake did not start: $(cat "$E2E_RUN/logs/ec2fake.log")"
	install -m 0755 "$ENI_BIN" "$E2E_RUN/eni-cni.real"
	e2e_install_cni_plugins "$E2E_RUN/eni-cni.real"
	mv "$E2E_CNI_BIN_DIR/eni-cni.real" "$E2E_CNI_BIN_DIR/eni-cni"
	e2e_write_conflist 10-pods.conflist <<JSON
{
  "cniVersion": "1.0.0",
  "name": "e2e-ec2",
  "plugins": [
    { "type": "eni-cni",
      "stateDir": "@RUN@/eni-state",
      "logFile": "@RUN@/logs/eni-cni.log",
      "mtu": 1500,
      "imdsEndpoint": "$url", "ec2Endpoint": "$url",
      "pool": { "source": "ec2" } }
  ]
}
JSON
	CONF="$E2E_CNI_CONF_DIR/10-pods.conflist"
	# The ADDs pass containerd's environment to the warm they start: dummy
	# credentials for the fake.
	export AWS_ACCESS_KEY_ID=AKIDE2E AWS_SECRET_ACCESS_KEY=e2e
	# Unpacks the full build into the state directory, as a node's first
	# timer run does.
	eni warm --config "$CONF" --help >/dev/null 2>&1 || true
	E2E_CONTAINERD=1 e2e_start_containerd
	say "containerd 1.6 up in ${E2E_TIME_UP}s; pool: $(counts)"
	t=$EPOCHREALTIME
	for ((i = 0; i < n; i++)); do
		e2e_runp "dry-$i" e2e "uid-dry-$i" >"$E2E_RUN/dry-$i.id" 2>"$E2E_RUN/logs/dry-$i.err" &
	done
	local failed=0 took
	for ((i = 0; i < n; i++)); do wait -n || failed=$((failed + 1)); done
	took=$(e2e_since "$t")
	[ "$failed" = 0 ] || fail "$failed of $n sandboxes failed: $(cat "$E2E_RUN"/logs/dry-*.err | head -5)"
	if grep -q 'failed to setup network\|RunPodSandbox.*failed' "$E2E_CONTAINERD_LOG"; then
		fail "containerd logged a failed sandbox creation: $(grep -m3 'failed to setup network\|RunPodSandbox.*failed' "$E2E_CONTAINERD_LOG")"
	fi
	local assigned
	assigned=$(jq -r '.enis[].secondaryIps[]' "$E2E_RUN/ec2.json")
	for ((i = 0; i < n; i++)); do
		id=$(cat "$E2E_RUN/dry-$i.id")
		ids+=("$id")
		[ "$(e2e_crictl inspectp -o json "$id" | jq -r .status.state)" = SANDBOX_READY ] || fail "pod dry-$i not ready"
		ip=$(e2e_pod_ip "$id")
		grep -qx "$ip" <<<"$assigned" || fail "pod dry-$i got $ip, which EC2 did not assign"
		[ "$(ip_of "$id")" = "$ip" ] || fail "store does not record $ip for dry-$i"
	done
	[ "$(for id in "${ids[@]}"; do e2e_pod_ip "$id"; done | sort -u | wc -l)" = "$n" ] || fail "duplicate addresses"
	local warms calls
	warms=$(grep -c 'warm="process ' "$E2E_RUN/logs/eni-cni.log" || true)
	calls=$(jq -c '.calls' "$E2E_RUN/ec2.json")
	say "$n pods at once on a dry ec2 pool: all ready in ${took}s, $warms ADD(s) started warm, EC2 calls $calls, pool $(counts)"
	# A pod on the second ENI reaches one on the primary (the to-rules at
	# 512 come before the from-rule of its ENI's table).
	local first="" second=""
	for id in "${ids[@]}"; do
		ip=$(e2e_pod_ip "$id")
		if ip -4 rule | grep -q "from $ip lookup"; then
			[ -n "$second" ] || second=$id
		else
			[ -n "$first" ] || first=$ip
		fi
	done
	[ -n "$second" ] && [ -n "$first" ] || fail "want pods on the primary ENI and on a second one"
	e2e_netns_exec "$second" ping -c1 -W2 -q "$first" >/dev/null || fail "ping $first from the pod on the second ENI"
	say "a pod on the second ENI reaches $first on the primary"
	e2e_stop
	counts | jq -e '.allocated == 0' >/dev/null || fail "allocations left: $(counts)"
	e2e_check_clean || fail "leftovers after the run"
	if ip -4 rule | grep -q '10\.97\.'; then fail "rules left: $(ip -4 rule | grep '10\.97\.')"; fi
	kill "$fakepid"
	wait "$fakepid" 2>/dev/null || true
	fakepid=""
	if ip -o link show | grep -q 'e2eeni'; then fail "ENI links left: $(ip -o link show | grep e2eeni)"; fi
	ip netns del "$vpcns"
	e2e_cleanup
	trap - EXIT
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
	say "suite 3 PASS"
}

t0=$EPOCHREALTIME
# Pods are wired in the host's network namespace: one such run at a time,
# and the host's ip_forward (which eni-cni turns on) put back at the end.
e2e_host_lock
e2e_save_sysctls net.ipv4.ip_forward
trap e2e_restore_sysctls EXIT
for s in $SUITES; do
	case $s in
	1) suite_containerd16 ;;
	2) suite_containerd2_status ;;
	3) suite_ec2_dry ;;
	*) fail "unknown suite $s" ;;
	esac
done
say "PASS in $(e2e_since "$t0")s"
