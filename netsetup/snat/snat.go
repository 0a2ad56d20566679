// Package snat owns the node's source NAT for pod traffic leaving the VPC:
// one nat chain, jumped to from POSTROUTING, that lets traffic to the VPC's
// CIDRs through untouched and rewrites traffic from pod addresses to the
// primary ENI's address, as the AWS VPC CNI does when external SNAT is
// off. Pods keep their VPC addresses inside the VPC; the internet sees the
// node. Only pod sources are rewritten: the node's own addresses, and
// addresses eni-cni leaves alone (excludeIPs, ENIs tagged no_manage: a VIP,
// an address an Elastic IP is bound to), keep their source.
//
// It shells out to iptables through coreos/go-iptables. `eni-cni warm`
// runs it every pass; ADD runs it once per boot, when no pass has yet.
package snat

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/coreos/go-iptables/iptables"
)

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
	var out [][]string
	for _, c := range s.VPCCIDRs {
		out = append(out, []string{"-d", c.String(), "-m", "comment", "--comment", "eni-cni: VPC, no SNAT", "-j", "RETURN"})
	}
	for _, a := range s.NotPods {
		out = append(out, []string{"-s", netip.PrefixFrom(a, 32).String(), "-m", "comment", "--comment", "eni-cni: not a pod, no SNAT", "-j", "RETURN"})
	}
	for _, n := range s.PodNets {
		out = append(out, []string{"-s", n.Masked().String(), "-m", "addrtype", "!", "--dst-type", "LOCAL", "-m", "comment", "--comment", comment,
			"-j", "SNAT", "--to-source", s.PrimaryIP.String(), "--random-fully"})
	}
	return out
}

var jump = []string{"-m", "comment", "--comment", comment, "-j", Chain}

// Ensure makes the nat table hold exactly our chain's rules and the jump to
// it. It is idempotent and cheap when nothing changed (list and compare),
// and repairs the rules if someone flushed them.
func Ensure(s Spec) (changed bool, err error) {
	if err := s.valid(); err != nil {
		return false, err
	}
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return false, fmt.Errorf("iptables: %w", err)
	}
	exists, err := ipt.ChainExists("nat", Chain)
	if err != nil {
		return false, fmt.Errorf("look for chain %s: %w", Chain, err)
	}
	if !exists {
		if err := ipt.NewChain("nat", Chain); err != nil {
			return false, fmt.Errorf("create chain %s: %w", Chain, err)
		}
		changed = true
	}
	want := Rules(s)
	have, err := ipt.List("nat", Chain)
	if err != nil {
		return changed, fmt.Errorf("list chain %s: %w", Chain, err)
	}
	if !sameRules(have, want) {
		if err := ipt.ClearChain("nat", Chain); err != nil {
			return changed, fmt.Errorf("clear chain %s: %w", Chain, err)
		}
		for _, r := range want {
			if err := ipt.Append("nat", Chain, r...); err != nil {
				return true, fmt.Errorf("add rule to %s: %w", Chain, err)
			}
		}
		changed = true
	}
	if ok, err := ipt.Exists("nat", "POSTROUTING", jump...); err != nil {
		return changed, fmt.Errorf("look for the POSTROUTING jump: %w", err)
	} else if !ok {
		if err := ipt.Append("nat", "POSTROUTING", jump...); err != nil {
			return changed, fmt.Errorf("add the POSTROUTING jump: %w", err)
		}
		changed = true
	}
	return changed, nil
}

// Remove takes the jump and the chain away (snat turned off). Nothing to
// remove is no error, and no change.
func Remove() (changed bool, err error) {
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return false, fmt.Errorf("iptables: %w", err)
	}
	exists, err := ipt.ChainExists("nat", Chain)
	if err != nil || !exists { // no chain, no jump to it either
		return false, err
	}
	if ok, err := ipt.Exists("nat", "POSTROUTING", jump...); err != nil {
		return false, fmt.Errorf("look for the POSTROUTING jump: %w", err)
	} else if ok {
		if err := ipt.Delete("nat", "POSTROUTING", jump...); err != nil {
			return false, fmt.Errorf("delete the POSTROUTING jump: %w", err)
		}
	}
	if err := ipt.ClearAndDeleteChain("nat", Chain); err != nil {
		return true, fmt.Errorf("delete chain %s: %w", Chain, err)
	}
	changed = true
	return changed, nil
}

// sameRules compares `iptables -S CHAIN` output with the wanted specs by
// the addresses they name, which is what changes between runs (iptables
// rewrites the spec text, e.g. quoting of comments, so exact text compare
// would rewrite the chain every time).
func sameRules(have []string, want [][]string) bool {
	var rules []string
	for _, h := range have {
		if len(h) > 3 && h[:3] == "-A " {
			rules = append(rules, h)
		}
	}
	if len(rules) != len(want) {
		return false
	}
	for i, w := range want {
		for _, tok := range w {
			if (tok == "RETURN" || tok == "SNAT" || isAddr(tok)) && !slices.Contains(strings.Fields(rules[i]), tok) {
				return false
			}
		}
	}
	return true
}

func isAddr(s string) bool {
	if _, err := netip.ParsePrefix(s); err == nil {
		return true
	}
	_, err := netip.ParseAddr(s)
	return err == nil
}
