#!/usr/bin/env bash
# eni-cni's EC2 mode on a simulated node, in namespaces this script creates
# and removes: a throwaway "node" running the fake IMDS + EC2 server
# (ec2/ec2fake/cmd/ec2fake) as a t3.medium (3 ENIs x 5 secondary addresses),
# a "vpc" namespace holding the far ends of the ENI links, and six "pods".
# `eni-cni warm` fills the pool from the primary ENI, then attaches a second
# ENI; pods there get a `from` rule into that ENI's route table. Then the
# node drifts: its ENI table is flushed and a warm pass puts it back; the
# second ENI is detached behind eni-cni's back (through the EC2 API, as
# another tool would) and the next pass notices, flags the pod's address
# lost and attaches a new ENI. Every address lives only inside those
# namespaces; nothing talks to AWS.
# Usage: scripts/demo-ec2.sh [path/to/eni-cni]
set -euo pipefail

BIN=$(realpath "${1:-bin/eni-cni}")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "demo-ec2: needs root (network namespaces)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "demo-ec2: $BIN not built (run make build)" >&2; exit 1; }
command -v go >/dev/null || { echo "demo-ec2: go not found" >&2; exit 1; }
bash "$ROOT/scripts/demo-deps.sh" jq nsenter ip ping curl

START=$(date +%s%N)
tag="ecni-ec2demo-$$"
NODE="$tag-node"
VPC="$tag-vpc"
PODS=("$tag-pod1" "$tag-pod2" "$tag-pod3" "$tag-pod4" "$tag-pod5" "$tag-pod6")
WORK=$(mktemp -d "/tmp/$tag.XXXX")
touch "$WORK/links" # the node links the "hypervisor" made: name MAC
CONF="$WORK/10-pods.conflist"
DESCRIBE="$WORK/ec2.json"
FAKE_PID=""
WATCH_PID=""

