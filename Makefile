# eni-cni: one static binary. `make demo` and `make test` do all their own set-up.
SHELL := /bin/bash
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN     ?= bin/eni-cni
GO      ?= go
LDFLAGS := -s -w -X main.version=$(VERSION)
# Where scripts/install-test-deps.sh puts reference plugins, crictl, etc.
export ENI_CNI_TOOLS ?= /opt/eni-cni-test

.PHONY: build demo test test-unit test-privileged test-e2e test-kubelet test-daemonset test-kubeadm test-ready test-cluster deps-kubeadm test-conformance deps-conformance deps lint bench fleet fleet-real install uninstall image clean stress fuzz

# The shipped binary is the lean build (CNI verbs without grpc and the AWS
# SDK) with two builds embedded (seam_lean.go): the ec2 build for warm and
# IMDS reads, the full build for gc and the rest.
# FULL_TAGS: grpcnotrace leaves out grpc's golang.org/x/net/trace, whose
# html/template makes the linker keep every exported method of every linked
# type (the AWS SDK's above all): 47 MB instead of 14, and milliseconds of
# start-up on every warm and gc run (deps_test.go holds the build to it).
# EC2_TAGS: the ec2 build, the warm/internal/max-pods commands without the
# CRI client, protobuf and D-Bus (seam_ec2.go), which a settled warm pass on
# the timer would otherwise initialise every minute.
FULL_TAGS := grpcnotrace
EC2_TAGS := ec2build
build:
	CGO_ENABLED=0 $(GO) build -trimpath -tags "$(FULL_TAGS)" -ldflags "$(LDFLAGS)" -o embedded/eni-cni-full .
	sha256sum embedded/eni-cni-full | cut -d' ' -f1 > embedded/eni-cni-full.sha256
	CGO_ENABLED=0 $(GO) build -trimpath -tags "$(EC2_TAGS)" -ldflags "$(LDFLAGS)" -o embedded/eni-cni-ec2 .
	sha256sum embedded/eni-cni-ec2 | cut -d' ' -f1 > embedded/eni-cni-ec2.sha256
	CGO_ENABLED=0 $(GO) build -trimpath -tags lean -ldflags "$(LDFLAGS)" -o $(BIN) .

# A throwaway node namespace, a few pods on the static pool, ping, DEL, cleanup.
demo: build
	bash scripts/demo.sh $(BIN)

# The same story on a simulated EC2 node: the fake IMDS + EC2 server, warm,
# pods on the primary and on a second ENI, its rule and table, cleanup.
demo-ec2: build
	bash scripts/demo-ec2.sh $(BIN)

# Cached: a second run builds nothing (see the script's header).
deps:
	bash scripts/install-test-deps.sh --with-containerd2 --with-kubelet --with-kubeadm --with-conformance

lint: build
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags lean .
	$(GO) vet -tags "$(EC2_TAGS)" .

# Unit tests run without root; privileged tests skip themselves unless root.
test-unit:
	$(GO) test -count=1 ./...

test-privileged: build
	ENI_CNI_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -p 1 ./integration/...

test-e2e: build
	bash scripts/e2e/run.sh $(CURDIR)/$(BIN)

# The DaemonSet's pod template as a static pod under a real kubelet, from the
# offline image, installing onto a stand-in host root (needs the kubelet of
# scripts/install-test-deps.sh --with-kubelet, and yq).
test-daemonset: build
	bash scripts/e2e/daemonset.sh $(CURDIR)/$(BIN)

# A real kubelet (standalone, static pods) drives eni-cni through containerd.
# Needs `make deps` (kubelet is built once, 6-20 min). KUBELET_PHASES="static"
# skips the ec2 phase; KUBELET_EC2_POOL=dry tests ADD on a dry ec2 pool;
# KUBELET_EC2_FAMILY=ipv6 (or dual) runs the ec2 phase's pods on the /80 the
# fake delegates (their addresses, reachability, one AssignIpv6Addresses, all
# freed), KUBELET_EC2_SELFTEST=1 proves the reachability check can fail.
test-kubelet: build
	bash scripts/e2e/kubelet.sh --phases "$(or $(KUBELET_PHASES),static ec2)" $(CURDIR)/$(BIN)

# The kubeadm quick start (docs/quickstart-kubeadm.md), for real: kubeadm init (images built
# offline), eni-cni install, node Ready, kubectl run/delete, kubeadm reset, in
# private mount and network namespaces. Builds kubeadm, the control plane,
# kube-proxy, etcd and CoreDNS and packs their images once (deps-kubeadm:
# 15-40 min on top of kubelet's build cache; then 5 s, nothing built); the
# run itself takes 1-1.5 min. `make test` runs it last: the quick start is
# documentation that rots unless it runs. E2E_IP_FAMILY=ipv6, dual or dual6:
# the same on an IPv6 single-stack or a dual-stack cluster, IPv4 or IPv6
# first (scripts/e2e/kubeadm6.sh: pod-to-pod, Service-to-API-server and
# CoreDNS checks per family; 70-130 s; KUBEADM6_SELFTEST=1 proves they can
# fail, 15-35 s more).
deps-kubeadm:
	bash scripts/install-test-deps.sh --with-kubeadm

