package snat

import (
	"fmt"

	"github.com/coreos/go-iptables/iptables"
)

// Present reports whether the nat or the filter table has our chain (and
// so, perhaps, the jump to it): uninstall says what it will remove before
// it does.
func Present() (bool, error) { return present(natTable, filterTable) }

// Egress4Present is Present of Egress4Chain.
func Egress4Present() (bool, error) { return present(egressNat, egressFilter) }

func present(tables ...table) (bool, error) {
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return false, fmt.Errorf("iptables: %w", err)
	}
	for _, tb := range tables {
		// Without the chain there is no jump: iptables refuses a jump
		// to a chain that does not exist.
		exists, err := ipt.ChainExists(tb.name, tb.chain)
		if err != nil {
			return false, fmt.Errorf("look for chain %s in %s: %w", tb.chain, tb.name, err)
		}
		if exists {
			return true, nil
		}
	}
	return false, nil
}

// Check lists what the node lacks of s, in words for `eni-cni doctor`
// (nothing when all is in place). It changes nothing. An error means it
// could not look, not that something is missing.
func Check(s Spec) (missing []string, err error) {
	if err := s.valid(); err != nil {
		return nil, err
	}
	return checkTables([]wanted{
		{natTable, Rules(s), "the SNAT of pod traffic leaving the VPC"},
		{filterTable, DropRules(s), "the drop of conntrack-INVALID pod traffic SNAT cannot rewrite"},
	})
}

// wanted is one table's chain as it should be, and what it is for, in
// words for a report of what is missing.
type wanted struct {
	tb    table
	rules [][]string
	what  string
}

// checkTables lists, in words, what the node lacks of each wanted chain.
func checkTables(ws []wanted) (missing []string, err error) {
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return nil, fmt.Errorf("iptables: %w", err)
	}
	for _, w := range ws {
		m, err := checkTable(ipt, w.tb, w.rules, w.what)
		if err != nil {
			return nil, err
		}
		missing = append(missing, m...)
	}
	return missing, nil
}

func checkTable(ipt *iptables.IPTables, tb table, want [][]string, what string) ([]string, error) {
	exists, err := ipt.ChainExists(tb.name, tb.chain)
	if err != nil {
		return nil, fmt.Errorf("look for chain %s in %s: %w", tb.chain, tb.name, err)
	}
	if !exists {
		return []string{fmt.Sprintf("iptables %s chain %s (%s)", tb.name, tb.chain, what)}, nil
	}
	var missing []string
	have, err := ipt.List(tb.name, tb.chain)
	if err != nil {
		return nil, fmt.Errorf("list chain %s in %s: %w", tb.chain, tb.name, err)
	}
	if !sameRules(have, want) {
		missing = append(missing, fmt.Sprintf("the pool's rules in %s chain %s (%s)", tb.name, tb.chain, what))
	}
	if ok, err := ipt.Exists(tb.name, tb.hook, tb.jump...); err != nil {
		return nil, fmt.Errorf("look for the %s jump: %w", tb.hook, err)
	} else if !ok {
		missing = append(missing, fmt.Sprintf("the jump to %s from %s %s", tb.chain, tb.name, tb.hook))
	}
	return missing, nil
}
