#!/usr/bin/env bash
# ready suite: the readiness gate (readyWhenFilled, docs/ec2.md) with a real
# containerd 2.x, kubelet and API server on the fake EC2 world. A one-node
# kubeadm cluster as the kubeadm suite makes it, whose node is an instance of
# the fake (ec2/ec2fake/cmd/ec2fake: its IMDS, the EC2 API, the primary
# ENI's MAC and address on the node's ens5), `eni-cni install --pool ec2
# --cni-version 1.1.0` as a user would, while the fake holds back addresses
# (its --faults file: AssignPrivateIpAddresses and CreateNetworkInterface
# fail with InsufficientFreeAddressesInSubnet). Named checks, each failing
# the run when broken:
#
#   kubeadm-init                 kubeadm init (every phase) exits 0
#   eni-cni-install              eni-cni install --pool ec2 --cni-version 1.1.0: binary and
#                                conflist in place (its first warm pass fails: the subnet is full)
#   node-held-notready           the node stays NotReady: its Ready condition carries kubelet's
#                                NetworkReady=false with our STATUS reason, and a warm pass
#                                that STATUS started hits the fault again
#   pod-held-back                kubectl run: the pod stays Pending, unscheduled (the not-ready
#                                taint), no sandbox and no eni-cni address
#   fault-cleared-node-ready     the fault file emptied: the pool fills with no ADD (a warm pass
#                                STATUS started), the node turns Ready by itself; times from
#                                the clearing to the fill and to Ready
#   pod-runs-on-eni-address      the pod Running with an address the fake assigned to the
#                                primary ENI, `eni-cni list` records default/web
#   teardown-leaves-nothing      the pod deleted (address freed), kubelet and containerd
#                                stopped: no shim, mount, netns, cgroup or link left
#   host-untouched               (outside) this machine's node paths and sysctls as found
#
# READY_CONTAINERD=1 runs the same story on containerd 1.6 (a 1.0.0 conflist:
# it refuses 1.1.0, and never calls STATUS), to show the gate changes nothing
# there: node-ready-regardless (Ready while the pool is empty),
# pod-add-fails (the pod is scheduled and its sandbox's ADD fails until the
# fault is cleared) and fault-cleared-pool-filled (by the warm pass of a
# retried ADD) replace node-held-notready, pod-held-back and
# fault-cleared-node-ready.
#
# Like kubeadm.sh it re-runs itself in private mount and network namespaces
# (kubeadm-lib.sh); the fake runs in that network namespace, on loopback.
# No timer or cron runs warm here: only STATUS (and install's first pass)
# do.
#
# Usage: scripts/e2e/ready.sh /abs/path/to/bin/eni-cni    (= make test-ready)
# Root; after scripts/install-test-deps.sh --with-containerd2 --with-kubeadm.
# Env: READY_CONTAINERD [2], E2E_KEEP_RUN=1 keeps the run dir.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
# shellcheck source-path=SCRIPTDIR source=kubelet-lib.sh
. "$here/kubelet-lib.sh"
# shellcheck source-path=SCRIPTDIR source=kubeadm-lib.sh
. "$here/kubeadm-lib.sh"

ENI_BIN=$(realpath "${1:?usage: ready.sh /path/to/eni-cni}")
RUNTIME=${READY_CONTAINERD:-2}
case $RUNTIME in 1 | 2) ;; *) echo "READY_CONTAINERD must be 1 or 2" >&2; exit 2 ;; esac
NODE=ready-node
NODE_IP=10.198.0.10 # the instance's primary address, on ens5
NODE_GW=10.198.0.1  # nobody: the default route leads nowhere
VPC_CIDR=10.198.0.0/16
SUBNET=10.198.0.0/20
INSTANCE_TYPE=m5.large # 10 addresses per ENI: warmIPTarget 5 fits on the primary ENI
HOLD='AssignPrivateIpAddresses InsufficientFreeAddressesInSubnet
CreateNetworkInterface InsufficientFreeAddressesInSubnet'
REASON='the ec2 pool is not ready for pods'