test-kubeadm: build deps-kubeadm
	bash scripts/e2e/kubeadm.sh $(CURDIR)/$(BIN)

# The readiness gate (readyWhenFilled) with a real containerd 2.x, kubelet and
# API server: a one-node kubeadm cluster whose node is an instance of the fake
# EC2 world, eni-cni install --pool ec2 --cni-version 1.1.0 while the fake
# refuses addresses (ec2fake --faults): the node stays NotReady with our
# reason and a pod stays Pending; the fault cleared, the node turns Ready by
# itself and the pod runs on an ENI address (scripts/e2e/ready.sh, 50-75 s).
# READY_CONTAINERD=1: the same on containerd 1.6, which never calls STATUS
# (the node is Ready with an empty pool).
test-ready: build
	bash scripts/install-test-deps.sh --with-containerd2 --with-kubeadm
	READY_CONTAINERD=$(or $(READY_CONTAINERD),2) bash scripts/e2e/ready.sh $(CURDIR)/$(BIN)

# A multi-node kubeadm cluster on the ec2 pool: kubeadm init on node 1, join
# on node 2, eni-cni install --pool ec2 on each against one fake EC2 world
# whose VPC fabric (router with the source/destination check, an internet
# behind it) carries the packets; pod, node, NodePort, hostPort, SNAT, MTU,
# DNS and API server traffic across it (scripts/e2e/cluster.sh). Same tools
# as test-kubeadm. E2E_CLUSTER_HOOK=/path/to/exe runs it against the cluster;
# E2E_PROXY_MODE=nftables runs kube-proxy in nftables mode; CLUSTER_SELFTEST=1
# takes what three checks rely on away on one node and expects them to fail.
test-cluster: build deps-kubeadm
	bash scripts/e2e/cluster.sh $(CURDIR)/$(BIN)

# Kubernetes' own e2e network tests (the [sig-network] [Conformance] specs and
# the Networking Granular Checks of v1.34.2) against the two-node cluster of
# test-cluster, as its E2E_CLUSTER_HOOK (scripts/e2e/conformance.sh), on
# m5.large instances (29 pods a node: the specs' pods fit beside the suite's).
# Builds the network-only e2e test binary, agnhost and the images once
# (deps-conformance: 2-10 min on kubelet's build cache; then cached). The
# specs run on 6 ginkgo processes (CONF_PROCS): about 4 min on the shared
# machine, the whole run 6-7. E2E_PROXY_MODE=nftables works here too.
# Summary and reports in _out/conformance.
deps-conformance:
	bash scripts/install-test-deps.sh --with-kubeadm --with-conformance

test-conformance: build deps-conformance
	rm -rf _out/conformance
	E2E_CLUSTER_HOOK=$(CURDIR)/scripts/e2e/conformance.sh CONF_OUT=$(CURDIR)/_out/conformance \
		CLUSTER_INSTANCE_TYPE=$(or $(CLUSTER_INSTANCE_TYPE),m5.large) bash scripts/e2e/cluster.sh $(CURDIR)/$(BIN)

test: deps lint build
	ENI_CNI_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -race -timeout 30m ./...
	$(GO) test -count=1 -tags lean -run '^TestEmbedded' .
	$(GO) test -count=1 -tags "$(EC2_TAGS)" .
	$(MAKE) --no-print-directory fuzz FUZZTIME=15s FUZZ_TARGETS=./plugin:FuzzVerb
	$(MAKE) --no-print-directory stress STRESS_DURATION=60s
	$(MAKE) --no-print-directory test-e2e
	$(MAKE) --no-print-directory test-kubelet
	$(MAKE) --no-print-directory test-kubelet KUBELET_PHASES=ec2 KUBELET_EC2_FAMILY=ipv6 KUBELET_EC2_SELFTEST=1
	$(MAKE) --no-print-directory test-kubelet KUBELET_PHASES=ec2 KUBELET_EC2_FAMILY=dual KUBELET_EC2_SELFTEST=1
	$(MAKE) --no-print-directory test-daemonset
	$(MAKE) --no-print-directory test-kubeadm E2E_IP_FAMILY=ipv4
	$(MAKE) --no-print-directory test-kubeadm E2E_IP_FAMILY=ipv6
	$(MAKE) --no-print-directory test-kubeadm E2E_IP_FAMILY=dual KUBEADM6_SELFTEST=1
	$(MAKE) --no-print-directory test-ready
	$(MAKE) --no-print-directory test-cluster E2E_PROXY_MODE=nftables CLUSTER_SELFTEST=1
	$(MAKE) --no-print-directory test-conformance

