# eni-cni: one static binary. `make demo` and `make test` do all their own set-up.
SHELL := /bin/bash
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN     ?= bin/eni-cni
GO      ?= go
LDFLAGS := -s -w -X main.version=$(VERSION)
# Where scripts/install-test-deps.sh puts reference plugins, crictl, etc.
export ENI_CNI_TOOLS ?= /opt/eni-cni-test

.PHONY: build demo test test-unit test-privileged test-e2e deps lint bench install clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) .

# A throwaway node namespace, a few pods on the static pool, ping, DEL, cleanup.
demo: build
	bash scripts/demo.sh $(BIN)

deps:
	bash scripts/install-test-deps.sh --with-containerd2

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet ./...

# Unit tests run without root; privileged tests skip themselves unless root.
test-unit:
	$(GO) test -count=1 ./...

test-privileged: build
	ENI_CNI_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -p 1 ./integration/...

test-e2e: build
	bash scripts/e2e/run.sh $(CURDIR)/$(BIN)

test: deps lint build
	ENI_CNI_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -race ./...
	$(MAKE) --no-print-directory test-e2e

install: build
	bash scripts/install.sh $(BIN)

clean:
	rm -rf bin _out
