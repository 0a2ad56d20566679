#!/usr/bin/env bash
# Installs what the eni-cni test suites need, offline except for Debian apt
# and the Go module proxy. Idempotent: anything already present at the right
# version is skipped. Quiet unless something fails; prints one line per thing
# it installs, with how long it took.
#
# Usage: scripts/install-test-deps.sh [--with-containerd2] [--with-kubelet] [--with-kubeadm] [--with-conformance] [--tools DIR] [--no-apt] [-v]
#
#   --with-containerd2  also build containerd v2 (containerd, ctr,
#                       containerd-shim-runc-v2) into $TOOLS/containerd2/bin
#                       (same as ENI_CNI_CONTAINERD2=1)
#   --with-kubelet      also build kubelet v1.34.2 from the module proxy into
#                       $TOOLS/kubelet-v1.34.2/kubelet (6-20 min once; then
#                       cached: same as ENI_CNI_KUBELET=1)
#   --with-kubeadm      also kubelet, and build kubeadm, kubectl, kube-apiserver,
#                       kube-controller-manager, kube-scheduler, kube-proxy
#                       (k8s.io/kubernetes v1.34.2, as kubelet), etcd v3.6.5 and
#                       CoreDNS v1.12.1 from the module proxy, and pack their
#                       images offline (scripts/e2e/kubeadm.sh; same as
#                       ENI_CNI_KUBEADM=1). Once: 15-40 min on top of kubelet's
#                       build cache; then cached (a second run: seconds)
#   --with-conformance  also build Kubernetes' e2e network tests (upstream's
#                       test/e2e test main of k8s.io/kubernetes v1.34.2 linking
#                       only test/e2e/network and test/e2e/common/network),
#                       agnhost, and the images those specs run, assembled from
#                       Debian packages (downloaded and unpacked, never
#                       installed here); scripts/e2e/conformance.sh runs them
#                       (same as ENI_CNI_CONFORMANCE=1). Once: 2-5 min with
#                       kubelet's build cache; then cached
#   --tools DIR         tools root (same as ENI_CNI_TOOLS; default /opt/eni-cni-test)
#   --no-apt            do not check or install Debian packages (ENI_CNI_SKIP_APT=1)
#   --check-runtime     only say whether a containerd or runc other than Debian's
#                       is here (exit 1, with what and why, if so); installs nothing
#   -v, --verbose       show build output as it happens
# Env: ENI_CNI_TOOLS, ENI_CNI_CONTAINERD2=1, ENI_CNI_KUBELET=1, ENI_CNI_KUBEADM=1, ENI_CNI_CONFORMANCE=1,
#   ENI_CNI_SKIP_APT=1 (as above);
#   ENI_CNI_FORCE_WRAPPER=1 builds Go tools through a throwaway wrapper module
#   (go get mod@version + go build -mod=mod) without trying "go install" first.
#
# Result (TOOLS=${ENI_CNI_TOOLS:-/opt/eni-cni-test}):
#   $TOOLS/bin/{ptp,host-local,loopback,portmap,tuning,bandwidth}   reference CNI plugins (static)
#   $TOOLS/bin/cnitool                             CNI CLI
#   $TOOLS/bin/crictl                              CRI CLI v1.30.0
#   $TOOLS/pause.tar                               docker-archive, tag localhost/eni-cni/pause:test
#   $TOOLS/containerd2/bin/...                     with --with-containerd2
#   $TOOLS/kubelet-v1.34.2/kubelet (+ kubelet.stamp)  with --with-kubelet
#   $TOOLS/kubeadm-v1.34.2/bin/{kubeadm,kubectl,kubelet,kube-*,etcd,coredns,pause,web}
#   $TOOLS/kubeadm-v1.34.2/images.tar (+ images.stamp)  with --with-kubeadm: one
#       docker-archive, tags localhost/eni-cni-kubeadm/<kubeadm's image>:<its tag>
#       (kubeadm's imageRepository: localhost/eni-cni-kubeadm) and
#       localhost/eni-cni/web:test (scripts/web); kube-proxy's image carries
#       this machine's iptables (Debian's, nft backend) and nft (nftables
#       mode), and their libraries
#   $TOOLS/conformance-v1.34.2/e2e-network.test (+ .stamp)  with --with-conformance
#   $TOOLS/conformance-v1.34.2/bin/{agnhost,pause,ginkgo}
#   $TOOLS/conformance-v1.34.2/images.tar (+ images.stamp): one docker-archive,
#       tags localhost/eni-cni-e2e/{agnhost:2.56,jessie-dnsutils:1.7,
#       busybox:1.37.0-1,nginx:1.14-4,pause:3.10.1}, the names and versions
#       v1.34.2's test/utils/image/manifest.go gives them
#   $TOOLS/conformance-v1.34.2/repo-list.yaml: the --kube-test-repo-list that
#       points the framework at those names
# plus apt: iproute2 iptables nftables iputils-ping jq curl containerd runc time yq, each
# only if missing. A container runtime that Debian's containerd/runc packages
# would replace or shadow (Docker's containerd.io, a hand-installed binary) is
# never touched: the script stops and says so (see check_runtime).
#
# Every Go tool is checked before anything is built (module version, or a
# stamp naming the recipe): a second run builds nothing.
set -euo pipefail

PLUGINS_MOD=github.com/containernetworking/plugins
PLUGINS_VER=v1.9.1
CNI_MOD=github.com/containernetworking/cni
CNI_VER=v1.3.1
CRITOOLS_MOD=sigs.k8s.io/cri-tools
CRITOOLS_VER=v1.30.0
K8S_STAGING_VER=v0.30.0
CONTAINERD2_MOD=github.com/containerd/containerd/v2
CONTAINERD2_VER=v2.4.2
KUBE_MOD=k8s.io/kubernetes
KUBE_VER=v1.34.2
KUBE_STAGING_VER=v0.34.2
PAUSE_TAG=localhost/eni-cni/pause:test
APT_PACKAGES=(iproute2 iptables nftables iputils-ping jq curl containerd runc time yq)
# Debian packages that carry a container runtime: each must be Debian's own
# or absent, never installed over another one.
RUNTIME_PACKAGES=(containerd runc)

TOOLS=${ENI_CNI_TOOLS:-/opt/eni-cni-test}
WITH_CONTAINERD2=${ENI_CNI_CONTAINERD2:-0}
WITH_KUBELET=${ENI_CNI_KUBELET:-0}
WITH_KUBEADM=${ENI_CNI_KUBEADM:-0}
WITH_CONFORMANCE=${ENI_CNI_CONFORMANCE:-0}
SKIP_APT=${ENI_CNI_SKIP_APT:-0}
VERBOSE=0
CHECK_ONLY=0

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

