package snat

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/coreos/go-iptables/iptables"

	"github.com/eni-cni/eni-cni/atomicfile"
)

// Egress4Chain is the chain, in the nat and the filter table, that gives
// IPv6-only pods their IPv4 egress: their link-local egress addresses
// are masqueraded to the node's address on the way out, and INVALID
// packets from them dropped (nat never sees those, and they would leave
// with a link-local source). It is a chain of its own, beside Chain, so
// that an IPv6-only network's pods on a node without the ec2 SNAT (a
// static pool, snat off) reach IPv4 all the same, and turning one off
// never touches the other.
const Egress4Chain = "ENI-CNI-EGRESS4"

const (
	egressComment     = "eni-cni: IPv4 egress of IPv6-only pods"
	egressDropComment = "eni-cni: drop conntrack-INVALID IPv4 egress of IPv6-only pods"
)

// Egress4Rules is what EnsureEgress4 wants in the nat table's
// Egress4Chain: traffic between egress addresses (pod to pod on the node)
// keeps its source, the rest to anything not the node's own is
// masqueraded. MASQUERADE, not SNAT to a given address as the VPC CNI's
// egress plugin does: it takes the address of the interface the packet
// leaves by, which on EC2 is the primary ENI's primary address (the
// node's default route), and on a node of a static pool is whatever its
// uplink has, with nothing to configure or to go stale.
func Egress4Rules(r netip.Prefix) [][]string {
	src := r.Masked().String()
	return [][]string{
		{"-d", src, "-m", "comment", "--comment", egressComment, "-j", "RETURN"},
		{"-s", src, "-m", "addrtype", "!", "--dst-type", "LOCAL", "-m", "comment", "--comment", egressComment, "-j", "MASQUERADE", "--random-fully"},
	}
}

// Egress4DropRules is what EnsureEgress4 wants in the filter table's
// Egress4Chain.
func Egress4DropRules(r netip.Prefix) [][]string {
	return [][]string{
		{"-s", r.Masked().String(), "-m", "conntrack", "--ctstate", "INVALID", "-m", "comment", "--comment", egressDropComment, "-j", "DROP"},
	}
}

var (
	egressNat    = table{name: "nat", hook: "POSTROUTING", chain: Egress4Chain, jump: []string{"-m", "comment", "--comment", egressComment, "-j", Egress4Chain}}
	egressFilter = table{name: "filter", hook: "FORWARD", chain: Egress4Chain, jump: []string{"-m", "comment", "--comment", egressDropComment, "-j", Egress4Chain}, first: true}
)

// EnsureEgress4 makes the node masquerade the egress range r: both
// tables' Egress4Chain and their jumps, as Ensure keeps Chain (the same
// lock, the same rewrite that never leaves a chain empty or a jump to a
// chain without its rules).
func EnsureEgress4(stateDir string, r netip.Prefix) (changed bool, err error) {
	if !r.IsValid() || !r.Addr().Is4() {
		return false, fmt.Errorf("egress masquerade needs an IPv4 range, have %s", r)
	}
	return ensureLocked(stateDir, egressFilter, Egress4DropRules(r), egressNat, Egress4Rules(r))
}

// Egress4BootName is the file in the state directory that records the
// boot in which EnsureEgress4Once last ensured the chains: nothing of
// them survives a reboot, and iptables cannot be asked cheaply on every
// ADD (each look is an exec).
const Egress4BootName = "egress4.boot"

// EnsureEgress4Once is EnsureEgress4 for ADD: once per boot. A chain
// flushed later in the boot is found by CHECK and restored by repair.
func EnsureEgress4Once(stateDir, bootID string, r netip.Prefix) error {
	path := filepath.Join(stateDir, Egress4BootName)
	if b, err := os.ReadFile(path); err == nil && bootID != "" && bytes.Equal(bytes.TrimSpace(b), []byte(bootID)) {
		return nil
	}
	if _, err := EnsureEgress4(stateDir, r); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, []byte(bootID+"\n"), 0o600); err != nil {
		return fmt.Errorf("record the egress masquerade's boot: %w", err)
	}
	return nil
}

// CheckEgress4 lists what the node lacks of the egress masquerade of r,
// in words (nothing when it is in place). It changes nothing.
func CheckEgress4(r netip.Prefix) (missing []string, err error) {
	return checkTables([]wanted{
		{egressNat, Egress4Rules(r), "the masquerade of IPv6-only pods' IPv4 egress"},
		{egressFilter, Egress4DropRules(r), "the drop of their conntrack-INVALID packets"},
	})
}

// RemoveEgress4 takes the jumps and both tables' Egress4Chain away
// (uninstall), and the boot record, so that an ADD later in the boot
// installs them again. Nothing to remove is no error, and no change.
func RemoveEgress4(stateDir string) (changed bool, err error) {
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return false, fmt.Errorf("iptables: %w", err)
	}
	if stateDir != "" {
		if err := os.Remove(filepath.Join(stateDir, Egress4BootName)); err != nil && !os.IsNotExist(err) {
			return false, fmt.Errorf("remove the egress masquerade's boot record: %w", err)
		}
	}
	for _, tb := range []table{egressNat, egressFilter} {
		c, err := removeTable(ipt, tb)
		changed = changed || c
		if err != nil {
			return changed, err
		}
	}
	return changed, nil
}
