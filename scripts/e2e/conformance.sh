#!/usr/bin/env bash
# Kubernetes' own e2e network tests against a running cluster: the
# `[sig-network] ... [Conformance]` specs and the "Networking Granular
# Checks" of upstream's v1.34.2 test/e2e (the network-only test binary
# scripts/install-test-deps.sh --with-conformance builds), offline, with the
# images that run built from Debian packages and named by a
# --kube-test-repo-list. Writes a summary: specs selected, ran, passed,
# failed, skipped, and every skip with its reason; exits non-zero unless
# something ran and nothing failed.
#
# Skips are only what this machine's clusters cannot have, each a named rule
# given to --ginkgo.skip and listed in the summary:
#   load-balancer   the spec needs a cloud load balancer (none here)
#   nodes<N         the spec needs N schedulable nodes and the cluster has fewer
#   no-sctp         [Feature:SCTPConnectivity] on a kernel without SCTP
#                   (only when /proc/net/sctp is absent: no module, none loadable)
# A spec the framework skips by itself at run time is listed with the
# framework's message and fails the run: every skip needs a named rule.
#
# Run it where KUBECONFIG reaches the API server: inside the cluster's
# namespaces, e.g. as scripts/e2e/kubeadm.sh's (or cluster.sh's)
# E2E_CLUSTER_HOOK (`make test-conformance`). The images must be in every
# node's containerd before the specs run: the script imports
# $CONF_DIR/images.tar into each containerd socket named by
# E2E_NODE_SOCKETS (default: $E2E_SOCK, the one node of kubeadm.sh), with
# `ctr` ($E2E_CTR or the ctr in PATH) into the snapshotter that node's CRI
# uses. A multi-node cluster script must export E2E_NODE_SOCKETS with every
# node's socket path (sockets are files: reachable from any mount namespace
# that sees the path). With E2E_NODE_SOCKETS=none nothing is imported (the
# cluster script loaded them itself).
#
# A single node that carries kubeadm's control-plane NoSchedule taint and
# no other schedulable node: the taint is removed (else nothing can run).
#
# The specs run in parallel, as upstream's CI runs them: the ginkgo CLI
# (built at the version the e2e binary pins) runs CONF_PROCS processes over
# the test binary; specs marked Serial run after the rest, on one process
# (the ginkgo CLI does that itself). CONF_PROCS=1 runs the binary alone.
#
# Usage: KUBECONFIG=... scripts/e2e/conformance.sh
# Env: CONF_DIR [$ENI_CNI_TOOLS/conformance-v1.34.2], CONF_OUT (report dir)
#   [$E2E_RUN/conformance or a new /tmp dir], CONF_FOCUS (a ginkgo focus
#   regexp instead of the default), CONF_TIMEOUT [90m], CONF_PROCS [6],
#   KUBECTL [kubectl in PATH].
set -euo pipefail

KUBE_VER=v1.34.2
CONF_DIR=${CONF_DIR:-${ENI_CNI_TOOLS:-/opt/eni-cni-test}/conformance-$KUBE_VER}
TEST_BIN=$CONF_DIR/e2e-network.test
GINKGO=$CONF_DIR/bin/ginkgo
PROCS=${CONF_PROCS:-6}
DEFAULT_FOCUS='\[sig-network\].*\[Conformance\]|\[sig-network\] Networking Granular Checks'
FOCUS=${CONF_FOCUS:-$DEFAULT_FOCUS}
TIMEOUT=${CONF_TIMEOUT:-90m}
KUBECTL=${KUBECTL:-kubectl}

# The skip rules: "name|min nodes (0: always applies)|regexp". The node
# rules name upstream's specs that ask for more nodes: the Granular Checks
# on Services (framework/network's NetworkingTestConfig.setup:
# SkipUnlessNodeCountIsAtLeast(2)), and, outside the default focus, the
# Services specs that take GetBoundedReadySchedulableNodes(2 or 3) then Skipf.
SKIP_RULES=(
	'load-balancer|0|LoadBalancer'
	'nodes<2|2|Networking Granular Checks: Services|should preserve source pod IP for traffic thru service cluster IP|terminating and unready endpoints if PublishNotReadyAddresses|should respect internalTrafficPolicy=Local|fail health check node port if there are only terminating endpoints|fallback to (local )?terminating endpoints'
	'nodes<3|3|should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes'
)
SCTP_RULE='no-sctp|0|\[Feature:SCTPConnectivity\]'
SKIP_REASON_load_balancer="needs a cloud load balancer"
SKIP_REASON_no_sctp="this kernel has no SCTP (/proc/net/sctp absent)"

