package alloc

import (
	"net/netip"
)

// Egress4Range is where the egress addresses of IPv6-only pods come from:
// link-local, so no VPC or node address is spent and none can clash with
// a destination, and the AWS VPC CNI's range (its egress-cni plugin), so
// that what operators and policies know of IPv6 EKS pods holds here.
func Egress4Range() netip.Prefix { return netip.MustParsePrefix("169.254.172.0/22") }

// egress4Addr reports whether ip is one Egress4Range hands out: not its
// network or broadcast address.
func egress4Addr(ip netip.Addr) bool {
	r := Egress4Range()
	return ip.Is4() && r.Contains(ip) && ip != r.Addr() && ip != lastOf(r)
}

func lastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// pickEgress4 is the first egress address neither held nor cooling after
// the last one given, wrapping around: round-robin, as pod addresses.
func pickEgress4(st *State) (netip.Addr, bool) {
	taken := taken(st)
	r := Egress4Range()
	ip := st.LastEgress4
	if !egress4Addr(ip) {
		ip = r.Addr()
	}
	for range 1 << (32 - r.Bits()) {
		if ip = ip.Next(); !r.Contains(ip) {
			ip = r.Addr()
		}
		if egress4Addr(ip) && !taken[ip] {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// egress4Counts are the counts of Egress4Range, for the message of a
// range with nothing free.
func egress4Counts(st *State) Counts {
	c := Counts{Total: 1<<(32-Egress4Range().Bits()) - 2}
	for _, a := range st.Allocations {
		if a.Egress4.IsValid() {
			c.Allocated++
		}
	}
	for _, cl := range st.Cooling {
		if egress4Addr(cl.IP) {
			c.Cooling++
		}
	}
	c.Free = c.Total - c.Allocated - c.Cooling
	return c
}
