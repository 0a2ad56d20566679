#!/usr/bin/env bash
# The CPU and peak RSS of one `eni-cni warm` pass on a settled node: the
# fake IMDS + EC2 (ec2/ec2fake/cmd/ec2fake, a t3.medium) in a throwaway
# network namespace with the primary ENI's link, an ec2 pool warmed to its
# warmIPTarget of 3 by three passes, then RUNS more passes, each a whole
# process as the timer runs it (the lean binary, which execs its cached
# ec2 build), timed as a whole (perf's task-clock, else user+sys; the pass waits
# for every child it starts; the times include the nsenter and env that
# start it; the floor, the same wrappers running /bin/true, is timed in
# turn with the passes and printed too). Prints quantiles. BIN_B, if given, is
# timed the same way in a world of its own, pass for pass in turn with BIN
# (A B A B ...), so that both see the same machine.
# PODS=N (default 0) settles a c5.4xlarge with N pods' allocations written
# into the store (addresses of the primary ENI, no veths: what a pass reads
# and decodes grows with them) and warmIPTarget addresses free beside them.
# ENV_B="K=V ..." adds variables to BIN_B's environment (BIN_B may be BIN:
# the same binary with and without them, e.g. ENV_B=GOMAXPROCS=1).
# A pass is what the warm timer runs: the ec2 build a binary publishes in
# its state directory (stateDir/.bin/timer-warm), run directly; AS=binary
# times `BIN warm` instead (the lean binary, which execs that build), as
# does a binary that publishes none.
# Usage: [PODS=N] [ENV_B=...] scripts/bench/warm-settled.sh BIN [RUNS] [BIN_B]   (root)
set -euo pipefail

RUNS=${2:-40}
PODS=${PODS:-0}
TYPE=t3.medium
[ "$PODS" = 0 ] || TYPE=c5.4xlarge
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "warm-settled: needs root (network namespaces)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/warm-settled.XXXX)
PIDS=()
NSS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	for n in "${NSS[@]}"; do ip netns del "$n" 2>/dev/null; done
	rm -rf "$WORK"
}
trap cleanup EXIT
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/ec2fake" ./ec2/ec2fake/cmd/ec2fake)

# conf DIR URL TARGET: the network's configuration, warmIPTarget TARGET.
conf() {
	cat >"$1/conf.conflist" <<-JSON
		{ "cniVersion": "1.0.0", "name": "pods", "plugins": [ { "type": "eni-cni", "stateDir": "$1/state",
		  "logFile": "$1/eni-cni.log", "imdsEndpoint": "$2", "ec2Endpoint": "$2",
		  "pool": { "source": "ec2", "warmIPTarget": $3 } } ] }
	JSON
}