say() { printf 'conformance: %s\n' "$*"; }
die() {
	say "FAIL: $*" >&2
	exit 1
}
k() { "$KUBECTL" "$@"; }

# rule_field RULE N: field N (1 name, 2 min nodes, 3 regexp) of a skip rule;
# the regexp is the rest of the line (it may hold "|").
rule_field() {
	case $2 in
	1) echo "${1%%|*}" ;;
	2) local r=${1#*|}; echo "${r%%|*}" ;;
	3) local r=${1#*|}; echo "${r#*|}" ;;
	esac
}

reason_of() {
	local name=$1 v
	case $name in
	nodes\<*) echo "needs ${name#nodes<} schedulable nodes, the cluster has $NODES" ;;
	*) v=SKIP_REASON_${name//-/_}; echo "${!v}" ;;
	esac
}

# import_images: images.tar into every node's containerd, into the
# snapshotter its CRI unpacks for; then CRI must see each image.
import_images() {
	local sockets=${E2E_NODE_SOCKETS:-${E2E_SOCK:-}} ctr=${E2E_CTR:-ctr} crictl=${E2E_CRICTL:-crictl} s snap img
	if [ "$sockets" = none ]; then
		say "E2E_NODE_SOCKETS=none: images assumed loaded on every node"
		return 0
	fi
	[ -n "$sockets" ] || die "no containerd socket to import the images into: set E2E_NODE_SOCKETS (or none)"
	for s in $sockets; do
		[ -S "$s" ] || die "containerd socket $s: not a socket"
		snap=$("$crictl" --runtime-endpoint "unix://$s" info 2>/dev/null | jq -r '.config.containerd.snapshotter // empty')
		"$ctr" --address "$s" --namespace k8s.io images import ${snap:+--snapshotter "$snap"} "$CONF_DIR/images.tar" >"$OUT/import.log" 2>&1 ||
			{ cat "$OUT/import.log" >&2; die "ctr images import into $s failed"; }
		for img in $(tar -xOf "$CONF_DIR/images.tar" ./manifest.json | jq -r '.[].RepoTags[]'); do
			"$crictl" --runtime-endpoint "unix://$s" inspecti "$img" >/dev/null 2>&1 || die "CRI on $s does not see $img after the import"
		done
		say "images imported into $s (snapshotter ${snap:-default})"
	done
}

# schedulable_nodes: the names of Ready nodes without a NoSchedule/NoExecute taint.
schedulable_nodes() {
	k get nodes -o json | jq -r '.items[] | select(any(.status.conditions[]; .type == "Ready" and .status == "True"))
		| select(.spec.unschedulable != true)
		| select(all((.spec.taints // [])[]; .effect != "NoSchedule" and .effect != "NoExecute")) | .metadata.name'
}

untaint_single_node() {
	local all
	all=$(k get nodes -o jsonpath='{.items[*].metadata.name}')
	[ -z "$(schedulable_nodes)" ] && [ "$(wc -w <<<"$all")" = 1 ] || return 0
	say "one node ($all), tainted: removing node-role.kubernetes.io/control-plane:NoSchedule"
	k taint nodes "$all" node-role.kubernetes.io/control-plane:NoSchedule- >/dev/null
}

# spec_names JSON: one line per It spec of a ginkgo JSON report: state,
# tab, full text (what --ginkgo.focus and --ginkgo.skip match).
spec_names() {
	jq -r '.[0].SpecReports[] | select(.LeafNodeType == "It")
		| [.State, ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" "))] | @tsv' "$1"
}

# ------------------------------------------------------------------ main
[ -n "${KUBECONFIG:-}" ] || die "KUBECONFIG is not set"
for f in "$TEST_BIN" "$CONF_DIR/images.tar" "$CONF_DIR/repo-list.yaml"; do
	[ -e "$f" ] || die "$f missing: run scripts/install-test-deps.sh --with-conformance"
done
OUT=${CONF_OUT:-${E2E_RUN:+$E2E_RUN/conformance}}
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/eni-conformance.XXXX)
mkdir -p "$OUT"
T0=$EPOCHREALTIME
since() { awk -v s="$1" -v e="$EPOCHREALTIME" 'BEGIN { printf "%.0f", e - s }'; }

