#!/usr/bin/env bash
# The plugin's main job on the embedded default (a static pool), in network
# namespaces this script creates and removes: a throwaway "node" and three
# "pods". Every address lives only inside those namespaces.
# Usage: scripts/demo.sh [path/to/eni-cni]
set -euo pipefail

BIN=$(realpath "${1:-bin/eni-cni}")
[ "$(id -u)" = 0 ] || { echo "demo: needs root (network namespaces)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "demo: $BIN not built (run make build)" >&2; exit 1; }
bash "$(dirname "${BASH_SOURCE[0]}")/demo-deps.sh" ip ping jq nsenter sha256sum

tag="ecni-demo-$$"
NODE="$tag-node"
PODS=("$tag-pod1" "$tag-pod2" "$tag-pod3")
WORK=$(mktemp -d "/tmp/$tag.XXXX")
CONF="$WORK/10-pods.conflist"

cleanup() {
	set +e
	for p in "${PODS[@]}"; do ip netns del "$p" 2>/dev/null; done
	ip netns del "$NODE" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
in_node() { nsenter --net="/var/run/netns/$NODE" "$@"; }

# cni VERB CONTAINER NETNS: call the plugin as a runtime would, on the node.
cni() {
	local verb=$1 cid=$2 netns=$3 pod=${4:-}
	CNI_COMMAND=$verb CNI_CONTAINERID=$cid CNI_NETNS=$netns CNI_IFNAME=eth0 CNI_PATH=$(dirname "$BIN") \
		CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=$pod;K8S_POD_UID=uid-$cid" \
		in_node "$BIN" < "$WORK/plugin.json"
}

say "eni-cni $("$BIN" version | cut -d' ' -f2): a node namespace and three pod namespaces"
ip netns add "$NODE"
ip -n "$NODE" link set lo up
ip -n "$NODE" addr add 10.97.0.1/32 dev lo # the node's own address, source of node->pod pings
for p in "${PODS[@]}"; do ip netns add "$p"; done

cat > "$CONF" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    { "type": "eni-cni",
      "stateDir": "$WORK/state",
      "mtu": 9001,
      "logFile": "$WORK/eni-cni.log",
      "pool": { "source": "static", "ranges": ["10.99.0.0/24", "10.98.0.10-10.98.0.20"] } }
  ]
}
JSON
# What a runtime passes on stdin: the plugin entry plus the list's name and version.
jq '.plugins[0] + {name: .name, cniVersion: .cniVersion}' "$CONF" > "$WORK/plugin.json"
cat "$CONF"

declare -A IP
for i in 0 1 2; do
	cid=$(printf 'demo%02d%s' "$i" "$$" | sha256sum | cut -c1-64)
	CIDS[i]=$cid
	say "ADD pod $((i + 1)) (container ${cid:0:12})"
	res=$(cni ADD "$cid" "/var/run/netns/${PODS[i]}" "web-$i")
	echo "$res" | jq -c '{ips: [.ips[].address], gateway: .ips[0].gateway, interfaces: [.interfaces[].name]}'
	IP[$i]=$(echo "$res" | jq -r '.ips[0].address' | cut -d/ -f1)
done

say "pod 1 -> pod 2, pod 2 -> pod 3, node -> every pod"
ip netns exec "${PODS[0]}" ping -c1 -W2 "${IP[1]}" | grep -E 'bytes from|loss'
ip netns exec "${PODS[1]}" ping -c1 -W2 "${IP[2]}" | grep -E 'bytes from|loss'
for i in 0 1 2; do in_node ping -c1 -W2 "${IP[$i]}" | grep -E 'bytes from'; done

say "inside pod 1: address, routes, pinned gateway"
ip -n "${PODS[0]}" -br addr show dev eth0
ip -n "${PODS[0]}" route
ip -n "${PODS[0]}" neigh
say "on the node: host routes and rules"
ip -n "$NODE" route
ip -n "$NODE" rule | grep -E '^512:'

say "eni-cni list"
in_node "$BIN" list --config "$CONF"

say "pod 1's namespace disappears; DEL arrives with CNI_NETNS=\"\""
ip netns del "${PODS[0]}"
cni DEL "${CIDS[0]}" "" && echo "DEL exit 0"
cni DEL "${CIDS[0]}" "" && echo "second DEL exit 0"
in_node "$BIN" list --config "$CONF"

say "DEL the others"
for i in 1 2; do cni DEL "${CIDS[i]}" "/var/run/netns/${PODS[i]}"; done
in_node "$BIN" list --config "$CONF"
left=$(ip -n "$NODE" -o link show | grep -c ' eni' || true)
echo "host veths left on the node: $left; rules at 512: $(ip -n "$NODE" rule | grep -c '^512:' || true)"

say "the plugin's log (one line per verb)"
cat "$WORK/eni-cni.log"
say "demo done; removing its namespaces and files"
