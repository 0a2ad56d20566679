// Package integration holds the privileged tests of eni-cni: they exec the
// built binary as a container runtime would, inside a "node" network
// namespace they create, against pod namespaces they create, and check the
// kernel state (veths, addresses, routes, rules, neighbours, iptables) and
// the state file through `eni-cni list --json`.
//
// They need root and skip themselves otherwise. Run them with
//
//	go test ./integration/
//
// which builds the binary from this checkout, or with ENI_CNI_BIN pointing
// at a prebuilt one. TestChainPortmap needs the reference portmap plugin in
// ${ENI_CNI_TOOLS:-/opt/eni-cni-test}/bin (scripts/install-test-deps.sh) and
// iptables. Build with -tags libcni to drive the conflist with libcni itself
// once go.mod holds libcni's OpenTelemetry dependencies.
//
// Nothing outside the namespaces and temp dirs the tests create is touched:
// every address lives in 10.97.0.0/16 (node), 10.98.0.0/16 and 10.99.0.0/16
// (pools).
package integration