k get --raw /readyz >/dev/null || die "the API server at $KUBECONFIG does not answer /readyz"
import_images
untaint_single_node
NODES=$(schedulable_nodes | wc -l)
[ "$NODES" -gt 0 ] || die "no schedulable Ready node"
say "$NODES schedulable node(s): $(schedulable_nodes | tr '\n' ' ')"

# The skip regexp: every rule that applies here.
skip_re= applied=()
rules=("${SKIP_RULES[@]}")
[ -d /proc/net/sctp ] || rules+=("$SCTP_RULE")
for r in "${rules[@]}"; do
	min=$(rule_field "$r" 2)
	[ "$min" = 0 ] || [ "$NODES" -lt "$min" ] || continue
	applied+=("$r")
	skip_re+=${skip_re:+|}"($(rule_field "$r" 3))"
done

# --num-nodes: the framework counts the nodes on ginkgo's first process
# only; the others would skip every spec that needs two ("not -1").
framework=(--kubeconfig="$KUBECONFIG" --provider=skeleton --kube-test-repo-list="$CONF_DIR/repo-list.yaml" --report-dir="$OUT"
	--num-nodes="$NODES")
common=("${framework[@]}" --ginkgo.no-color --ginkgo.focus="$FOCUS")
# What the focus selects, and what of it the rules leave to run (dry runs: no cluster touched).
"$TEST_BIN" "${common[@]}" --ginkgo.dry-run --ginkgo.json-report="$OUT/selected.json" >"$OUT/dry-selected.log" 2>&1 ||
	{ tail -n 20 "$OUT/dry-selected.log" >&2; die "dry run (selection) failed"; }
spec_names "$OUT/selected.json" | awk -F'\t' '$1 == "passed" { print $2 }' | sort >"$OUT/selected.txt"
: >"$OUT/skipped-by-rule.txt"
if [ -n "$skip_re" ]; then
	while IFS= read -r name; do
		for r in "${applied[@]}"; do
			if grep -qE -- "$(rule_field "$r" 3)" <<<"$name"; then
				printf '%s\t%s\n' "$(rule_field "$r" 1): $(reason_of "$(rule_field "$r" 1)")" "$name" >>"$OUT/skipped-by-rule.txt"
				break
			fi
		done
	done <"$OUT/selected.txt"
fi
say "selected $(wc -l <"$OUT/selected.txt") specs (focus: $FOCUS); skipped by rule: $(wc -l <"$OUT/skipped-by-rule.txt")"

rc=0
T1=$EPOCHREALTIME
if [ "$PROCS" -gt 1 ]; then
	[ -x "$GINKGO" ] || die "$GINKGO missing: run scripts/install-test-deps.sh --with-conformance (or CONF_PROCS=1)"
	say "running on $PROCS ginkgo processes (log $OUT/e2e.log)"
	"$GINKGO" --procs="$PROCS" --no-color -v --focus="$FOCUS" ${skip_re:+--skip="$skip_re"} --timeout="$TIMEOUT" \
		--output-dir="$OUT" --json-report=report.json --junit-report=junit.xml \
		"$TEST_BIN" -- "${framework[@]}" >"$OUT/e2e.log" 2>&1 || rc=$?
else
	say "running (log $OUT/e2e.log)"
	"$TEST_BIN" "${common[@]}" ${skip_re:+--ginkgo.skip="$skip_re"} --ginkgo.timeout="$TIMEOUT" \
		--ginkgo.json-report="$OUT/report.json" --ginkgo.junit-report="$OUT/junit.xml" \
		--ginkgo.v >"$OUT/e2e.log" 2>&1 || rc=$?