cleanup() {
	local rc=$?
	set +e
	if [ -n "$WATCH_PID" ]; then
		touch "$WORK/stop-watching"
		wait "$WATCH_PID" 2>/dev/null
	fi
	if [ -n "$FAKE_PID" ]; then
		kill "$FAKE_PID" 2>/dev/null
		wait "$FAKE_PID" 2>/dev/null
	fi
	for p in "${PODS[@]}"; do ip netns del "$p" 2>/dev/null; done
	ip netns del "$NODE" 2>/dev/null
	ip netns del "$VPC" 2>/dev/null
	rm -rf "$WORK"
	local left
	left=$(ip netns list | grep -c "^$tag-" || true)
	if [ "$left" != 0 ] || { [ -n "$FAKE_PID" ] && kill -0 "$FAKE_PID" 2>/dev/null; }; then
		echo "demo-ec2: cleanup left $left namespaces or the fake (pid $FAKE_PID) behind" >&2
		rc=1
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
in_node() { nsenter --net="/var/run/netns/$NODE" "$@"; }
calls() { jq -c '.calls' "$DESCRIBE"; }

# cni VERB CONTAINER NETNS [POD]: call the plugin as a runtime would, on the node.
cni() {
	local verb=$1 cid=$2 netns=$3 pod=${4:-}
	CNI_COMMAND=$verb CNI_CONTAINERID=$cid CNI_NETNS=$netns CNI_IFNAME=eth0 CNI_PATH=$(dirname "$BIN") \
		CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=$pod;K8S_POD_UID=uid-$cid" \
		in_node "$BIN" <"$WORK/plugin.json"
}

# warm: one `eni-cni warm` pass with the fake's endpoints and dummy
# credentials from its env file (what the systemd timer would run).
warm() {
	(
		# shellcheck disable=SC1091
		. "$WORK/ec2.env"
		in_node "$BIN" warm --config "$CONF"
	)
}

# eni_link MAC DEVICE: the node's link of an attached ENI, as the
# hypervisor would add it: a veth ens<5+device> (another name if a link of a
# detached ENI still holds that one) carrying the ENI's MAC, its far end
# (up) in the vpc namespace. The plugin finds it by MAC. Recorded in
# $WORK/links so the hypervisor can take it away at detach.
eni_link() {
	local mac=$1 name="ens$((5 + $2))"
	ip -n "$NODE" link show "$name" >/dev/null 2>&1 && name="${name}n"
	ip -n "$NODE" link add "$name" address "$mac" type veth peer name "${name}p" netns "$VPC" || return 1
	ip -n "$VPC" link set "${name}p" up || return 1
	echo "$name $mac" >>"$WORK/links"
	echo "$name"
}

# link_of MAC: the node's link of an ENI.
link_of() { awk -v m="$1" 'tolower($2) == tolower(m) { print $1 }' "$WORK/links" | tail -1; }

# has_link MAC: whether a node link carries MAC. (Not `ip | grep -q`: grep
# quitting early makes ip die of SIGPIPE, which pipefail reports as "no".)
has_link() {
	local links
	links=$(ip -n "$NODE" -o link show) || return 2
	grep -qi "link/ether $1 " <<<"$links"
}

# watch_enis: play the hypervisor. Whenever the describe file (rewritten by
# the fake after every EC2 call) shows an attached ENI without a link on the
# node, add its link (`warm` waits up to 60 s for it after attaching); when
# an ENI the node has a link of is no longer attached, take the link away.
watch_enis() {
	set +e
	local attached name mac dev id
	while [ ! -e "$WORK/stop-watching" ]; do
		attached=$(jq -r '.enis[] | select(.deviceIndex >= 0) | "\(.mac) \(.deviceIndex) \(.id)"' "$DESCRIBE" 2>/dev/null) || {
			sleep 0.05
			continue
		}
		while read -r name mac; do
			if ! grep -qi "^$mac " <<<"$attached"; then
				ip -n "$NODE" link del "$name" && echo "   [hypervisor] $mac detached: link $name leaves the node"
				sed -i "\| $mac\$|d" "$WORK/links"
			fi
		done < <(cat "$WORK/links")
		while read -r mac dev id; do
			[ -n "$mac" ] || continue
			has_link "$mac"
			if [ $? = 1 ] && name=$(eni_link "$mac" "$dev"); then
				echo "   [hypervisor] $id attached at device $dev: link $name ($mac) appears on the node"
			fi
		done <<<"$attached"
		sleep 0.05
	done
}

pod_ip() { echo "$1" | jq -r '.ips[0].address' | cut -d/ -f1; }
host_veth() { echo "$1" | jq -r '.interfaces[] | select(.sandbox == null) | .name'; }
eni_of() { jq -r --arg ip "$1" '.enis[] | select(.secondaryIps | index($ip)) | .id' "$DESCRIBE"; }

say "eni-cni $("$BIN" version | cut -d' ' -f2) on a simulated EC2 node: building the fake IMDS + EC2 server"
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/ec2fake" ./ec2/ec2fake/cmd/ec2fake)
ip netns add "$NODE"
ip netns add "$VPC"
ip -n "$NODE" link set lo up
ip -n "$NODE" addr add 10.97.0.1/32 dev lo # the node's own address, source of node->pod pings
for p in "${PODS[@]}"; do ip netns add "$p"; done

# Loopback is per namespace: the fake listens on 127.0.0.1 inside the node
# namespace, where the plugin runs. nsenter execs it, so $! is the fake.
nsenter --net="/var/run/netns/$NODE" "$WORK/ec2fake" --instance-type t3.medium \
	--vpc-cidr 10.98.0.0/16 --subnet-cidr 10.98.0.0/20 \
	--describe "$DESCRIBE" --env-file "$WORK/ec2.env" >"$WORK/ec2fake.out" 2>"$WORK/ec2fake.err" &
FAKE_PID=$!
for _ in $(seq 100); do
	[ -s "$WORK/ec2fake.out" ] && [ -s "$WORK/ec2.env" ] && break
	kill -0 "$FAKE_PID" 2>/dev/null || { cat "$WORK/ec2fake.err" >&2; exit 1; }
	sleep 0.05
done
URL=$(head -1 "$WORK/ec2fake.out")
[ -n "$URL" ] || { echo "demo-ec2: the fake printed no URL" >&2; exit 1; }
jq -r '"fake at \(.imdsURL) (pid '"$FAKE_PID"'): \(.instance.instanceId), \(.instance.instanceType) in \(.instance.availabilityZone), " +
	"limits \(.instance.limits.maxENIs) ENIs x \(.instance.limits.ipv4PerENI) IPv4, subnet \(.instance.subnets[0].cidr)"' "$DESCRIBE"

say "the primary ENI's link on the node (a veth with the ENI's MAC), its address and default route"
read -r PMAC PIP PENI < <(jq -r '.enis[0] | "\(.mac) \(.primaryIp) \(.id)"' "$DESCRIBE")
PLINK=$(eni_link "$PMAC" 0)
ip -n "$NODE" link set "$PLINK" up
ip -n "$NODE" addr add "$PIP/20" dev "$PLINK"
ip -n "$NODE" route add default via 10.98.0.1 dev "$PLINK"
echo "$PENI: $PLINK $PMAC $PIP/20, default via 10.98.0.1"
ip -n "$NODE" -br link show "$PLINK"
watch_enis &
WATCH_PID=$!

cat >"$CONF" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    { "type": "eni-cni",
      "stateDir": "$WORK/state",
      "mtu": 9001,
      "logFile": "$WORK/eni-cni.log",
      "imdsEndpoint": "$URL",
      "ec2Endpoint": "$URL",
      "pool": { "source": "ec2", "warmIPTarget": 3 } }
  ]
}
JSON
# What a runtime passes on stdin: the plugin entry plus the list's name and version.
jq '.plugins[0] + {name: .name, cniVersion: .cniVersion}' "$CONF" >"$WORK/plugin.json"
cat "$CONF"

