// Package snat owns the node's source NAT for pod traffic leaving the VPC:
// one nat chain, jumped to from POSTROUTING, that lets traffic to the VPC's
// CIDRs through untouched and rewrites traffic from pod addresses to the
// primary ENI's address, as the AWS VPC CNI does when external SNAT is
// off. Pods keep their VPC addresses inside the VPC; the internet sees the
// node. Only pod sources are rewritten: the node's own addresses, and
// addresses eni-cni leaves alone (excludeIPs, ENIs tagged no_manage: a VIP,
// an address an Elastic IP is bound to), keep their source.
//
// Beside the nat chain, a filter chain of the same name, jumped to first
// from FORWARD, drops the pod packets conntrack calls INVALID that the nat
// chain would have rewritten: nat never sees an INVALID packet (no
// connection to bind a mapping to), so such a packet (a segment in flight
// past the window a reset closed) would leave with the pod's address,
// which beyond the VPC has no public mapping (the internet gateway drops
// it) and on a secondary ENI's pod is not the primary ENI's (the
// source/destination check drops it). The same exclusions as the nat
// chain: inside the VPC an asymmetric path's packets, INVALID to this
// node, keep flowing. kube-proxy, Calico and kube-router drop INVALID for
// the same reason (netfilter bugzilla 693); the global
// nf_conntrack_tcp_be_liberal would make fewer packets INVALID, but for
// every connection of the node, and still not those conntrack cannot
// parse.
//
// It shells out to iptables through coreos/go-iptables. `eni-cni warm`
// runs it every pass; ADD runs it once per boot, when no pass has yet.
package snat

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/coreos/go-iptables/iptables"

	"github.com/eni-cni/eni-cni/lockfile"
)

// LockName is the file in the state directory Ensure holds while it
// rewrites the chains: the first ADDs of a boot run it in parallel, and
// with warm's pass, and iptables has no transaction that spans a check
// and the change it decides (two creates of one chain, two jumps, a
// chain cleared by one while the other appends).
const LockName = "snat.lock"

// Chain is the nat chain eni-cni owns. Everything in it is rewritten on
// each Ensure; nothing else on the node is touched but the one jump rule.
const Chain = "ENI-CNI-SNAT"

const comment = "eni-cni: SNAT of pod traffic leaving the VPC"

// Spec is what the chain rewrites.
type Spec struct {
	VPCCIDRs  []netip.Prefix // destinations left alone
	PodNets   []netip.Prefix // where pod addresses come from: the subnets of the ENIs eni-cni manages
	NotPods   []netip.Addr   // addresses in PodNets that are not pods' (ENI primaries, excluded, unmanaged)
	PrimaryIP netip.Addr     // what pod traffic leaves as
}

func (s Spec) valid() error {
	if !s.PrimaryIP.Is4() || len(s.VPCCIDRs) == 0 || len(s.PodNets) == 0 {
		return fmt.Errorf("snat needs the primary address, the VPC CIDRs and the pod subnets (have %s, %v, %v)", s.PrimaryIP, s.VPCCIDRs, s.PodNets)
	}
	return nil
}

// Rules is what Ensure wants in Chain, in order.
func Rules(s Spec) [][]string {
	out := exclusions(s)
	for _, n := range s.PodNets {
		out = append(out, []string{"-s", n.Masked().String(), "-m", "addrtype", "!", "--dst-type", "LOCAL", "-m", "comment", "--comment", comment,
			"-j", "SNAT", "--to-source", s.PrimaryIP.String(), "--random-fully"})
	}
	return out
}

const dropComment = "eni-cni: drop conntrack-INVALID pod traffic SNAT cannot rewrite"

// DropRules is what Ensure wants in the filter table's Chain, in order:
// the nat chain's exclusions, then a drop of INVALID packets from the pod
// subnets.
func DropRules(s Spec) [][]string {
	out := exclusions(s)
	for _, n := range s.PodNets {
		out = append(out, []string{"-s", n.Masked().String(), "-m", "conntrack", "--ctstate", "INVALID", "-m", "comment", "--comment", dropComment, "-j", "DROP"})
	}
	return out
}