while [ $# -gt 0 ]; do
	case $1 in
	--with-containerd2) WITH_CONTAINERD2=1 ;;
	--with-kubelet) WITH_KUBELET=1 ;;
	--with-kubeadm) WITH_KUBEADM=1 ;;
	--with-conformance) WITH_CONFORMANCE=1 ;;
	--tools) TOOLS=$2; shift ;;
	--tools=*) TOOLS=${1#--tools=} ;;
	--no-apt) SKIP_APT=1 ;;
	--check-runtime) CHECK_ONLY=1 ;;
	-v | --verbose) VERBOSE=1 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "install-test-deps: unknown argument: $1" >&2; usage >&2; exit 2 ;;
	esac
	shift
done

deb_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# check_runtime: refuse, with the reason, to install Debian's containerd or
# runc on a machine that runs another build of them: Docker's containerd.io
# (it conflicts with them: apt would remove it, and Docker with it), or a
# binary in PATH that no Debian package of that name owns (a hand install,
# which the tests would pick up instead of Debian's).
check_runtime() {
	local p path owner bad=()
	for p in "${RUNTIME_PACKAGES[@]}"; do
		path=$(command -v "$p" 2>/dev/null) || continue
		owner=$(dpkg-query -S "$path" 2>/dev/null | head -n 1 | cut -d: -f1) || owner=
		if [ -z "$owner" ]; then
			owner=$(dpkg-query -S "$(readlink -f "$path")" 2>/dev/null | head -n 1 | cut -d: -f1) || owner=
		fi
		[ "$owner" = "$p" ] || bad+=("$path (${owner:+package $owner}${owner:-installed by hand, no package owns it})")
	done
	for p in containerd.io docker-ce moby-containerd moby-runc; do
		deb_installed "$p" && bad+=("package $p")
	done
	[ ${#bad[@]} -eq 0 ] && return 0
	{
		echo "install-test-deps: this machine has a container runtime that is not Debian's containerd/runc:"
		printf '  %s\n' "${bad[@]}"
		echo "The tests need Debian's containerd (1.6) and runc, and will not install them over another"
		echo "runtime (apt would replace or shadow it). Run the tests on a machine or VM without it, or,"
		echo "to use what is installed at your own risk, pass --no-apt (ENI_CNI_SKIP_APT=1)."
	} >&2
	return 1
}

if [ "$CHECK_ONLY" = 1 ]; then
	check_runtime && echo "install-test-deps: no foreign containerd or runc here"
	exit
fi

case $TOOLS in /*) ;; *) TOOLS=$PWD/$TOOLS ;; esac
BIN=$TOOLS/bin
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

mkdir -p "$BIN"
# One installer at a time per tools dir (test suites may call us in parallel).
exec 9>"$TOOLS/.install.lock"
flock 9

WORK=$(mktemp -d "${TMPDIR:-/tmp}/eni-cni-deps.XXXXXX")
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
LOG=$WORK/step.log

# run_step LABEL CMD...: run CMD with its output in a log (shown on failure,
# or live with -v) and print "installed LABEL in N.Ns".
run_step() {
	local label=$1 start end rc=0
	shift
	start=$EPOCHREALTIME
	# In the background, not in an "||" list, so that set -e holds inside.
	if [ "$VERBOSE" = 1 ]; then
		"$@" > >(tee "$LOG" >&2) 2>&1 &
	else
		"$@" >"$LOG" 2>&1 &
	fi
	wait $! || rc=$?
	end=$EPOCHREALTIME
	if [ "$rc" != 0 ]; then
		echo "install-test-deps: FAILED: $label (exit $rc); last output:" >&2
		tail -n 40 "$LOG" >&2
		exit "$rc"
	fi
	awk -v l="$label" -v s="$start" -v e="$end" 'BEGIN { printf "installed %s in %.1fs\n", l, e - s }'
}

# has_go_mod BIN MOD VER: BIN exists and was built from MOD at VER (as the
# main module or as a dependency of a wrapper module).
has_go_mod() {
	[ -x "$1" ] || return 1
	go version -m "$1" 2>/dev/null | awk -v m="$2" -v v="$3" '
		($1 == "mod" || $1 == "dep") && $2 == m && $3 == v { ok = 1 }
		END { exit !ok }'
}

# go_build_tools MOD VER OUTDIR PKG...: build packages of MOD@VER into OUTDIR.
# Tries "go install pkg@ver" first; if the proxy refuses what that needs
# (e.g. "loading deprecation"), builds from a throwaway wrapper module.
go_build_tools() {
	local mod=$1 ver=$2 out=$3 pkg w
	shift 3
	local args=()
	for pkg in "$@"; do args+=("$pkg@$ver"); done
	if [ "${ENI_CNI_FORCE_WRAPPER:-0}" != 1 ] && GOBIN=$out go install "${GOINSTALL_FLAGS[@]}" "${args[@]}"; then
		return 0
	fi
	echo "building $mod@$ver through a wrapper module" >&2
	w=$WORK/wrap-${mod//\//_}
	rm -rf "$w" && mkdir -p "$w"
	(
		cd "$w"
		go mod init eni-cni-test-tools-wrapper
		go get "$mod@$ver"
		for pkg in "$@"; do
			go build -mod=mod "${GOINSTALL_FLAGS[@]}" -o "$out/${pkg##*/}" "$pkg"
		done
	)
}

go_build_static() {
	export CGO_ENABLED=0
	go_build_tools "$@"
}

# ---------------------------------------------------------------- apt
# apt_removes PKG...: the packages "apt-get install PKG..." would remove.
apt_removes() { apt-get -s install --no-install-recommends "$@" 2>/dev/null | awk '$1 == "Remv" { print $2 }'; }

install_apt() {
	local missing=() p gone
	check_runtime || exit 1
	for p in "${APT_PACKAGES[@]}"; do
		deb_installed "$p" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	# Installing only what is missing must never take anything away.
	gone=$(apt_removes "${missing[@]}")
	if [ -n "$gone" ]; then
		echo "install-test-deps: apt-get install ${missing[*]} would remove: $(tr '\n' ' ' <<<"$gone"); not doing it" >&2
		exit 1
	fi
	do_apt() {
		export DEBIAN_FRONTEND=noninteractive
		if ! apt-get install -y --no-install-recommends "${missing[@]}"; then
			apt-get update
			apt-get install -y --no-install-recommends "${missing[@]}"
		fi
	}
	# Install straight away if the package lists know the packages, else
	# update first (a fresh machine has empty lists).
	do_apt_update_first() {
		export DEBIAN_FRONTEND=noninteractive
		apt-get update
		apt-get install -y --no-install-recommends "${missing[@]}"
	}
	if apt-cache show "${missing[@]}" >/dev/null 2>&1; then
		run_step "apt: ${missing[*]}" do_apt
	else
		run_step "apt: ${missing[*]}" do_apt_update_first
	fi
}