say "eni-cni warm (first pass: IMDS discovery, instance limits, 3 addresses on the primary ENI)"
warm
echo "EC2 calls so far: $(calls)"
in_node "$BIN" list --config "$CONF"

declare -a CIDS IPS VETHS ENIS
add_pod() {
	local i=$1 cid res
	cid=$(printf 'ec2demo%02d%s' "$i" "$$" | sha256sum | cut -c1-64)
	CIDS[i]=$cid
	res=$(cni ADD "$cid" "/var/run/netns/${PODS[i]}" "web-$i")
	IPS[i]=$(pod_ip "$res")
	VETHS[i]=$(host_veth "$res")
	ENIS[i]=$(eni_of "${IPS[i]}")
	local where="the primary ENI"
	[ "${ENIS[i]}" = "$PENI" ] || where="the SECOND ENI"
	printf 'ADD pod %d (container %s): %s on %s (%s), host veth %s\n' "$((i + 1))" "${cid:0:12}" "${IPS[i]}" "$where" "${ENIS[i]}" "${VETHS[i]}"
}

say "ADD pods 1-3: the pool is used up"
for i in 0 1 2; do add_pod "$i"; done
in_node "$BIN" list --config "$CONF" | tail -1

say "eni-cni warm: the primary ENI takes its last 2 addresses (5 per ENI on t3.medium), then warm creates, tags and attaches a second ENI and waits for its link"
before=$(calls)
warm
echo "EC2 calls of this pass: before $before, after $(calls)"
read -r SENI SMAC SDEV < <(jq -r '.enis[] | select(.deviceIndex == 1) | "\(.id) \(.mac) \(.deviceIndex)"' "$DESCRIBE")
SLINK=$(link_of "$SMAC")
TABLE=$((SDEV + 1))
jq -c '.enis[] | select(.deviceIndex == 1) | {id, mac, deviceIndex, deleteOnTermination, secondaryIps, tags}' "$DESCRIBE"
echo "the node's link of $SENI ($SMAC), set up by warm (up, mtu 9001, loose rp_filter) with its route table $TABLE (device $SDEV + 1):"
ip -n "$NODE" -br link show "$SLINK"
echo "rp_filter of $SLINK: $(in_node cat "/proc/sys/net/ipv4/conf/$SLINK/rp_filter")"
ip -n "$NODE" route show table "$TABLE"

say "ADD pods 4-6: two fill the primary ENI, the third gets an address of the second ENI"
for i in 3 4 5; do add_pod "$i"; done
P=-1 S=-1
for i in 0 1 2 3 4 5; do
	if [ "${ENIS[i]}" = "$PENI" ]; then P=$i; else S=$i; fi
done
[ "$S" -ge 0 ] || { echo "demo-ec2: no pod got an address of the second ENI" >&2; exit 1; }

say "on the node: rules (512: to pod lookup main; 1536: from a second-ENI pod lookup its ENI's table) and table $TABLE"
ip -n "$NODE" rule | grep -E '^(512|1536):'
ip -n "$NODE" route show table "$TABLE"
echo "egress of pod $((S + 1)) (${IPS[S]}, second ENI) and of pod $((P + 1)) (${IPS[P]}, primary ENI) to 192.0.2.10:"
in_node ip -4 route get 192.0.2.10 from "${IPS[S]}" iif "${VETHS[S]}" | head -1
in_node ip -4 route get 192.0.2.10 from "${IPS[P]}" iif "${VETHS[P]}" | head -1