// exclusions are the RETURNs both chains start with: traffic inside the
// VPC and from addresses that are not pods is neither rewritten nor, when
// INVALID, dropped. One list, so the two chains cannot drift apart.
func exclusions(s Spec) [][]string {
	var out [][]string
	for _, c := range s.VPCCIDRs {
		out = append(out, []string{"-d", c.String(), "-m", "comment", "--comment", "eni-cni: VPC, no SNAT", "-j", "RETURN"})
	}
	for _, a := range s.NotPods {
		out = append(out, []string{"-s", netip.PrefixFrom(a, 32).String(), "-m", "comment", "--comment", "eni-cni: not a pod, no SNAT", "-j", "RETURN"})
	}
	return out
}

var jump = []string{"-m", "comment", "--comment", comment, "-j", Chain}

var dropJump = []string{"-m", "comment", "--comment", dropComment, "-j", Chain}

// table is one of the two chains Ensure keeps: its table, the built-in
// chain that jumps to it and the jump.
type table struct {
	name, hook, chain string
	jump              []string
	first             bool // jump inserted first, not appended
}

var (
	natTable = table{name: "nat", hook: "POSTROUTING", chain: Chain, jump: jump}
	// First in FORWARD: a rule before it that accepts pod traffic
	// (Docker's, kube-proxy's for established connections) would skip it.
	filterTable = table{name: "filter", hook: "FORWARD", chain: Chain, jump: dropJump, first: true}
)

// Ensure makes the nat table hold exactly our chain's rules and the jump to
// it, and the filter table its INVALID drop. It is idempotent and cheap
// when nothing changed (list and compare), and repairs the rules if
// someone flushed them. It holds LockName in stateDir while it works.
func Ensure(stateDir string, s Spec) (changed bool, err error) {
	if err := s.valid(); err != nil {
		return false, err
	}
	return ensureLocked(stateDir, filterTable, DropRules(s), natTable, Rules(s))
}

// ensureLocked makes the filter table's chain fb hold drop and the nat
// table's nb hold rules, under LockName in stateDir. The drop first: SNAT
// without it lets INVALID packets out unNATed.
func ensureLocked(stateDir string, fb table, drop [][]string, nb table, rules [][]string) (changed bool, err error) {
	path := filepath.Join(stateDir, LockName)
	lk, err := lockfile.Open(path, os.O_CREATE|os.O_RDONLY)
	if err != nil {
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	defer lk.Close()
	if err := lk.Lock(); err != nil {
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return false, fmt.Errorf("iptables: %w", err)
	}
	dropChanged, err := ensureTable(ipt, fb, drop)
	if err != nil {
		return dropChanged, err
	}
	natChanged, err := ensureTable(ipt, nb, rules)
	return dropChanged || natChanged, err
}

// ensureTable makes tb's Chain hold exactly want and its hook jump to it.
func ensureTable(ipt *iptables.IPTables, tb table, want [][]string) (changed bool, err error) {
	exists, err := ipt.ChainExists(tb.name, tb.chain)
	if err != nil {
		return false, fmt.Errorf("look for chain %s in %s: %w", tb.chain, tb.name, err)
	}
	if !exists {
		if err := ipt.NewChain(tb.name, tb.chain); err != nil {
			return false, fmt.Errorf("create chain %s in %s: %w", tb.chain, tb.name, err)
		}
		changed = true
	}
	have, err := ipt.List(tb.name, tb.chain)
	if err != nil {
		return changed, fmt.Errorf("list chain %s in %s: %w", tb.chain, tb.name, err)
	}
	if !sameRules(have, want) {
		if err := replaceRules(ipt, tb, want, len(ruleLines(have))); err != nil {
			return true, err
		}
		changed = true
	}
	c, err := ensureJump(ipt, tb)
	return changed || c, err
}

// replaceRules makes tb's chain hold want, in order, with no moment
// when it holds neither the old rules nor the new: the new ones go in
// before the old ones, which then go. NAT is decided on a connection's
// first packet and kept for its life, so a chain cleared and refilled (as
// it was each time the spec changed: an ENI attached) let a flow that
// started in between leave unNATed for as long as it lived (CoreDNS's
// queries to its upstream, one UDP flow refreshed every half second, seen
// dropped at the cluster suite's internet gateway). old is the number of
// rules the chain holds.
func replaceRules(ipt *iptables.IPTables, tb table, want [][]string, old int) error {
	for i, r := range want {
		if err := ipt.Insert(tb.name, tb.chain, i+1, r...); err != nil {
			return fmt.Errorf("add rule to %s in %s: %w", tb.chain, tb.name, err)
		}
	}
	for range old {
		if err := ipt.DeleteById(tb.name, tb.chain, len(want)+1); err != nil {
			return fmt.Errorf("delete an old rule of %s in %s: %w", tb.chain, tb.name, err)
		}
	}
	return nil
}

// ensureJump makes tb's hook jump to Chain exactly once: an earlier
// release, racing itself, could leave two jumps, and Remove deleting one
// would leave the other holding the chain.
func ensureJump(ipt *iptables.IPTables, tb table) (changed bool, err error) {
	n, err := countJumps(ipt, tb)
	if err != nil {
		return false, err
	}
	for ; n > 1; n-- {
		if err := ipt.Delete(tb.name, tb.hook, tb.jump...); err != nil {
			return true, fmt.Errorf("delete a second %s jump: %w", tb.hook, err)
		}
		changed = true
	}
	if n == 1 {
		return changed, nil
	}
	add := ipt.Append
	if tb.first {
		add = func(table, chain string, rule ...string) error { return ipt.Insert(table, chain, 1, rule...) }
	}
	if err := add(tb.name, tb.hook, tb.jump...); err != nil {
		return changed, fmt.Errorf("add the %s jump: %w", tb.hook, err)
	}
	return true, nil
}

// countJumps counts the rules of tb's hook that jump to Chain.
func countJumps(ipt *iptables.IPTables, tb table) (int, error) {
	rules, err := ipt.List(tb.name, tb.hook)
	if err != nil {
		return 0, fmt.Errorf("look for the %s jump: %w", tb.hook, err)
	}
	n := 0
	for _, r := range rules {
		f := strings.Fields(r)
		if len(f) > 1 && f[0] == "-A" && slices.Contains(f, "-j") && f[len(f)-1] == tb.chain {
			n++
		}
	}
	return n, nil
}

// Remove takes the jumps and both chains away (snat turned off). Nothing
// to remove is no error, and no change.
func Remove() (changed bool, err error) {
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return false, fmt.Errorf("iptables: %w", err)
	}
	for _, tb := range []table{natTable, filterTable} {
		c, err := removeTable(ipt, tb)
		changed = changed || c
		if err != nil {
			return changed, err
		}
	}
	return changed, nil
}

