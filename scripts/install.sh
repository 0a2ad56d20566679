#!/usr/bin/env bash
# Installs eni-cni on a node, or removes it. A thin wrapper around the
# binary's own `eni-cni install` / `eni-cni uninstall`, which need neither
# this script nor a shell (the DaemonSet image runs them directly); see
# `eni-cni install --help` for every flag.
#
#   scripts/install.sh [BINARY] --pool ec2 [--warm-ip-target N --max-enis N --snat ...]
#   scripts/install.sh [BINARY] --pool static --ranges 10.244.1.0/24 [--mtu 1500]
#   scripts/install.sh [BINARY] --root DIR ...        # into an image tree: nothing enabled or started here
#   scripts/install.sh [BINARY] --dry-run ...         # print what would be done, change nothing
#   scripts/install.sh [BINARY] --uninstall [--purge] [--force] [--root DIR] [--dry-run]
#
# BINARY defaults to bin/eni-cni (make build). Older environment settings
# still work: DESTDIR (= --root), CONFLIST (= --conflist), NO_TIMERS=1
# (= --timers none), CNI_BIN_DIR (= --bin-dir), CNI_CONF_DIR (= --conf-dir).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../bin/eni-cni
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
	bin=$1
	shift
fi
verb=install
args=()
for a in "$@"; do
	case $a in
	--uninstall) verb=uninstall ;;
	*) args+=("$a") ;;
	esac
done
[ -x "$bin" ] || { echo "install.sh: $bin is not built (make build)" >&2; exit 1; }
pre=()
[ -n "${DESTDIR:-}" ] && pre+=(--root "$DESTDIR")
[ -n "${CNI_BIN_DIR:-}" ] && pre+=(--bin-dir "$CNI_BIN_DIR")
[ -n "${CNI_CONF_DIR:-}" ] && pre+=(--conf-dir "$CNI_CONF_DIR")
if [ $verb = install ]; then
	[ -n "${CONFLIST:-}" ] && pre+=(--conflist "$CONFLIST")
	[ "${NO_TIMERS:-}" = 1 ] && pre+=(--timers none)
fi
exec "$bin" "$verb" ${pre[@]+"${pre[@]}"} ${args[@]+"${args[@]}"}