say() { printf 'ready-e2e: %s\n' "$*"; }

# ------------------------------------------------------------------ outside
[ "${READY_INNER:-0}" = 1 ] || kadm_outside READY_INNER "$0" "$@"

# ------------------------------------------------------------------ inside
export KUBECONFIG=/etc/kubernetes/admin.conf
KEEP_RUN=${E2E_KEEP_RUN:-0}
WORK=$(mktemp -d /tmp/eni-ready.XXXX) # the fake's files; E2E_RUN comes with the node
FAKE_PID=''
WORLD=$WORK/ec2.json FAULTS=$WORK/faults

k() { "$KUBECTL" "$@"; }
eni() { /opt/cni/bin/eni-cni "$@"; }
alloc_json() { eni list --json; }
ready_message() { k get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}' 2>/dev/null; }
calls() { jq -r --arg a "$1" '.calls[$a] // 0' "$WORLD"; }
eni_ips() { jq -r '.enis[0].secondaryIps // [] | .[]' "$WORLD"; }
pod_json() { k get pod web -o json 2>/dev/null; }
pod_ready() { [ "$(k get pod web -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; }
ip_free() { [ -z "$(alloc_json | jq -r --arg ip "$1" '.allocations[] | select(.ip == $ip) | .ip')" ]; }
pod_gone() { ! k get pod web >/dev/null 2>&1; }
# pod_sandboxes: this node's sandboxes of pod web (none until it is scheduled here).
pod_sandboxes() { e2e_crictl pods --name web -q 2>/dev/null; }

diagnostics() {
	echo "--- fake: calls $(jq -c .calls "$WORLD" 2>/dev/null); faults: $(tr '\n' ';' <"$FAULTS" 2>/dev/null)"
	tail -n 5 "$WORK/ec2fake.err" 2>/dev/null
	[ -n "${E2E_RUN:-}" ] && [ -d "$E2E_RUN" ] || return 0
	echo "--- kubelet errors (last 15)"
	grep -E '^E[0-9]{4}' "$E2E_RUN/logs/kubelet.log" 2>/dev/null | tail -n 15
	echo "--- nodes and pods"
	k get nodes -o wide 2>&1 | head
	ready_message 2>&1
	echo
	k get pods -A -o wide 2>&1 | head -20
	echo "--- sandboxes"
	e2e_crictl pods 2>&1 | head -20
}

cleanup() {
	local rc=$?
	trap - EXIT
	set +e
	kadm_stop_kubelet
	E2E_KEEP_RUN=1 e2e_cleanup 2>/dev/null
	[ -z "$FAKE_PID" ] || _e2e_kill_wait "$FAKE_PID" 5
	kadm_unmount_overlays
	if [ "$KEEP_RUN" = 1 ]; then
		say "kept run dirs $E2E_RUN $WORK"
	else
		rm -rf "$E2E_RUN" "$WORK"
	fi
	exit "$rc"
}

# fake_start: the fake world (one m5.large instance) in this network
# namespace with the hold rules in its fault file; the SDK's env (what an
# instance role and IMDS give a node) exported for everything started
# after, containerd and so the plugin included. Built before the node's
# HOME moves into its run dir (the Go build cache stays the machine's).
fake_start() {
	(cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/ec2fake" ./ec2/ec2fake/cmd/ec2fake) || fail "build ec2fake"
	printf '%s\n' "$HOLD" >"$FAULTS"
	ip link set lo up
	_e2e_nolock "$WORK/ec2fake" --instance-type "$INSTANCE_TYPE" --vpc-cidr "$VPC_CIDR" --subnet-cidr "$SUBNET" \
		--primary-ip "$NODE_IP" --describe "$WORLD" --env-file "$WORK/ec2.env" --faults "$FAULTS" \
		>"$WORK/ec2fake.out" 2>"$WORK/ec2fake.err" &
	FAKE_PID=$!
	wait_for 10 test -s "$WORK/ec2fake.out" -a -s "$WORK/ec2.env" -a -s "$WORLD" ||
		fail "the fake did not start: $(cat "$WORK/ec2fake.err")"
	set -a
	# shellcheck disable=SC1091
	. "$WORK/ec2.env"
	set +a
}

# node_network: ens5 is the primary ENI (its MAC and address, as DHCP would
# configure it); a veth whose peer stays here unaddressed, so nothing sent
# to the default route goes anywhere.
node_network() {
	local mac
	mac=$(jq -r '.enis[0].mac' "$WORLD")
	ip link add ens5 address "$mac" type veth peer name ens5-peer
	ip addr add "$NODE_IP/20" dev ens5
	ip link set ens5 up
	ip link set ens5-peer up
	ip route add default via "$NODE_GW" dev ens5
	sysctl -qw net.ipv4.ip_forward=1 # this namespace's own (kubeadm's preflight wants it)
	printf '%s %s\n' "$NODE_IP" "$NODE" >>/etc/hosts
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
clusterName: eni-cni-ready
imageRepository: $REPO
EOF
	kadm_kubelet_config 20 >>"$E2E_RUN/kubeadm.yaml"
}

trap cleanup EXIT
fake_start
KADM_CONTAINERD=$RUNTIME kadm_node_setup
node_network
kadm_node_runtime
write_kubeadm_config
say "run dir $E2E_RUN; node $NODE = instance $(jq -r .instance.instanceId "$WORLD") ($INSTANCE_TYPE) at $NODE_IP; $("$E2E_CONTAINERD_BIN" --version | awk '{ print $1, $3 }')"

# ------------------------------------------------------------------ cases

begin kubeadm-init
kubeadm init --config "$E2E_RUN/kubeadm.yaml" >"$E2E_RUN/logs/kubeadm-init.log" 2>&1 ||
	fail "kubeadm init failed (exit $?): $(tail -n 5 "$E2E_RUN/logs/kubeadm-init.log")"
# One node: the pod of this suite may only wait for the not-ready taint.
k taint nodes --all node-role.kubernetes.io/control-plane- >/dev/null || fail "kubectl taint failed"
pass "control plane up"

begin eni-cni-install
install -m 0755 "$ENI_BIN" "$E2E_RUN/eni-cni"
cniver=()
[ "$RUNTIME" = 2 ] && cniver=(--cni-version 1.1.0)
T_INSTALL=$EPOCHREALTIME
rc=0
show "$E2E_RUN/eni-cni" install --pool ec2 "${cniver[@]}" || rc=$?
[ -x /opt/cni/bin/eni-cni ] && [ -s /etc/cni/net.d/10-eni-cni.conflist ] || fail "binary or conflist not installed (exit $rc)"
want=${cniver[1]:-1.0.0}
[ "$(jq -r .cniVersion /etc/cni/net.d/10-eni-cni.conflist)" = "$want" ] || fail "conflist cniVersion $(jq -r .cniVersion /etc/cni/net.d/10-eni-cni.conflist), want $want"
[ -z "$(eni_ips)" ] || fail "the fake assigned addresses despite the fault: $(eni_ips | tr '\n' ' ')"
pass "binary and $want conflist in place (install exit $rc: its warm pass met the full subnet); no address assigned"

case_held_notready() {
	begin node-held-notready
	local a0 msg
	a0=$(calls AssignPrivateIpAddresses)
	wait_for 60 eval '[[ $(ready_message) == *"$REASON"* ]]' ||
		fail "the node's Ready condition does not carry our reason 60 s after install: $(ready_message)"
	# A warm pass started by STATUS (no timer runs here) hits the fault again.
	wait_for 40 eval '[ "$(calls AssignPrivateIpAddresses)" -gt "$a0" ]' ||
		fail "no warm pass asked for addresses again within 40 s of install"
	sleep 1
	! node_ready "$NODE" || fail "node Ready while the pool is empty"
	msg=$(ready_message)
	[[ $msg == *NetworkReady=false* && $msg == *"$REASON"* && $msg == *"subnet is full"* ]] ||
		fail "unexpected Ready message: $msg"
	say "  Ready=False: $msg"
	pass "NotReady $(e2e_since "$T_INSTALL")s after install with our reason; the fake refused $(calls AssignPrivateIpAddresses) Assign and $(calls CreateNetworkInterface) Create calls"
}

case_ready_regardless() {
	begin node-ready-regardless
	wait_for 60 node_ready "$NODE" || fail "node not Ready 60 s after install on containerd 1.6: $(ready_message)"
	[ -z "$(eni_ips)" ] || fail "the fake assigned addresses despite the fault"
	pass "Ready $(e2e_since "$T_INSTALL")s after install with no address in the pool: containerd 1.6 never calls STATUS"
}

case_pod_held_back() {
	begin pod-held-back
	local sched
	sleep 3 # time for the scheduler to try again, and kubelet to start what it got
	sched=$(pod_json | jq -c '[.spec.nodeName // "", .status.phase, (.status.conditions[]? | select(.type == "PodScheduled") | .status, .reason, .message)]')
	[ "$(pod_json | jq -r '.spec.nodeName // ""')" = "" ] || fail "pod scheduled onto the NotReady node: $sched"
	[ "$(pod_json | jq -r .status.phase)" = Pending ] || fail "pod not Pending: $sched"
	[ -z "$(pod_sandboxes)" ] || fail "a sandbox exists for pod web: $(pod_sandboxes)"
	[ "$(alloc_json | jq '.allocations | length')" = 0 ] || fail "eni-cni allocated addresses: $(alloc_json | jq -c .allocations)"
	! node_ready "$NODE" || fail "node turned Ready while the fault holds"
	[[ " $(k get node "$NODE" -o jsonpath='{.spec.taints[*].key}') " == *" node.kubernetes.io/not-ready "* ]] ||
		fail "node without the not-ready taint: $(k get node "$NODE" -o jsonpath='{.spec.taints}')"
	say "  pod web: $sched"
	pass "Pending and unscheduled (the node's node.kubernetes.io/not-ready taint), no sandbox, no address"
}

case_pod_add_fails() {
	begin pod-add-fails
	local why
	wait_for 60 eval '[ -n "$(k get events --field-selector involvedObject.name=web,reason=FailedCreatePodSandBox -o name 2>/dev/null)" ]' ||
		fail "no FailedCreatePodSandBox event for pod web within 60 s"
	why=$(k get events --field-selector involvedObject.name=web,reason=FailedCreatePodSandBox -o jsonpath='{.items[0].message}')
	[ "$(pod_json | jq -r .status.phase)" = Pending ] || fail "pod web not Pending"
	say "  ${why:0:400}"
	pass "scheduled onto the Ready node, its sandbox's ADD fails while the pool is empty"
}

begin pod-created
# The controller manager makes the namespace's service account a moment after init.
wait_for 30 eval 'k get serviceaccount default >/dev/null 2>&1' || fail "no default service account 30 s after kubeadm init"
T_RUN=$EPOCHREALTIME
show k run web --image="$WEB_IMAGE" --image-pull-policy=Never --port=8080 || fail "kubectl run failed"
pass "kubectl run web"
if [ "$RUNTIME" = 2 ]; then
	case_held_notready
	case_pod_held_back
else
	case_ready_regardless
	case_pod_add_fails
fi

# The fault cleared: the pool fills, by a pass STATUS started (no pod can
# have reached the node: no ADD) on containerd 2.x, by one a retried ADD
# started on 1.6.
if [ "$RUNTIME" = 2 ]; then begin fault-cleared-node-ready; else begin fault-cleared-pool-filled; fi
: >"$FAULTS"
T_CLEAR=$EPOCHREALTIME
wait_for 60 eval '[ "$(eni_ips | wc -l)" -ge 5 ]' || fail "the pool was not filled within 60 s of clearing the fault"
FILL_S=$(e2e_since "$T_CLEAR")
allocs=$(alloc_json | jq '.allocations | length')
if [ "$RUNTIME" = 2 ]; then
	[ "$allocs" = 0 ] || fail "an ADD ran before the pool filled: $(alloc_json | jq -c .allocations)"
	# When STATUS last started a pass (at most every 10 s): the wait for
	# it is most of the time to Ready.
	started=$(date -d "$(cat /var/lib/eni-cni/status.warm)" +%s.%N) || fail "no status.warm stamp"
	START_S=$(awk -v s="$started" -v c="$T_CLEAR" 'BEGIN { printf "%.3f\n", s - c }')
	wait_for 60 node_ready "$NODE" || fail "node not Ready within 60 s of clearing the fault: $(ready_message)"
	READY_S=$(e2e_since "$T_CLEAR")
	pass "pool filled ${FILL_S}s after clearing with no ADD (0 allocations) by the pass STATUS started ${START_S}s after clearing; node Ready ${READY_S}s after clearing"
else
	READY_S=-
	pass "pool filled ${FILL_S}s after clearing, by the warm pass of a retried ADD ($allocs allocations then); the node was Ready all along"
fi

begin pod-runs-on-eni-address
wait_for 90 pod_ready || fail "pod web not Ready within 90 s of the node ($(pod_json | jq -r .status.phase))"
POD_S=$(e2e_since "$T_CLEAR")
POD_IP=$(k get pod web -o jsonpath='{.status.podIP}')
eni_ips | grep -qxF "$POD_IP" || fail "pod IP $POD_IP is not an address the fake assigned to the primary ENI ($(eni_ips | tr '\n' ' '))"
got=$(alloc_json | jq -r --arg ip "$POD_IP" '.allocations[] | select(.ip == $ip) | "\(.podNamespace)/\(.podName)"')
[ "$got" = default/web ] || fail "eni-cni list: $POD_IP belongs to '${got:-nobody}', want default/web"
reply=$(curl -s --max-time 5 "http://$POD_IP:8080/") || fail "no HTTP answer from $POD_IP:8080"
[[ $reply == "web $POD_IP:8080 "* ]] || fail "unexpected answer: $reply"
pass "Running with $POD_IP (primary ENI $(jq -r '.enis[0].id' "$WORLD")) ${POD_S}s after clearing, $(e2e_since "$T_RUN")s after kubectl run; HTTP answers"

begin teardown-leaves-nothing
show k delete pod web --wait=true --timeout=60s || fail "kubectl delete failed"
wait_for 30 ip_free "$POD_IP" || fail "$POD_IP still allocated 30 s after the pod was deleted"
kadm_stop_kubelet
e2e_stop || fail "stopping containerd failed"
left=$(alloc_json | jq -r '[.allocations[] | "\(.podNamespace)/\(.podName) \(.ip)"] | join(", ")')
[ -z "$left" ] || fail "addresses still allocated after every pod was removed: $left"
kl_cleanup_cgroups
e2e_check_clean || fail "left behind (above)"
[ -z "$(ip -o link show | grep -v -E ': (lo|ens5|ens5-peer)[@:]')" ] || fail "links left in the node namespace: $(ip -o link show | cut -d: -f2 | tr '\n' ' ')"
pass "$POD_IP freed, every pod's address freed by its DEL; kubelet and containerd stopped; no shim, sandbox, mount, netns, cgroup or link left"

ready="node Ready ${READY_S}s"
[ "$RUNTIME" = 2 ] || ready="node Ready all along"
say "containerd $RUNTIME: after clearing the fault: pool filled ${FILL_S}s, $ready, pod Running ${POD_S}s; EC2 calls $(jq -c .calls "$WORLD")"