# ---------------------------------------------------------------- CNI
install_plugins() {
	local need=0 p
	for p in ptp host-local loopback portmap tuning bandwidth; do
		has_go_mod "$BIN/$p" "$PLUGINS_MOD" "$PLUGINS_VER" || need=1
	done
	[ $need = 1 ] || return 0
	run_step "CNI plugins ptp host-local loopback portmap tuning bandwidth $PLUGINS_VER -> $BIN" \
		go_build_static "$PLUGINS_MOD" "$PLUGINS_VER" "$BIN" \
		"$PLUGINS_MOD/plugins/main/ptp" "$PLUGINS_MOD/plugins/ipam/host-local" \
		"$PLUGINS_MOD/plugins/main/loopback" "$PLUGINS_MOD/plugins/meta/portmap" \
		"$PLUGINS_MOD/plugins/meta/tuning" "$PLUGINS_MOD/plugins/meta/bandwidth"
}

install_cnitool() {
	has_go_mod "$BIN/cnitool" "$CNI_MOD" "$CNI_VER" && return 0
	run_step "cnitool $CNI_VER -> $BIN" \
		go_build_static "$CNI_MOD" "$CNI_VER" "$BIN" "$CNI_MOD/cnitool"
}

# ---------------------------------------------------------------- crictl
build_crictl() {
	local src dst=$WORK/cri-tools k
	src=$(go mod download -json "$CRITOOLS_MOD@$CRITOOLS_VER" | jq -r '.Dir // empty')
	if [ -z "$src" ] || [ ! -d "$src" ]; then echo "go mod download $CRITOOLS_MOD@$CRITOOLS_VER gave no Dir" >&2; return 1; fi
	cp -r "$src" "$dst"
	chmod -R u+w "$dst"
	rm -rf "$dst/vendor"
	# k8s.io/<x> => k8s.io/kubernetes/staging/src/k8s.io/<x> v0.0.0-... : the
	# staging paths are not modules on the proxy; use the published k8s.io/<x>.
	sed -i -E "s#=> k8s\.io/kubernetes/staging/src/k8s\.io/([^ ]+) v[^ ]+#=> k8s.io/\1 $K8S_STAGING_VER#" "$dst/go.mod"
	if grep -q 'staging/src' "$dst/go.mod"; then
		echo "unrewritten staging replace in cri-tools go.mod:" >&2
		grep 'staging/src' "$dst/go.mod" >&2
		return 1
	fi
	k=$(awk '$1 == "module" { print $2 }' "$dst/go.mod")
	(cd "$dst" && CGO_ENABLED=0 go build -mod=mod -trimpath \
		-ldflags "-s -w -X $k/pkg/version.Version=$CRITOOLS_VER" \
		-o "$WORK/crictl" ./cmd/crictl)
	"$WORK/crictl" --version
	install -m 0755 "$WORK/crictl" "$BIN/crictl"
}

install_crictl() {
	if [ -x "$BIN/crictl" ] && "$BIN/crictl" --version 2>/dev/null | grep -qw "$CRITOOLS_VER"; then
		return 0
	fi
	run_step "crictl $CRITOOLS_VER -> $BIN" build_crictl
}

# ---------------------------------------------------------------- pause image
# The stamp names everything the image depends on; same stamp = same image.
pause_stamp() {
	{ sha256sum "$REPO/scripts/pause/main.go" | cut -d' ' -f1; go env GOVERSION GOARCH; echo "$PAUSE_TAG"; } | sha256sum | cut -d' ' -f1
}

build_pause_image() {
	local w=$WORK/pause arch layer_sha config_sha
	mkdir -p "$w/mod" "$w/rootfs" "$w/img"
	# Own throwaway module: independent of the repo's go.mod, which others edit.
	cp "$REPO/scripts/pause/main.go" "$w/mod/main.go"
	(cd "$w/mod" && go mod init eni-cni-test-pause >/dev/null 2>&1 &&
		CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$w/rootfs/pause" .)
	chmod 0755 "$w/rootfs/pause"
	arch=$(go env GOARCH)
	# Reproducible layer: fixed order, owner and times.
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=posix \
		--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
		-C "$w/rootfs" -cf "$w/layer.tar" pause
	layer_sha=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
	mkdir -p "$w/img/$layer_sha"
	mv "$w/layer.tar" "$w/img/$layer_sha/layer.tar"
	jq -cn --arg arch "$arch" --arg diff "sha256:$layer_sha" '{
		architecture: $arch, os: "linux", created: "1970-01-01T00:00:00Z",
		config: { Entrypoint: ["/pause"], WorkingDir: "/" },
		rootfs: { type: "layers", diff_ids: [$diff] },
		history: [ { created: "1970-01-01T00:00:00Z", created_by: "eni-cni scripts/install-test-deps.sh" } ]
	}' >"$w/config.json"
	config_sha=$(sha256sum "$w/config.json" | cut -d' ' -f1)
	mv "$w/config.json" "$w/img/$config_sha.json"
	jq -cn --arg cfg "$config_sha.json" --arg tag "$PAUSE_TAG" --arg layer "$layer_sha/layer.tar" \
		'[ { Config: $cfg, RepoTags: [$tag], Layers: [$layer] } ]' >"$w/img/manifest.json"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
		-C "$w/img" -cf "$w/pause.tar" .
	mv "$w/pause.tar" "$TOOLS/pause.tar.new"
	mv "$TOOLS/pause.tar.new" "$TOOLS/pause.tar"
	pause_stamp >"$TOOLS/pause.stamp"
}

install_pause() {
	if [ -s "$TOOLS/pause.tar" ] && [ "$(cat "$TOOLS/pause.stamp" 2>/dev/null)" = "$(pause_stamp)" ]; then
		return 0
	fi
	run_step "pause image $PAUSE_TAG -> $TOOLS/pause.tar" build_pause_image
}