say "eni-cni list: which ENI each pod's address is on"
in_node "$BIN" list --config "$CONF"

say "pod $((P + 1)) (primary ENI) <-> pod $((S + 1)) (second ENI), via the node; node -> pod $((S + 1))"
ip netns exec "${PODS[P]}" ping -c1 -W2 "${IPS[S]}" | grep -E 'bytes from'
ip netns exec "${PODS[S]}" ping -c1 -W2 "${IPS[P]}" | grep -E 'bytes from'
in_node ping -c1 -W2 "${IPS[S]}" | grep -E 'bytes from'

say "eni-cni warm tops the pool up on the second ENI; run again right away, it makes no EC2 call"
before=$(calls)
warm
mid=$(calls)
warm
echo "EC2 calls: before $before, after the top-up $mid, after the pass without churn $(calls)"

say "drift 1: something flushes table $TABLE and takes $SLINK down (systemd-networkd, amazon-ec2-net-utils, an operator)"
ip -n "$NODE" route flush table "$TABLE"
ip -n "$NODE" link set "$SLINK" down
echo "table $TABLE now: '$(ip -n "$NODE" route show table "$TABLE")'; $SLINK: $(ip -n "$NODE" -br link show "$SLINK" | awk '{print $2}')"
before=$(calls)
warm
echo "EC2 calls: before $before, after $(calls) (repairing the node side needs none)"
ip -n "$NODE" route show table "$TABLE"
ip -n "$NODE" -br link show "$SLINK"

say "drift 2: someone detaches $SENI behind eni-cni's back (aws ec2 detach-network-interface)"
SATT=$(jq -r --arg id "$SENI" '.enis[] | select(.id == $id) | .attachmentId' "$DESCRIBE")
in_node curl -sS -o /dev/null -w 'EC2 DetachNetworkInterface: HTTP %{http_code}\n' \
	--data "Action=DetachNetworkInterface&Version=2016-11-15&AttachmentId=$SATT" "$URL"
for _ in $(seq 100); do # the hypervisor takes the link away with the attachment
	has_link "$SMAC" || break
	sleep 0.05
done
echo "the next warm pass: IMDS no longer lists $SENI, so it reads DescribeNetworkInterfaces for this instance,"
echo "drops the ENI and its free addresses, flags pod $((S + 1))'s ${IPS[S]} lost, and tops the pool up with a new ENI"
before=$(calls)
warm
echo "EC2 calls: before $before, after $(calls)"
in_node "$BIN" list --config "$CONF"

say "pod $((S + 1))'s namespace disappears; DEL arrives with CNI_NETNS=\"\""
ip netns del "${PODS[S]}"
cni DEL "${CIDS[S]}" "" && echo "DEL exit 0"
cni DEL "${CIDS[S]}" "" && echo "second DEL exit 0"
echo "rules left for ${IPS[S]}: $(ip -n "$NODE" rule | grep -c "${IPS[S]} " || true)"
echo "the next warm pass drops the lost address from the pool for good (it is no longer this instance's):"
warm
in_node "$BIN" list --config "$CONF" | tail -1

say "DEL the others"
for i in 0 1 2 3 4 5; do
	[ "$i" = "$S" ] || cni DEL "${CIDS[i]}" "/var/run/netns/${PODS[i]}"
done
in_node "$BIN" list --config "$CONF"
left=$(ip -n "$NODE" -o link show | grep -c ': eni' || true)
echo "host veths left on the node: $left; rules at 512/1536: $(ip -n "$NODE" rule | grep -cE '^(512|1536):' || true)"

say "the fake's EC2 call counts (from its describe file) and ENIs"
jq '.calls' "$DESCRIBE"
jq -r '.enis[] | "\(.id) \(.status) device \(.deviceIndex) \(.mac): \(.secondaryIps | length) secondary addresses"' "$DESCRIBE"

say "the plugin's log (one line per verb)"
cat "$WORK/eni-cni.log"
say "demo done in $((($(date +%s%N) - START) / 1000000)) ms; removing its namespaces, the fake (pid $FAKE_PID) and files"