fi
SPECS_S=$(since "$T1")
[ -s "$OUT/report.json" ] || { tail -n 40 "$OUT/e2e.log" >&2; die "no report (test binary exit $rc)"; }

# Per spec that the rules left: passed, failed (or any other end), or skipped by the framework.
jq -r '.[0].SpecReports[] | select(.LeafNodeType == "It")
	| [.State, ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" ")), (.Failure.Message // "" | gsub("\n"; " ") | .[0:300])] | @tsv' \
	"$OUT/report.json" | sort -t$'\t' -k2 >"$OUT/results.tsv"
ran_list=$(awk -F'\t' 'NR == FNR { sel[$0] = 1; next } ($2 in sel) { print }' "$OUT/selected.txt" "$OUT/results.tsv" |
	grep -vF -f <(cut -f2 "$OUT/skipped-by-rule.txt" | sed '/^$/d') || true)
passed=$(awk -F'\t' '$1 == "passed"' <<<"$ran_list" | grep -c . || true)
rt_skipped=$(awk -F'\t' '$1 == "skipped"' <<<"$ran_list")
failed_list=$(awk -F'\t' '$1 != "passed" && $1 != "skipped"' <<<"$ran_list")
n_rt_skipped=$(grep -c . <<<"$rt_skipped" || true)
failed=$(grep -c . <<<"$failed_list" || true)
ran=$((passed + failed))
skipped=$(($(wc -l <"$OUT/skipped-by-rule.txt") + n_rt_skipped))
# Selected specs the report does not name at all (a ginkgo process that
# died, a report merged short): they neither ran nor were skipped, and
# would count nowhere.
missing=$(LC_ALL=C comm -23 <(LC_ALL=C sort "$OUT/selected.txt") \
	<({ cut -f2 "$OUT/skipped-by-rule.txt"; cut -f2 "$OUT/results.tsv"; } | LC_ALL=C sort -u))
n_missing=$(grep -c . <<<"$missing" || true)

{
	echo "Kubernetes $KUBE_VER e2e network tests (focus: $FOCUS) on $NODES schedulable node(s)"
	echo "selected $(wc -l <"$OUT/selected.txt"), ran $ran, passed $passed, failed $failed, skipped $skipped; $(since "$T0")s, the specs ${SPECS_S}s on $PROCS process(es)"
	if [ "$skipped" -gt 0 ]; then
		echo "skipped:"
		cut -f1,2 "$OUT/skipped-by-rule.txt" | sed 's/\t/ -- /; s/^/  /'
		[ -z "$rt_skipped" ] || awk -F'\t' '{ print "  framework: " $3 " -- " $2 }' <<<"$rt_skipped"
	fi
	if [ "$n_missing" -gt 0 ]; then
		echo "selected but absent from the report (not run):"
		sed 's/^/  /' <<<"$missing"
	fi
	if [ "$failed" -gt 0 ]; then
		echo "failed:"
		awk -F'\t' '{ print "  [" $1 "] " $2 "\n      " $3 }' <<<"$failed_list"
	fi
	echo "passed:"
	awk -F'\t' '$1 == "passed" { print "  " $2 }' <<<"$ran_list"
} >"$OUT/summary.txt"
sed 's/^/  /' "$OUT/summary.txt"
say "reports: $OUT/{summary.txt,report.json,junit.xml,e2e.log}"
[ "$ran" -gt 0 ] || die "no spec ran"
[ "$failed" = 0 ] || die "$failed spec(s) failed"
[ "$n_missing" = 0 ] || die "$n_missing selected spec(s) absent from the report: never run (above)"
[ "$n_rt_skipped" = 0 ] || die "$n_rt_skipped spec(s) skipped by the framework, not by a named rule (above)"
[ "$rc" = 0 ] || die "the test binary exited $rc with no failed spec (see $OUT/e2e.log)"
say "PASS: $passed passed, $skipped skipped, 0 failed"
