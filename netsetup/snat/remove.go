package snat

import (
	"fmt"

	"github.com/coreos/go-iptables/iptables"
)

// Present reports whether the nat table has our chain (and so, perhaps,
// the jump to it): uninstall says what it will remove before it does.
func Present() (bool, error) {
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return false, fmt.Errorf("iptables: %w", err)
	}
	exists, err := ipt.ChainExists("nat", Chain)
	if err != nil {
		return false, fmt.Errorf("look for chain %s: %w", Chain, err)
	}
	// Without the chain there is no jump: iptables refuses a jump to a
	// chain that does not exist.
	return exists, nil
}
