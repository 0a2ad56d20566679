package netsetup

import "net/netip"

// Routing is the policy routing of a pod address: the table of its `from`
// rule (0: none, the main table) and, with SNAT, the destinations the rule
// is limited to. A pool's provider decides it (an address on a secondary
// ENI routes through that ENI's table); Pod carries it into the wiring.
type Routing struct {
	Table    int
	FromDsts []netip.Prefix
}