# Many processes doing ADD/DEL/CHECK/gc/warm/list on one store on a simulated
# EC2 node, SIGKILLed at random, invariants checked after every round
# (integration/stress_test.go). Root. Prints operations, kills, checks and
# violations; fails on any violation.
STRESS_DURATION ?= 10m
stress: build
	ENI_CNI_BIN=$(CURDIR)/$(BIN) ENI_CNI_STRESS=$(STRESS_DURATION) $(GO) test -count=1 -p 1 -timeout 0 -run '^TestStress$$' -v ./integration/

# A scale-up of FLEET_NODES nodes x 30 pods against one account's EC2 token
# buckets: the real warm, ADD and STATUS code on virtual time (ec2/fleet
# TestFleet, docs/scale.md), then a day of steady state and the scale-down
# (scripts/fleet). No root needed. FLEET_FLAGS e.g. -fleet.configs secondary,ipamd.
fleet:
	$(GO) test -count=1 -timeout 0 -run '^TestFleet$$' -v ./ec2/fleet -args -fleet.nodes $(or $(FLEET_NODES),1000) $(FLEET_FLAGS)
	$(GO) run ./scripts/fleet -configs steady -steady-nodes $(or $(FLEET_STEADY_NODES),100) -steady-every 5m

# The scale-up with real processes (ec2/fleet TestFleetReal): FLEET_REAL_NODES
# network namespaces running the built binary (warm as its timer runs it,
# CNI STATUS, 30 CNI ADDs each into its own netns) against one ec2fake world
# process whose buckets are the account's, sizes x nodes/1000 and refills x
# 4 x nodes/1000 (-fleet.real-refill); beside it the simulation of the same
# fleet on the same buckets. Root; takes the shared host lock for the run.
# FLEET_REAL_FLAGS e.g. -fleet.real-configs secondary,prefix,template.
fleet-real: build
	$(GO) build -o $(CURDIR)/bin/ec2fake ./ec2/ec2fake/cmd/ec2fake
	$(GO) test -c -o $(CURDIR)/bin/fleet.test ./ec2/fleet
	cd ec2/fleet && flock /tmp/eni-cni-hostlock $(CURDIR)/bin/fleet.test -test.count=1 -test.timeout 0 -test.run '^TestFleetReal$$' -test.v \
		-fleet.real-nodes $(or $(FLEET_REAL_NODES),20) -fleet.eni-cni $(CURDIR)/$(BIN) -fleet.ec2fake $(CURDIR)/bin/ec2fake $(FLEET_REAL_FLAGS)

# eni-cni vs ptp+host-local in throwaway namespaces; table on stdout and in docs/BENCHMARKS.md, details in _out/bench/. Root. BENCH_FLAGS=-quick for a short run.
# BENCH_FLAGS='-only kubelet' runs only the kubelet burst (a real kubelet + containerd; builds kubelet once).
# BENCH_FLAGS='-only fleet' runs only the fleet rows (make fleet at 100 nodes, virtual time; no root) and rewrites their block.
bench: build
	$(GO) run ./scripts/bench -eni-cni $(BIN) -tools $(ENI_CNI_TOOLS) -go $(GO) $(BENCH_FLAGS)

# Each fuzz target for FUZZTIME (seed corpora in <pkg>/testdata/fuzz/<Target>;
# a failing input is added there by go test, to become a regression case).
# FuzzVerb drives whole CNI invocations (environment and stdin); `make test`
# runs it for 15 s.
FUZZTIME ?= 30s
FUZZ_TARGETS ?= ./alloc:FuzzDecodeState ./netconf:FuzzParseConfig ./plugin:FuzzParseCNIArgs ./plugin:FuzzVerb ./gc:FuzzValidAttachments ./gc:FuzzPlan
fuzz: build
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

# INSTALL_FLAGS: e.g. "--pool ec2 --snat", "--pool static --ranges 10.244.1.0/24",
# "--root /mnt/image", "--dry-run" (see scripts/install.sh).
install: build
	bash scripts/install.sh $(BIN) $(INSTALL_FLAGS)

uninstall:
	bash scripts/install.sh $(BIN) --uninstall $(INSTALL_FLAGS)

# The DaemonSet's image (scripts/k8s/eni-cni.yaml), offline: a docker-archive
# tar holding only the binary. IMAGE_TAG defaults to localhost/eni-cni:$(VERSION).
image: build
	bash scripts/k8s/build-image.sh $(BIN) _out/eni-cni-image.tar $(IMAGE_TAG)

clean:
	rm -rf bin _out embedded