func removeTable(ipt *iptables.IPTables, tb table) (bool, error) {
	exists, err := ipt.ChainExists(tb.name, tb.chain)
	if err != nil || !exists { // no chain, no jump to it either
		return false, err
	}
	// Every jump: a second one (see ensureJump) would hold the chain.
	n, err := countJumps(ipt, tb)
	if err != nil {
		return false, err
	}
	for ; n > 0; n-- {
		if err := ipt.Delete(tb.name, tb.hook, tb.jump...); err != nil {
			return false, fmt.Errorf("delete the %s jump: %w", tb.hook, err)
		}
	}
	if err := ipt.ClearAndDeleteChain(tb.name, tb.chain); err != nil {
		return true, fmt.Errorf("delete chain %s in %s: %w", tb.chain, tb.name, err)
	}
	return true, nil
}

// sameRules compares `iptables -S CHAIN` output with the wanted specs by
// the addresses they name, which is what changes between runs (iptables
// rewrites the spec text, e.g. quoting of comments, so exact text compare
// would rewrite the chain every time).
func sameRules(have []string, want [][]string) bool {
	rules := ruleLines(have)
	if len(rules) != len(want) {
		return false
	}
	for i, w := range want {
		for _, tok := range w {
			if (tok == "RETURN" || tok == "SNAT" || tok == "MASQUERADE" || tok == "DROP" || tok == "INVALID" || isAddr(tok)) && !slices.Contains(strings.Fields(rules[i]), tok) {
				return false
			}
		}
	}
	return true
}

// ruleLines are the rules (-A lines) of an `iptables -S` listing.
func ruleLines(listing []string) []string {
	var rules []string
	for _, l := range listing {
		if len(l) > 3 && l[:3] == "-A " {
			rules = append(rules, l)
		}
	}
	return rules
}

func isAddr(s string) bool {
	if _, err := netip.ParsePrefix(s); err == nil {
		return true
	}
	_, err := netip.ParseAddr(s)
	return err == nil
}
