package alloc

import (
	"fmt"
	"iter"
	"net/netip"
)

// Family is an address family a network gives its pods addresses of.
type Family int

const (
	IPv4 Family = iota
	IPv6
)

// FamilyOf is the family of ip.
func FamilyOf(ip netip.Addr) Family {
	if ip.Is4() {
		return IPv4
	}
	return IPv6
}

func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// ParseFamily reads "ipv4" or "ipv6" (the ipFamilies entries of a
// network's configuration).
func ParseFamily(s string) (Family, error) {
	switch s {
	case "ipv4":
		return IPv4, nil
	case "ipv6":
		return IPv6, nil
	}
	return 0, fmt.Errorf("unknown address family %q (want \"ipv4\" or \"ipv6\")", s)
}

// Addrs are the attachment's addresses: IP, then IP6 of a dual-stack one.
func (a Allocation) Addrs() []netip.Addr {
	if a.IP6.IsValid() {
		return []netip.Addr{a.IP, a.IP6}
	}
	return []netip.Addr{a.IP}
}

// Wired are the addresses the attachment's wiring routes: Addrs, and its
// egress address if it has one. Teardown and the sweep of freed
// addresses go by these; the CNI result and the pool's counts by Addrs.
func (a Allocation) Wired() []netip.Addr {
	if a.Egress4.IsValid() {
		return append(a.Addrs(), a.Egress4)
	}
	return a.Addrs()
}

// Addr is the attachment's address of family f, if it has one.
func (a Allocation) Addr(f Family) (netip.Addr, bool) {
	for _, ip := range a.Addrs() {
		if ip.IsValid() && FamilyOf(ip) == f {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// Holds reports whether ip is one of the attachment's addresses.
func (a Allocation) Holds(ip netip.Addr) bool {
	return ip.IsValid() && (a.IP == ip || a.IP6 == ip)
}

// families are the families each attachment of m gets one address of, in
// the order the allocation holds them (IPv4 in IP first).
func (m *Manager) families() []Family {
	if len(m.Families) == 0 {
		return []Family{IPv4}
	}
	has4, has6 := false, false
	for _, f := range m.Families {
		has4, has6 = has4 || f == IPv4, has6 || f == IPv6
	}
	switch {
	case has4 && has6:
		return []Family{IPv4, IPv6}
	case has6:
		return []Family{IPv6}
	}
	return []Family{IPv4}
}

// familyWalker is a pool that walks one family's addresses by itself.
type familyWalker interface {
	AddrsOf(st *State, f Family) iter.Seq2[netip.Addr, string]
}

// addrsOf yields the addresses of pool p of family f. A pool of ranges
// walks only that family's ranges, the ec2 pool only that family's
// addresses or prefixes: filtering the whole walk would go through a /64
// (or the /80) of IPv6 behind the IPv4 addresses, for ever, whenever no
// IPv4 address is free.
func addrsOf(p Pool, st *State, f Family) iter.Seq2[netip.Addr, string] {
	if rs, ok := p.(Ranges); ok {
		return rs.of(f).Addrs(st)
	}
	if w, ok := p.(familyWalker); ok {
		return w.AddrsOf(st, f)
	}
	return func(yield func(netip.Addr, string) bool) {
		for ip, eni := range p.Addrs(st) {
			if FamilyOf(ip) == f && !yield(ip, eni) {
				return
			}
		}
	}
}

// needsV3 reports whether st holds an IPv6 address anywhere, which only a
// version-3 reader knows (SchemaVersionIPv6): an EC2 section's IPv6
// prefix too, which a version-2 reader would drop on its next save.
func (s *State) needsV3() bool {
	if s.LastIP6.IsValid() || (s.LastIP.IsValid() && !s.LastIP.Is4()) || s.EC2.HasIPv6() {
		return true
	}
	if s.LastEgress4.IsValid() {
		return true
	}
	for _, a := range s.Allocations {
		if a.IP6.IsValid() || (a.IP.IsValid() && !a.IP.Is4()) || a.Egress4.IsValid() {
			return true
		}
	}
	for _, c := range s.Cooling {
		if !c.IP.Is4() {
			return true
		}
	}
	return false
}