# world NAME BIN: a settled node for BIN in namespace NAME; leaves the
# command of one pass in $WORK/NAME/pass.
world() {
	local name=$1 bin dir=$WORK/$1 ns="warm-settled-$$-$1" vpc="warm-settled-$$-$1v"
	bin=$(realpath "$2")
	mkdir -p "$dir"
	ip netns add "$ns"
	NSS+=("$ns")
	ip netns add "$vpc"
	NSS+=("$vpc")
	ip -n "$ns" link set lo up
	nsenter --net="/var/run/netns/$ns" "$WORK/ec2fake" --instance-type "$TYPE" --vpc-cidr 10.98.0.0/16 \
		--subnet-cidr 10.98.0.0/20 --describe "$dir/ec2.json" --env-file "$dir/ec2.env" >"$dir/fake.out" 2>"$dir/fake.err" &
	PIDS+=($!)
	for _ in $(seq 100); do
		[ -s "$dir/fake.out" ] && [ -s "$dir/ec2.env" ] && break
		sleep 0.05
	done
	local url mac ip
	url=$(head -1 "$dir/fake.out")
	read -r mac ip < <(jq -r '.enis[0] | "\(.mac) \(.primaryIp)"' "$dir/ec2.json")
	ip -n "$ns" link add ens5 address "$mac" type veth peer name ens5p netns "$vpc"
	ip -n "$vpc" link set ens5p up
	ip -n "$ns" link set ens5 up
	ip -n "$ns" addr add "$ip/20" dev ens5
	ip -n "$ns" route add default via 10.98.0.1 dev ens5
	conf "$dir" "$url" $((PODS + 3))
	local extra=""
	[ "$name" != b ] || extra=${ENV_B:-}
	echo "nsenter --net=/var/run/netns/$ns env $(sed -n 's/^export //p' "$dir/ec2.env" | tr '\n' ' ') $extra $bin warm --config $dir/conf.conflist" >"$dir/pass"
	mkdir -p "$WORK/floor"
	echo "nsenter --net=/var/run/netns/$ns env $(sed -n 's/^export //p' "$dir/ec2.env" | tr '\n' ' ') /bin/true" >"$WORK/floor/pass"
	for _ in 1 2 3; do $(cat "$dir/pass") >/dev/null; done
	if [ "$PODS" != 0 ]; then
		jq --argjson n "$PODS" '.allocations = [.ec2.addrs[:$n][] | {network: "pods",
			containerID: ("bench-" + (.ip | gsub("[.]"; "-"))), ifname: "eth0", ip, podNamespace: "default",
			podName: ("pod-" + (.ip | gsub("[.]"; "-"))), podUID: "uid", netns: "/var/run/netns/none",
			hostVeth: ("enib" + (.ip | split(".") | .[3])), eni, allocatedAt: .addedAt}]' \
			"$dir/state/state.json" >"$dir/state.new"
		mv "$dir/state.new" "$dir/state/state.json"
		chmod 600 "$dir/state/state.json"
		conf "$dir" "$url" 3
		for _ in 1 2; do $(cat "$dir/pass") >/dev/null; done
	fi
	sleep 2.5 # the full build's digest is recorded once its file is older than 2 s
	$(cat "$dir/pass") >/dev/null
	# What the warm timer runs: the ec2 build the binary published in the
	# state directory (unless AS=binary, or a binary that publishes none).
	local timer="$dir/state/.bin/timer-warm"
	if [ "${AS:-timer}" = timer ] && [ -x "$timer" ]; then
		sed -i "s| $bin warm | $timer warm |" "$dir/pass"
		if $(cat "$dir/pass") 2>&1 >/dev/null | grep -q "handing over"; then
			echo "warm-settled: $timer hands over to the binary on a settled node" >&2
			exit 1
		fi
	fi
}

# timed NAME: one pass; appends "cpu_ms rss_kib" to $WORK/NAME/times. CPU
# is perf's task-clock of the whole command when perf is there (0.01 ms),
# else the subshell's children's (bash's times, in ms: GNU time prints
# centiseconds); peak RSS is GNU time's.
timed() {
	local t
	if command -v perf >/dev/null; then
		t=$(perf stat -x, -e task-clock /usr/bin/time -o "$WORK/$1/rss" -f %M $(cat "$WORK/$1/pass") 2>&1 >/dev/null | awk -F, '/task-clock/ { print $1 }')
		echo "$t $(cat "$WORK/$1/rss")" >>"$WORK/$1/times"
		return
	fi
	t=$( (/usr/bin/time -o "$WORK/$1/rss" -f %M $(cat "$WORK/$1/pass") >/dev/null && times) | tail -1)
	awk -v rss="$(cat "$WORK/$1/rss")" '{ split($1, u, /[ms]/); split($2, s, /[ms]/)
		printf "%.1f %d\n", (u[1] * 60 + u[2] + s[1] * 60 + s[2]) * 1000, rss }' <<<"$t" >>"$WORK/$1/times"
}

# report WHO NAME: the quantiles of the passes' CPU (a loaded machine adds
# to every pass; the low quantiles are the least disturbed) and the median
# peak RSS.
report() {
	sort -n "$WORK/$2/times" | awk -v who="$1" '{ cpu[NR] = $1; rss[NR] = $2 / 1024 }
		END { m = int((NR + 1) / 2); q = int(NR / 10) + 1; r = int(NR / 4) + 1
			printf "%s: %d passes, CPU (whole command) min %.1f, p10 %.1f, p25 %.1f, median %.1f, max %.1f ms; peak RSS %.1f MiB\n",
				who, NR, cpu[1], cpu[q], cpu[r], cpu[m], cpu[NR], rss[m] }'
}

world a "$1"
[ -z "${3:-}" ] || world b "$3"
for _ in $(seq "$RUNS"); do
	timed a
	[ -z "${3:-}" ] || timed b
	timed floor
done
report "$1" a
[ -z "${3:-}" ] || report "$3" b
report "floor (time, nsenter and env running /bin/true)" floor