# ---------------------------------------------------------------- containerd v2
install_containerd2() {
	local out=$TOOLS/containerd2/bin need=0 b
	for b in containerd ctr containerd-shim-runc-v2; do
		has_go_mod "$out/$b" "$CONTAINERD2_MOD" "$CONTAINERD2_VER" || need=1
	done
	[ $need = 1 ] || return 0
	mkdir -p "$out"
	local saved=("${GOINSTALL_FLAGS[@]}")
	GOINSTALL_FLAGS=(-tags no_btrfs "${saved[@]}")
	run_step "containerd $CONTAINERD2_VER (containerd ctr containerd-shim-runc-v2) -> $out" \
		go_build_tools "$CONTAINERD2_MOD" "$CONTAINERD2_VER" "$out" \
		"$CONTAINERD2_MOD/cmd/containerd" "$CONTAINERD2_MOD/cmd/ctr" \
		"$CONTAINERD2_MOD/cmd/containerd-shim-runc-v2"
	GOINSTALL_FLAGS=("${saved[@]}")
}

# ---------------------------------------------------------------- kubelet
KUBELET_DIR=$TOOLS/kubelet-$KUBE_VER

# kubelet_stamp: the recipe; same stamp = same binary.
kubelet_stamp() {
	echo "$KUBE_MOD $KUBE_VER cmd/kubelet, staging replaced by k8s.io/* $KUBE_STAGING_VER, CGO_ENABLED=0 $(go env GOOS)/$(go env GOARCH)"
}

# kubelet_from_recipe BIN: BIN is a kubelet built from $KUBE_MOD with the
# staging modules replaced by the published $KUBE_STAGING_VER ones: what
# the build info shows even when the main module's version is "(devel)"
# (built from a copy of the module, as here).
kubelet_from_recipe() {
	[ -x "$1" ] || return 1
	go version -m "$1" 2>/dev/null | awk -v v="$KUBE_STAGING_VER" '
		$1 == "path" && $2 == "k8s.io/kubernetes/cmd/kubelet" { path = 1 }
		($1 == "dep" || $1 == "=>") && $2 == "k8s.io/kubelet" && $3 == v { dep = 1 }
		END { exit !(path && dep) }'
}

# kube_copy_module DST: k8s.io/kubernetes@$KUBE_VER copied out of the module
# cache into DST, writable, its vendor/ and go.work dropped, and each
# "k8s.io/<x> => ./staging/src/k8s.io/<x>" replace pointed at the published
# k8s.io/<x> module of the same release.
kube_copy_module() {
	local src dst=$1 n
	src=$(go mod download -json "$KUBE_MOD@$KUBE_VER" | jq -r '.Dir // empty')
	if [ -z "$src" ] || [ ! -d "$src" ]; then echo "go mod download $KUBE_MOD@$KUBE_VER gave no Dir" >&2; return 1; fi
	cp -r "$src" "$dst"
	chmod -R u+w "$dst"
	rm -rf "$dst/vendor" "$dst/go.work" "$dst/go.work.sum"
	sed -i -E "s#^(\s*)k8s\.io/([^ ]+) => \./staging/src/k8s\.io/[^ ]+\$#\1k8s.io/\2 => k8s.io/\2 $KUBE_STAGING_VER#" "$dst/go.mod"
	n=$(grep -c 'staging/src' "$dst/go.mod" || true)
	if [ "$n" != 0 ]; then
		echo "unrewritten staging replaces in kubernetes go.mod:" >&2
		grep 'staging/src' "$dst/go.mod" >&2
		return 1
	fi
}

