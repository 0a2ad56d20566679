#!/usr/bin/env bash
# Builds the eni-cni image offline, as a docker-archive tar: one layer
# holding the static binary as /eni-cni, nothing else (no shell, no libc:
# `eni-cni install` and `eni-cni idle` are all the DaemonSet runs). Load it
# with `docker load -i`, `ctr -n k8s.io images import` or `podman load`,
# then push it to the registry the cluster pulls from.
#
# Usage: scripts/k8s/build-image.sh BINARY OUT.tar [TAG]
#   BINARY  bin/eni-cni of `make build` (the lean build with the full one inside)
#   TAG     default localhost/eni-cni:<version the binary reports>
# Reproducible: the same binary and tag give the same archive, byte for byte.
set -euo pipefail
bin=${1:?usage: build-image.sh BINARY OUT.tar [TAG]}
out=${2:?usage: build-image.sh BINARY OUT.tar [TAG]}
[ -x "$bin" ] || { echo "build-image.sh: $bin is not an executable (make build)" >&2; exit 1; }
command -v jq >/dev/null || { echo "build-image.sh: jq is needed (apt-get install jq)" >&2; exit 1; }
version=$("$bin" version | awk '{print $2}')
tag=${3:-localhost/eni-cni:$version}
case $(file -b "$bin" 2>/dev/null || echo static) in
*dynamically*) echo "build-image.sh: $bin is dynamically linked; the image has no libc (CGO_ENABLED=0)" >&2; exit 1 ;;
esac
arch=$(go env GOARCH 2>/dev/null || uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/')

w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
mkdir -p "$w/rootfs" "$w/img"
install -m 0755 "$bin" "$w/rootfs/eni-cni"
# Fixed order, owner and times: the layer's digest depends on the binary only.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=posix \
	--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
	-C "$w/rootfs" -cf "$w/layer.tar" eni-cni
layer_sha=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
mkdir -p "$w/img/$layer_sha"
mv "$w/layer.tar" "$w/img/$layer_sha/layer.tar"
jq -cn --arg arch "$arch" --arg diff "sha256:$layer_sha" --arg version "$version" '{
	architecture: $arch, os: "linux", created: "1970-01-01T00:00:00Z",
	config: {
		Entrypoint: ["/eni-cni"], Cmd: ["idle"], WorkingDir: "/",
		Labels: {
			"org.opencontainers.image.title": "eni-cni",
			"org.opencontainers.image.description": "daemonless CNI plugin for Kubernetes on EC2: eni-cni install --root /host, then eni-cni idle",
			"org.opencontainers.image.version": $version
		}
	},
	rootfs: { type: "layers", diff_ids: [$diff] },
	history: [ { created: "1970-01-01T00:00:00Z", created_by: "eni-cni scripts/k8s/build-image.sh" } ]
}' >"$w/config.json"
config_sha=$(sha256sum "$w/config.json" | cut -d' ' -f1)
mv "$w/config.json" "$w/img/$config_sha.json"
jq -cn --arg cfg "$config_sha.json" --arg tag "$tag" --arg layer "$layer_sha/layer.tar" \
	'[ { Config: $cfg, RepoTags: [$tag], Layers: [$layer] } ]' >"$w/img/manifest.json"
mkdir -p "$(dirname "$out")"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$w/img" -cf "$out.new" \
	manifest.json "$config_sha.json" "$layer_sha"
mv "$out.new" "$out"
echo "$out: $tag ($(du -h "$out" | cut -f1), layer sha256:${layer_sha:0:12})"
