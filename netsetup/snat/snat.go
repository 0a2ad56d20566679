// Package snat owns the node's source NAT for pod traffic leaving the VPC:
// one nat chain, jumped to from POSTROUTING, that lets traffic to the VPC's
// CIDRs through untouched and rewrites the rest to the primary ENI's
// address, as the AWS VPC CNI does when external SNAT is off. Pods keep
// their VPC addresses inside the VPC; the internet sees the node.
//
// Only `eni-cni warm` links this package (it shells out to iptables through
// coreos/go-iptables); CNI verbs never do.
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

// Rules is what Ensure wants in Chain, in order.
func Rules(vpcCIDRs []netip.Prefix, primaryIP netip.Addr) [][]string {
	var out [][]string
	for _, c := range vpcCIDRs {
		out = append(out, []string{"-d", c.String(), "-m", "comment", "--comment", "eni-cni: VPC, no SNAT", "-j", "RETURN"})
	}
	out = append(out, []string{"-m", "addrtype", "!", "--dst-type", "LOCAL", "-m", "comment", "--comment", comment,
		"-j", "SNAT", "--to-source", primaryIP.String(), "--random-fully"})
	return out
}

// Ensure makes the nat table hold exactly our chain's rules and the jump to
// it. It is idempotent and cheap when nothing changed (list and compare),
// and repairs the rules if someone flushed them.
func Ensure(vpcCIDRs []netip.Prefix, primaryIP netip.Addr) (changed bool, err error) {
	if !primaryIP.Is4() || len(vpcCIDRs) == 0 {
		return false, fmt.Errorf("snat needs the primary address and the VPC CIDRs (have %s, %v)", primaryIP, vpcCIDRs)
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
	want := Rules(vpcCIDRs, primaryIP)
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
	jump := []string{"-m", "comment", "--comment", comment, "-j", Chain}
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