# kube_go_build MODDIR OUT PKG: one command of that copy, static, with the
# version stamped as the release build does (same flags for every command:
# they share the build cache).
kube_go_build() {
	local pkg=k8s.io/component-base/version major minor
	major=${KUBE_VER#v}
	minor=${major#*.}
	major=${major%%.*} minor=${minor%%.*}
	(cd "$1" && GOWORK=off CGO_ENABLED=0 go build -mod=mod -trimpath \
		-ldflags "-s -w -X $pkg.gitVersion=$KUBE_VER -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean" \
		-o "$2" "$3")
}

# build_kubelet: the recipe of notes/e2e-environment.md.
build_kubelet() {
	local dst=$WORK/kubernetes
	kube_copy_module "$dst" || return 1
	mkdir -p "$KUBELET_DIR"
	kube_go_build "$dst" "$KUBELET_DIR/kubelet.new" ./cmd/kubelet
	"$KUBELET_DIR/kubelet.new" --version
	kubelet_from_recipe "$KUBELET_DIR/kubelet.new" || { echo "the new kubelet does not show the recipe's build info" >&2; return 1; }
	mv "$KUBELET_DIR/kubelet.new" "$KUBELET_DIR/kubelet"
	kubelet_stamp >"$KUBELET_DIR/kubelet.stamp"
}

install_kubelet() {
	local bin=$KUBELET_DIR/kubelet
	if [ -x "$bin" ] && [ "$(cat "$KUBELET_DIR/kubelet.stamp" 2>/dev/null)" = "$(kubelet_stamp)" ]; then
		return 0
	fi
	# Built by the same recipe without a stamp (e.g. by hand): keep it.
	if kubelet_from_recipe "$bin"; then
		kubelet_stamp >"$KUBELET_DIR/kubelet.stamp"
		return 0
	fi
	run_step "kubelet $KUBE_VER -> $bin" build_kubelet
}

# ---------------------------------------------------------------- kubeadm
# A kubeadm control plane without a registry: kubeadm, kubectl and the
# control-plane commands from the same k8s.io/kubernetes copy as kubelet, etcd
# from the module proxy, and their images packed offline into one
# docker-archive under $KUBEADM_REPO (kubeadm's imageRepository), with the
# tags `kubeadm config images list` names.
KUBEADM_DIR=$TOOLS/kubeadm-$KUBE_VER
# kubelet again: kubeadm's preflight runs `kubelet --version` and needs the
# release's version, which the version ldflags of kube_go_build stamp (a
# kubelet built without them says v0.0.0-master); only the link is redone.
KUBEADM_CMDS=(kubeadm kubectl kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
ETCD_MOD=go.etcd.io/etcd/server/v3
ETCD_VER=v3.6.5         # kubeadm 1.34: constants.SupportedEtcdVersion[34] = "3.6.5-0"
ETCD_TAG=3.6.5-0
COREDNS_MOD=github.com/coredns/coredns
COREDNS_VER=v1.12.1     # kubeadm 1.34: constants.CoreDNSVersion
KUBEADM_PAUSE_TAG=3.10.1 # kubeadm 1.34: constants.PauseVersion
KUBEADM_REPO=localhost/eni-cni-kubeadm
WEB_TAG=localhost/eni-cni/web:test

# kube_cmd_from_recipe BIN CMD: BIN is k8s.io/kubernetes/cmd/CMD built with
# the staging modules replaced by the published $KUBE_STAGING_VER ones.
kube_cmd_from_recipe() {
	[ -x "$1" ] || return 1
	go version -m "$1" 2>/dev/null | awk -v p="k8s.io/kubernetes/cmd/$2" -v v="$KUBE_STAGING_VER" '
		$1 == "path" && $2 == p { path = 1 }
		$1 == "=>" && $2 == "k8s.io/apimachinery" && $3 == v { dep = 1 }
		END { exit !(path && dep) }'
}

build_kube_cmds() {
	local dst=$WORK/kubernetes c
	kube_copy_module "$dst" || return 1
	mkdir -p "$KUBEADM_DIR/bin"
	for c in "$@"; do
		kube_go_build "$dst" "$KUBEADM_DIR/bin/$c.new" "./cmd/$c"
		kube_cmd_from_recipe "$KUBEADM_DIR/bin/$c.new" "$c" || { echo "$c: not the recipe's build info" >&2; return 1; }
		mv "$KUBEADM_DIR/bin/$c.new" "$KUBEADM_DIR/bin/$c"
	done
}

# build_etcd: etcd's main package is the server module itself, whose go.mod
# replaces its sibling modules by relative paths: go install refuses that, so
# it is built as a dependency of a throwaway module (the replaces then do not
# apply and the published siblings of the same version are used).
build_etcd() {
	local w=$WORK/etcd
	mkdir -p "$w" "$KUBEADM_DIR/bin"
	(cd "$w" && go mod init eni-cni-test-etcd-wrapper && go get "$ETCD_MOD@$ETCD_VER" &&
		CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags '-s -w' -o "$KUBEADM_DIR/bin/etcd.new" "$ETCD_MOD")
	"$KUBEADM_DIR/bin/etcd.new" --version
	mv "$KUBEADM_DIR/bin/etcd.new" "$KUBEADM_DIR/bin/etcd"
}

# build_coredns: CoreDNS as a dependency of a throwaway module, like etcd.
build_coredns() {
	local w=$WORK/coredns
	mkdir -p "$w" "$KUBEADM_DIR/bin"
	(cd "$w" && go mod init eni-cni-test-coredns-wrapper && go get "$COREDNS_MOD@$COREDNS_VER" &&
		CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags '-s -w' -o "$KUBEADM_DIR/bin/coredns.new" "$COREDNS_MOD")
	"$KUBEADM_DIR/bin/coredns.new" -version
	mv "$KUBEADM_DIR/bin/coredns.new" "$KUBEADM_DIR/bin/coredns"
}

# iptables_rootfs DIR: the host's iptables (Debian's package, nft backend)
# copied into DIR with the libraries it loads, as the official kube-proxy
# image carries its own: kube-proxy runs iptables-restore and iptables-save.
iptables_rootfs() {
	local d=$1 multi xdir f l x
	multi=$(readlink -f "$(command -v xtables-nft-multi)")
	xdir=$(dirname "$(readlink -f "$(ldd "$multi" | awk '$1 == "libxtables.so.12" { print $3 }')")")/xtables
	[ -d "$xdir" ] || { echo "no xtables extension dir next to libxtables ($xdir)" >&2; return 1; }
	mkdir -p "$d/usr/sbin" "$d/etc" "$d$xdir"
	cp "$multi" "$d/usr/sbin/xtables-nft-multi"
	for x in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
		ln -sf xtables-nft-multi "$d/usr/sbin/$x"
	done
	cp "$xdir"/*.so "$d$xdir/"
	# The libraries of the binary and of every extension it may dlopen, and ld.so.
	for l in $(for f in "$multi" "$xdir"/*.so; do ldd "$f"; done |
		awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u); do
		mkdir -p "$d$(dirname "$l")"
		cp -L "$l" "$d$l"
	done
	cp /etc/ld.so.cache "$d/etc/"
	chroot "$d" /usr/sbin/iptables-save --version
}

# nft_rootfs DIR: the host's nft (Debian's nftables) copied into DIR with the
# libraries it loads: kube-proxy's nftables mode runs nft, as the official
# image carries it.
nft_rootfs() {
	local d=$1 nft l
	nft=$(readlink -f "$(command -v nft)") || { echo "nft not installed (Debian's nftables)" >&2; return 1; }
	mkdir -p "$d/usr/sbin" "$d/etc"
	cp "$nft" "$d/usr/sbin/nft"
	for l in $(ldd "$nft" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u); do
		mkdir -p "$d$(dirname "$l")"
		cp -L "$l" "$d$l"
	done
	cp /etc/ld.so.cache "$d/etc/"
	chroot "$d" /usr/sbin/nft --version
}

# build_small_static NAME SRCDIR [OUTDIR]: a one-file static Go program of
# this repository (scripts/pause, scripts/web), in its own throwaway module so
# that it does not depend on the repository's go.mod; into OUTDIR (default
# $KUBEADM_DIR/bin).
build_small_static() {
	local w=$WORK/$1 out=${3:-$KUBEADM_DIR/bin}
	rm -rf "$w" # built once per OUTDIR: kubeadm's and conformance's pause
	mkdir -p "$w" "$out"
	cp "$2/main.go" "$w/main.go"
	(cd "$w" && go mod init "eni-cni-test-$1" >/dev/null 2>&1 &&
		CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out/$1" .)
}

# docker_archive OUT TAG=DIR:ENTRYPOINT...: one docker-archive tar holding an
# image per argument, each one layer: DIR's files (root-owned, time 0), the
# entrypoint and a PATH. Reproducible, like the pause image above. An
# ENTRYPOINT that starts with "{" is the image's config as JSON instead
# (Entrypoint, Cmd, User...; WorkingDir and PATH are added).
docker_archive() {
	local out=$1 w=$WORK/images a tag dir entry cfg layer_sha config_sha arch manifest='[]'
	shift
	arch=$(go env GOARCH)
	rm -rf "$w" && mkdir -p "$w/img"
	for a in "$@"; do
		tag=${a%%=*} dir=${a#*=}
		entry=${dir#*:} dir=${dir%%:*}
		case $entry in
		"{"*) cfg=$entry ;;
		*) cfg=$(jq -cn --arg e "$entry" '{ Entrypoint: [$e] }') ;;
		esac
		tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --format=posix \
			--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
			-C "$dir" -cf "$w/layer.tar" .
		layer_sha=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
		mkdir -p "$w/img/$layer_sha"
		mv "$w/layer.tar" "$w/img/$layer_sha/layer.tar"
		jq -cn --arg arch "$arch" --arg diff "sha256:$layer_sha" --argjson cfg "$cfg" '{
			architecture: $arch, os: "linux", created: "1970-01-01T00:00:00Z",
			config: ($cfg + { WorkingDir: "/",
				Env: ["PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"] }),
			rootfs: { type: "layers", diff_ids: [$diff] },
			history: [ { created: "1970-01-01T00:00:00Z", created_by: "eni-cni scripts/install-test-deps.sh" } ]
		}' >"$w/config.json"
		config_sha=$(sha256sum "$w/config.json" | cut -d' ' -f1)
		mv "$w/config.json" "$w/img/$config_sha.json"
		manifest=$(jq -c --arg cfg "$config_sha.json" --arg tag "$tag" --arg layer "$layer_sha/layer.tar" \
			'. + [ { Config: $cfg, RepoTags: [$tag], Layers: [$layer] } ]' <<<"$manifest")
	done
	printf '%s\n' "$manifest" >"$w/img/manifest.json"
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$w/img" -cf "$out.new" .
	mv "$out.new" "$out"
}

# kubeadm_images_stamp: the binaries and tags the archive is made of.
kubeadm_images_stamp() {
	{
		(cd "$KUBEADM_DIR/bin" && sha256sum kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd coredns pause web)
		sha256sum "$(readlink -f "$(command -v xtables-nft-multi)")" "$(readlink -f "$(command -v nft)")"
		echo "$KUBEADM_REPO $KUBE_VER $ETCD_TAG $COREDNS_VER $KUBEADM_PAUSE_TAG $WEB_TAG"
	} | sha256sum | cut -d' ' -f1
}

build_kubeadm_images() {
	local r=$WORK/rootfs c
	for c in kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd; do
		mkdir -p "$r/$c/usr/local/bin"
		cp "$KUBEADM_DIR/bin/$c" "$r/$c/usr/local/bin/$c"
	done
	iptables_rootfs "$r/kube-proxy"
	nft_rootfs "$r/kube-proxy"
	mkdir -p "$r/pause" "$r/web" "$r/coredns"
	cp "$KUBEADM_DIR/bin/coredns" "$r/coredns/coredns"
	cp "$KUBEADM_DIR/bin/pause" "$r/pause/pause"
	cp "$KUBEADM_DIR/bin/web" "$r/web/web"
	docker_archive "$KUBEADM_DIR/images.tar" \
		"$KUBEADM_REPO/kube-apiserver:$KUBE_VER=$r/kube-apiserver:/usr/local/bin/kube-apiserver" \
		"$KUBEADM_REPO/kube-controller-manager:$KUBE_VER=$r/kube-controller-manager:/usr/local/bin/kube-controller-manager" \
		"$KUBEADM_REPO/kube-scheduler:$KUBE_VER=$r/kube-scheduler:/usr/local/bin/kube-scheduler" \
		"$KUBEADM_REPO/kube-proxy:$KUBE_VER=$r/kube-proxy:/usr/local/bin/kube-proxy" \
		"$KUBEADM_REPO/etcd:$ETCD_TAG=$r/etcd:/usr/local/bin/etcd" \
		"$KUBEADM_REPO/coredns:$COREDNS_VER=$r/coredns:/coredns" \
		"$KUBEADM_REPO/pause:$KUBEADM_PAUSE_TAG=$r/pause:/pause" \
		"$WEB_TAG=$r/web:/web"
	kubeadm_images_stamp >"$KUBEADM_DIR/images.stamp"
}

install_kubeadm() {
	local c need=()
	for c in "${KUBEADM_CMDS[@]}"; do
		kube_cmd_from_recipe "$KUBEADM_DIR/bin/$c" "$c" || need+=("$c")
	done
	[ ${#need[@]} = 0 ] || run_step "${need[*]} $KUBE_VER -> $KUBEADM_DIR/bin" build_kube_cmds "${need[@]}"
	has_go_mod "$KUBEADM_DIR/bin/etcd" "$ETCD_MOD" "$ETCD_VER" ||
		run_step "etcd $ETCD_VER -> $KUBEADM_DIR/bin/etcd" build_etcd
	has_go_mod "$KUBEADM_DIR/bin/coredns" "$COREDNS_MOD" "$COREDNS_VER" ||
		run_step "coredns $COREDNS_VER -> $KUBEADM_DIR/bin/coredns" build_coredns
	# Cheap (seconds): rebuilt every time, so that they follow the sources.
	build_small_static pause "$REPO/scripts/pause" >"$LOG" 2>&1 || { cat "$LOG" >&2; exit 1; }
	build_small_static web "$REPO/scripts/web" >"$LOG" 2>&1 || { cat "$LOG" >&2; exit 1; }
	if [ -s "$KUBEADM_DIR/images.tar" ] && [ "$(cat "$KUBEADM_DIR/images.stamp" 2>/dev/null)" = "$(kubeadm_images_stamp)" ]; then
		return 0
	fi
	run_step "kubeadm images ($KUBEADM_REPO/*, $WEB_TAG) -> $KUBEADM_DIR/images.tar" build_kubeadm_images
}

# ---------------------------------------------------------------- conformance
# Kubernetes' own e2e network tests, offline: upstream's test/e2e test main
# linking only the network specs, agnhost, the images those specs run, and a
# --kube-test-repo-list naming them (scripts/e2e/conformance.sh).
CONF_DIR=$TOOLS/conformance-$KUBE_VER
CONF_REPO=localhost/eni-cni-e2e # the repo list's promoterE2eRegistry and gcRegistry
CONF_AGNHOST_VER=2.56           # test/utils/image/manifest.go
# Upstream's agnhost is Alpine with these (its Dockerfile), busybox for the
# rest of the commands and dash as sh; jessie-dnsutils (dig, getent) uses the
# same root file system here.
CONF_AGNHOST_PKGS=(busybox-static dash bash curl netcat-openbsd iproute2 bind9-dnsutils libc-bin)
CONF_BUSYBOX_PKGS=(busybox-static)
CONF_NGINX_PKGS=(nginx-light busybox-static)
# The test/e2e/<x> spec packages upstream's e2e_test.go links that this copy
# drops: everything but network (common/network comes through common).
CONF_DROPPED_SPECS='apimachinery|apps|architecture|auth|autoscaling|cloud|common|dra|instrumentation|kubectl|lifecycle|lifecycle/bootstrap|node|scheduling|storage|storage/csimock|storage/external|windows'

# conf_test_stamp: the recipe of the test binary; same stamp = same binary.
conf_test_stamp() {
	echo "$KUBE_MOD $KUBE_VER test/e2e with only test/e2e/network and test/e2e/common/network, no cloud providers, staging replaced by k8s.io/* $KUBE_STAGING_VER, CGO_ENABLED=0 $(go env GOOS)/$(go env GOARCH)"
}

# conf_trim_specs DIR: in the module copy DIR, upstream's e2e test main with
# only the network spec packages linked: the other spec packages' imports
# removed from e2e_test.go, common's node and storage from common/imports.go
# (package e2e imports common itself), and providers.go (the cloud
# providers: "skeleton" and "local" live in the framework). Fails if
# upstream's files no longer look as expected.
conf_trim_specs() {
	local e=$1/test/e2e n
	sed -i -E "\#^\s*_ \"k8s\.io/kubernetes/test/e2e/($CONF_DROPPED_SPECS)\"\$#d" "$e/e2e_test.go"
	sed -i -E '\#^\s*_ "k8s\.io/kubernetes/test/e2e/common/(node|storage)"$#d' "$e/common/imports.go"
	rm "$e/providers.go"
	n=$(grep -cE '^\s*_ "k8s\.io/kubernetes/test/e2e/(network|common/network)"$' "$e/e2e_test.go" "$e/common/imports.go" | awk -F: '{ s += $2 } END { print s }')
	[ "$n" = 2 ] || { echo "e2e_test.go and common/imports.go do not import network and common/network once each" >&2; return 1; }
	if grep -E '^\s*_ "k8s\.io/kubernetes/test/e2e/[a-z]' "$e/e2e_test.go" "$e/common/imports.go" |
		grep -vE 'e2e/(network|common/network|feature|framework/.*)"$'; then
		echo "spec packages left in the trimmed test main (above)" >&2
		return 1
	fi
}

# conf_build_in_copy OUT PKG [GO TEST]: PKG of the trimmed module copy, built
# static (as a test binary with "test"), the copy made on first use.
conf_build_in_copy() {
	local dst=$WORK/kubernetes-e2e verb=build
	[ "${3:-}" != test ] || verb="test -c"
	if [ ! -d "$dst" ]; then
		kube_copy_module "$dst" || return 1
		conf_trim_specs "$dst" || return 1
	fi
	mkdir -p "$(dirname "$1")"
	# shellcheck disable=SC2086 # verb is one or two words
	(cd "$dst" && GOWORK=off CGO_ENABLED=0 go $verb -mod=mod -trimpath \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VER -X main.Version=$CONF_AGNHOST_VER" \
		-o "$1" "$2")
}

build_conformance_test() {
	conf_build_in_copy "$CONF_DIR/e2e-network.test.new" ./test/e2e test
	"$CONF_DIR/e2e-network.test.new" --version
	mv "$CONF_DIR/e2e-network.test.new" "$CONF_DIR/e2e-network.test"
	conf_test_stamp >"$CONF_DIR/e2e-network.test.stamp"
}

# conf_ginkgo_ver: the ginkgo the e2e binary links (the kubernetes module's
# go.mod): the CLI that runs it in parallel must speak its protocol.
conf_ginkgo_ver() {
	local mod
	mod=$(go mod download -json "$KUBE_MOD@$KUBE_VER" | jq -r '.GoMod // empty')
	awk '$1 == "github.com/onsi/ginkgo/v2" { print $2; exit }' "$mod"
}

build_ginkgo() {
	local ver
	ver=$(conf_ginkgo_ver)
	[ -n "$ver" ] || { echo "no github.com/onsi/ginkgo/v2 in $KUBE_MOD@$KUBE_VER's go.mod" >&2; return 1; }
	GOBIN=$CONF_DIR/bin CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/onsi/ginkgo/v2/ginkgo@$ver"
	"$CONF_DIR/bin/ginkgo" version
	echo "github.com/onsi/ginkgo/v2/ginkgo $ver" >"$CONF_DIR/bin/ginkgo.stamp"
}

build_agnhost() {
	conf_build_in_copy "$CONF_DIR/bin/agnhost.new" ./test/images/agnhost
	"$CONF_DIR/bin/agnhost.new" --version
	mv "$CONF_DIR/bin/agnhost.new" "$CONF_DIR/bin/agnhost"
	echo "$KUBE_MOD $KUBE_VER test/images/agnhost $CONF_AGNHOST_VER" >"$CONF_DIR/bin/agnhost.stamp"
}

# deb_rootfs DIR PKG...: DIR holds PKG and all they depend on (Depends and
# Pre-Depends, recursively) as Debian ships them: downloaded and unpacked
# with dpkg-deb -x, never installed on this machine. No maintainer script
# runs, so what they would make is made here: the alternatives' links,
# busybox's applet links (for the commands no package brought), the loader cache, users and groups,
# /tmp, an nsswitch.conf that reads /etc/hosts (kubelet's) before DNS.
deb_rootfs() {
	local d=$1 debs=$WORK/debs pkgs p a have
	shift
	mkdir -p "$d" "$debs"
	pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances "$@" | grep -E '^[a-z0-9]' | sort -u)
	local get=()
	for p in $pkgs; do
		compgen -G "$debs/${p}_*.deb" >/dev/null || get+=("$p")
	done
	if [ ${#get[@]} -gt 0 ]; then
		# Stale package lists name versions the mirror no longer has: update once.
		(cd "$debs" && apt-get -o APT::Sandbox::User=root download "${get[@]}") || { apt-get update && (cd "$debs" && apt-get -o APT::Sandbox::User=root download "${get[@]}"); }
	fi
	for p in $pkgs; do
		dpkg-deb -x "$(compgen -G "$debs/${p}_*.deb" | head -n 1)" "$d"
	done
	# update-alternatives' links (postinst), for the alternatives these
	# packages carry; dash as sh where there is one: busybox's sh runs its
	# own applets before PATH (its nc has no -u, -z).
	for a in bin/sh:dash bin/nc:nc.openbsd usr/bin/awk:mawk; do
		[ ! -e "$d/$(dirname "${a%%:*}")/${a#*:}" ] || [ -e "$d/${a%%:*}" ] || ln -s "${a#*:}" "$d/${a%%:*}"
	done
	if [ -x "$d/bin/busybox" ]; then
		for a in $("$d/bin/busybox" --list); do
			have=0
			for p in bin sbin usr/bin usr/sbin; do
				[ -e "$d/$p/$a" ] || [ -L "$d/$p/$a" ] && have=1
			done
			[ $have = 1 ] || ln -s busybox "$d/bin/$a"
		done
	fi
	mkdir -p "$d/etc" "$d/tmp" "$d/root" "$d/var/tmp" "$d/run"
	chmod 1777 "$d/tmp" "$d/var/tmp"
	# The users and groups of upstream's images (agnhost's 1000/50000).
	printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin' \
		'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' \
		'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin' >"$d/etc/passwd"
	printf '%s\n' 'root:x:0:' 'www-data:x:33:' 'user-defined-in-image:x:1000:' \
		'group-defined-in-image:x:50000:user-defined-in-image' 'nogroup:x:65534:' >"$d/etc/group"
	printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$d/etc/nsswitch.conf"
	printf '%s\n' '127.0.0.1 localhost' '::1 localhost' >"$d/etc/hosts" # kubelet mounts its own over it
	[ ! -e "$d/etc/ld.so.conf" ] || ldconfig -r "$d"
}

# conf_images_stamp: what the image archive is made of (binaries, package
# lists, tags, and this recipe's own code).
conf_images_stamp() {
	{
		(cd "$CONF_DIR/bin" && sha256sum agnhost pause)
		echo "$CONF_REPO ${CONF_AGNHOST_PKGS[*]} / ${CONF_NGINX_PKGS[*]} / ${CONF_BUSYBOX_PKGS[*]}"
		declare -f deb_rootfs build_conf_images docker_archive
	} | sha256sum | cut -d' ' -f1
}

build_conf_images() {
	local r=$WORK/conf-rootfs porter
	porter=$(go mod download -json "$KUBE_MOD@$KUBE_VER" | jq -r .Dir)/test/images/agnhost/porter
	deb_rootfs "$r/agnhost" "${CONF_AGNHOST_PKGS[@]}"
	cp "$CONF_DIR/bin/agnhost" "$r/agnhost/agnhost"
	ln -s agnhost "$r/agnhost/agnhost-2"
	cp "$porter/localhost.crt" "$porter/localhost.key" "$r/agnhost/"
	mkdir -p "$r/agnhost/uploads"
	# What the specs run in agnhost and jessie-dnsutils pods.
	for c in "dig -v" "curl --version" "nc -h 2>&1 | grep -q -- -z" "ip -V" "ss -V" "getent hosts localhost" "seq 1 1"; do
		chroot "$r/agnhost" /bin/sh -c "$c" >"$WORK/check.out" 2>&1 || { echo "agnhost image: '$c' fails:" >&2; cat "$WORK/check.out" >&2; return 1; }
	done
	deb_rootfs "$r/busybox" "${CONF_BUSYBOX_PKGS[@]}"
	deb_rootfs "$r/nginx" "${CONF_NGINX_PKGS[@]}"
	# nginx's postinst links the default site and makes its directories.
	ln -s ../sites-available/default "$r/nginx/etc/nginx/sites-enabled/default"
	mkdir -p "$r/nginx/var/www/html" "$r/nginx/var/log/nginx" "$r/nginx/var/lib/nginx"
	echo "nginx (eni-cni e2e image)" >"$r/nginx/var/www/html/index.html"
	chroot "$r/nginx" /usr/sbin/nginx -t
	mkdir -p "$r/pause"
	cp "$CONF_DIR/bin/pause" "$r/pause/pause"
	docker_archive "$CONF_DIR/images.tar" \
		"$CONF_REPO/agnhost:$CONF_AGNHOST_VER=$r/agnhost:{\"Entrypoint\":[\"/agnhost\"],\"Cmd\":[\"pause\"]}" \
		"$CONF_REPO/jessie-dnsutils:1.7=$r/agnhost:{\"Cmd\":[\"/bin/sh\"]}" \
		"$CONF_REPO/busybox:1.37.0-1=$r/busybox:{\"Cmd\":[\"sh\"]}" \
		"$CONF_REPO/nginx:1.14-4=$r/nginx:{\"Entrypoint\":[\"/usr/sbin/nginx\",\"-g\",\"daemon off;\"]}" \
		"$CONF_REPO/pause:3.10.1=$r/pause:/pause"
	conf_images_stamp >"$CONF_DIR/images.stamp"
}

# The framework's names for the images: test/utils/image/manifest.go
# (promoterE2eRegistry: agnhost, jessie-dnsutils, busybox, nginx;
# gcRegistry: pause). Every other registry keeps upstream's name: a spec
# that needs one of those images was not meant to run here.
write_conf_repo_list() {
	printf '%s\n' "# scripts/install-test-deps.sh --with-conformance: the images in images.tar" \
		"promoterE2eRegistry: $CONF_REPO" "gcRegistry: $CONF_REPO" >"$CONF_DIR/repo-list.yaml.new"
	mv "$CONF_DIR/repo-list.yaml.new" "$CONF_DIR/repo-list.yaml"
}

install_conformance() {
	if [ ! -x "$CONF_DIR/e2e-network.test" ] || [ "$(cat "$CONF_DIR/e2e-network.test.stamp" 2>/dev/null)" != "$(conf_test_stamp)" ]; then
		run_step "e2e network tests $KUBE_VER -> $CONF_DIR/e2e-network.test" build_conformance_test
	fi
	if [ ! -x "$CONF_DIR/bin/agnhost" ] || ! grep -qsx "$KUBE_MOD $KUBE_VER test/images/agnhost $CONF_AGNHOST_VER" "$CONF_DIR/bin/agnhost.stamp"; then
		run_step "agnhost $CONF_AGNHOST_VER -> $CONF_DIR/bin/agnhost" build_agnhost
	fi
	if [ ! -x "$CONF_DIR/bin/ginkgo" ] || ! grep -qsx "github.com/onsi/ginkgo/v2/ginkgo $(conf_ginkgo_ver)" "$CONF_DIR/bin/ginkgo.stamp"; then
		run_step "ginkgo CLI -> $CONF_DIR/bin/ginkgo" build_ginkgo
	fi
	# Cheap (seconds): rebuilt every time, so that it follows the source.
	build_small_static pause "$REPO/scripts/pause" "$CONF_DIR/bin" >"$LOG" 2>&1 || { cat "$LOG" >&2; exit 1; }
	if [ ! -s "$CONF_DIR/images.tar" ] || [ "$(cat "$CONF_DIR/images.stamp" 2>/dev/null)" != "$(conf_images_stamp)" ]; then
		run_step "e2e images ($CONF_REPO/*) -> $CONF_DIR/images.tar" build_conf_images
	fi
	[ -s "$CONF_DIR/repo-list.yaml" ] || write_conf_repo_list
}

GOINSTALL_FLAGS=(-trimpath -ldflags=-s\ -w)

command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || { echo "install-test-deps: go not found in PATH" >&2; exit 1; }
[ "$SKIP_APT" = 1 ] || install_apt
install_plugins
install_cnitool
install_crictl
install_pause
case $WITH_CONTAINERD2 in 1 | true | yes) install_containerd2 ;; esac
case $WITH_KUBELET in 1 | true | yes) install_kubelet ;; esac
case $WITH_KUBEADM in 1 | true | yes) install_kubelet; install_kubeadm ;; esac
case $WITH_CONFORMANCE in 1 | true | yes) install_conformance ;; esac
