package alloc

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// Salvage reads what it can from the bytes of a state file that Load
// refuses, for `eni-cni repair`: each allocation and cooling entry is
// decoded on its own, and kept only if it is well-formed and does not
// repeat a key or an address kept before it; the ec2 section and LastIP are
// kept if they decode and validate. notes says what was dropped and why. A
// file that is not a JSON object at all gives a new state and one note.
//
// Nothing salvaged is trusted as the truth about pods: repair rebuilds the
// network's allocations from the node and uses the salvaged ones only for
// other networks sharing the state directory.
func Salvage(data []byte) (st *State, notes []string) {
	st = NewState("")
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return st, []string{fmt.Sprintf("nothing could be read (%v)", err)}
	}
	// Each field on its own: one of the wrong type loses only itself.
	var raw struct {
		Allocations, Cooling []json.RawMessage
		LastIP, LastIP6, EC2 json.RawMessage
	}
	for name, dst := range map[string]*[]json.RawMessage{"allocations": &raw.Allocations, "cooling": &raw.Cooling} {
		if v, ok := fields[name]; ok && json.Unmarshal(v, dst) != nil {
			notes = append(notes, fmt.Sprintf("%s dropped: not a list", name))
		}
	}
	raw.LastIP, raw.LastIP6, raw.EC2 = fields["lastIP"], fields["lastIP6"], fields["ec2"]
	if _, v1 := fields["pool"]; v1 {
		notes = append(notes, "the version-1 pool is not salvaged: warm (or repair, from IMDS) reads it back")
	}
	keys := map[Key]bool{}
	ips := map[netip.Addr]bool{}
	for i, r := range raw.Allocations {
		var a Allocation
		if err := json.Unmarshal(r, &a); err != nil {
			notes = append(notes, fmt.Sprintf("allocation %d dropped: %v", i, err))
			continue
		}
		one := State{Version: SchemaVersionIPv6, Allocations: []Allocation{a}}
		switch err := one.validate(); {
		case err != nil:
			notes = append(notes, fmt.Sprintf("allocation %d dropped: %v", i, err))
		case keys[a.Key]:
			notes = append(notes, fmt.Sprintf("allocation %d dropped: %s appears twice", i, a.Key))
		case ips[a.IP] || ips[a.IP6]:
			notes = append(notes, fmt.Sprintf("allocation %d dropped: %s is allocated twice", i, a.IP))
		default:
			keys[a.Key], ips[a.IP] = true, true
			if a.IP6.IsValid() {
				ips[a.IP6] = true
			}
			st.Allocations = append(st.Allocations, a)
		}
	}
	for i, r := range raw.Cooling {
		var c Cooling
		if err := json.Unmarshal(r, &c); err != nil || !podAddress(c.IP) {
			notes = append(notes, fmt.Sprintf("cooling entry %d dropped", i))
			continue
		}
		st.Cooling = append(st.Cooling, c)
	}
	// The networks record is kept if it decodes: repair adds its own
	// network, and a network it drops would only be asked about again.
	if v, ok := fields["networks"]; ok {
		var names []string
		if json.Unmarshal(v, &names) != nil {
			notes = append(notes, "networks record dropped: not a list of names")
		}
		for _, n := range names {
			if n != "" {
				st.RecordNetwork(n)
			}
		}
	}
	var last netip.Addr
	if len(raw.LastIP) > 0 && json.Unmarshal(raw.LastIP, &last) == nil {
		st.LastIP = last
	}
	var last6 netip.Addr
	if len(raw.LastIP6) > 0 && json.Unmarshal(raw.LastIP6, &last6) == nil && last6.Is6() {
		st.LastIP6 = last6
	}
	// The ec2 section is kept whole or not at all: it is one instance's
	// facts, and warm reads the rest back from IMDS and EC2.
	if len(raw.EC2) > 0 && string(raw.EC2) != "null" {
		var sec section.EC2
		switch err := json.Unmarshal(raw.EC2, &sec); {
		case err != nil:
			notes = append(notes, fmt.Sprintf("ec2 section dropped: %v", err))
		case sec.Validate() != nil:
			notes = append(notes, fmt.Sprintf("ec2 section dropped: %v", sec.Validate()))
		default:
			st.EC2 = &sec
		}
	}
	return st, notes
}
