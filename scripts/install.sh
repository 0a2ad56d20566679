#!/usr/bin/env bash
# Installs eni-cni on a node: the binary, a conflist (unless one exists) and
# the gc/warm timers (systemd if it runs, else a cron file).
# Usage: scripts/install.sh [path/to/eni-cni]
# Env: DESTDIR (prefix for a staged install), CNI_BIN_DIR, CNI_CONF_DIR,
#      CONFLIST (file to install as 10-eni-cni.conflist), NO_TIMERS=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../bin/eni-cni}
D=${DESTDIR:-}
bindir=$D${CNI_BIN_DIR:-/opt/cni/bin}
confdir=$D${CNI_CONF_DIR:-/etc/cni/net.d}
conflist=${CONFLIST:-$here/../testdata/10-pods.conflist}

[ -x "$bin" ] || { echo "install: $bin is not built (make build)" >&2; exit 1; }
install -d -m 0755 "$bindir" "$confdir"
# Replace atomically: a runtime may exec the plugin while we install.
install -m 0755 "$bin" "$bindir/.eni-cni.new" && mv -f "$bindir/.eni-cni.new" "$bindir/eni-cni"
echo "installed $bindir/eni-cni ($("$bindir/eni-cni" version))"
if ls "$confdir"/*.conflist >/dev/null 2>&1 && grep -l '"eni-cni"' "$confdir"/*.conflist >/dev/null 2>&1; then
	echo "kept the existing eni-cni conflist in $confdir"
else
	install -m 0644 "$conflist" "$confdir/10-eni-cni.conflist"
	echo "installed $confdir/10-eni-cni.conflist (edit pool settings before pods start)"
fi
install -d -m 0700 "$D/var/lib/eni-cni"

[ "${NO_TIMERS:-}" = 1 ] && exit 0
if [ -z "$D" ] && [ -d /run/systemd/system ]; then
	install -m 0644 "$here"/systemd/eni-cni-{gc,warm}.{service,timer} /etc/systemd/system/
	systemctl daemon-reload
	systemctl enable --now eni-cni-gc.timer eni-cni-warm.timer
	echo "enabled eni-cni-gc.timer and eni-cni-warm.timer"
else
	install -d -m 0755 "$D/etc/systemd/system" "$D/etc/cron.d"
	install -m 0644 "$here"/systemd/eni-cni-{gc,warm}.{service,timer} "$D/etc/systemd/system/"
	install -m 0644 "$here/systemd/eni-cni.cron" "$D/etc/cron.d/eni-cni"
	echo "systemd is not running: installed the units (for later) and $D/etc/cron.d/eni-cni"
fi
