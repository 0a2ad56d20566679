#!/usr/bin/env bash
# Makes sure the commands a demo runs are here, installing the Debian
# packages that carry the missing ones (as scripts/install-test-deps.sh does
# for `make test`): a fresh Debian machine or image has neither ip, ping nor
# jq, and the README's first command must run to its end there. Idempotent:
# with every command present it installs nothing and prints nothing.
# Usage: scripts/demo-deps.sh COMMAND...
set -euo pipefail

declare -A PKG=([ip]=iproute2 [ping]=iputils-ping [jq]=jq [curl]=curl [nsenter]=util-linux [sha256sum]=coreutils)
missing=() pkgs=()
for c in "$@"; do
	command -v "$c" >/dev/null 2>&1 && continue
	missing+=("$c")
	[ -n "${PKG[$c]:-}" ] && pkgs+=("${PKG[$c]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ ${#pkgs[@]} -ne ${#missing[@]} ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "demo: missing ${missing[*]}; install them (Debian: apt-get install ${pkgs[*]})" >&2
	exit 1
fi
echo "demo: installing ${pkgs[*]} for ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Straight away if the package lists know them, else update first (a fresh
# machine or image has empty lists).
if ! apt-cache show "${pkgs[@]}" >/dev/null 2>&1 || ! apt-get install -y --no-install-recommends "${pkgs[@]}" >/dev/null; then
	apt-get update >/dev/null
	apt-get install -y --no-install-recommends "${pkgs[@]}" >/dev/null
fi
for c in "${missing[@]}"; do
	command -v "$c" >/dev/null 2>&1 || { echo "demo: $c still missing after installing ${pkgs[*]}" >&2; exit 1; }
done
