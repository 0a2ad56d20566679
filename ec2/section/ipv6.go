package section

import (
	"iter"
	"math"
	"net/netip"
	"slices"
	"time"
)

// A network of IPv6 gets its pods' addresses from /80 prefixes delegated to
// the primary ENI (warm asks for one, as the AWS VPC CNI does). A /80
// holds 2^48 addresses: the pool walks its prefixes lazily instead of
// listing addresses as Addrs does for IPv4.

// IPv6PrefixLen is the length of the IPv6 prefixes EC2 delegates to ENIs.
const IPv6PrefixLen = 80

// Delegated6 reports whether p is a prefix EC2 delegates for pods: an
// IPv6 /80, never an IPv4-mapped one. Every writer of IPv6Prefixes (the
// assign reply, Describe, IMDS) checks it: a /128 or a mapped IPv4 prefix
// saved is a state file Validate refuses on the next load (every command
// failing until a repair), and a ::/0 or /64 a pool of addresses EC2
// routes nowhere near this ENI.
func Delegated6(p netip.Prefix) bool {
	return p.IsValid() && p.Addr().Is6() && !p.Addr().Is4In6() && p.Bits() == IPv6PrefixLen
}

// prefix6 is a usable prefix with its ENI.
type prefix6 struct {
	p   netip.Prefix
	eni string
}

// prefixes6 are the IPv6 prefixes pods may get addresses of, in ENI then
// prefix order.
func (s *EC2) prefixes6(createdOnly bool) []prefix6 {
	if s == nil {
		return nil
	}
	var out []prefix6
	for _, e := range s.ENIs {
		if !e.ForPods(createdOnly) {
			continue
		}
		for _, p := range e.IPv6Prefixes {
			out = append(out, prefix6{p.Prefix.Masked(), e.ID})
		}
	}
	return out
}

// HasIPv6 reports whether any ENI holds an IPv6 prefix.
func (s *EC2) HasIPv6() bool {
	if s == nil {
		return false
	}
	return slices.ContainsFunc(s.ENIs, func(e ENI) bool { return len(e.IPv6Prefixes) > 0 })
}

// firstPod6 and lastAddr6 bound the pod addresses of a prefix: all but its
// first, whose interface ID is all zeros (the subnet-router anycast
// address of a prefix used as a subnet, RFC 4291 2.6.1; the static pool
// leaves it out of an IPv6 CIDR for the same reason). The AWS VPC CNI
// hands out the first one too; one address of 2^48 is worth not
// depending on how the VPC treats it.
func firstPod6(p netip.Prefix) netip.Addr { return p.Masked().Addr().Next() }

func lastAddr6(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As16()
	for i := p.Bits(); i < 128; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return netip.AddrFrom16(b)
}

// podAddr6 reports whether ip is a pod address of p.
func podAddr6(p netip.Prefix, ip netip.Addr) bool {
	return p.Contains(ip) && ip != p.Masked().Addr()
}

// IPv6Usable yields the IPv6 pod addresses of the usable prefixes, in
// order (UsableFor's IPv6 counterpart).
func (s *EC2) IPv6Usable(createdOnly bool) iter.Seq2[netip.Addr, string] {
	return s.IPv6After(netip.Addr{}, createdOnly)
}

// IPv6After yields the IPv6 pod addresses after a, then those from the
// first up to a: a pick starts where the last one ended instead of
// walking a /80 from its start.
func (s *EC2) IPv6After(a netip.Addr, createdOnly bool) iter.Seq2[netip.Addr, string] {
	return func(yield func(netip.Addr, string) bool) {
		ps := s.prefixes6(createdOnly)
		start := slices.IndexFunc(ps, func(p prefix6) bool { return a.IsValid() && podAddr6(p.p, a) })
		walk := func(p prefix6, from, to netip.Addr) bool {
			for x := from; x.IsValid() && x.Compare(to) <= 0; x = x.Next() {
				if !yield(x, p.eni) {
					return false
				}
			}
			return true
		}
		if start >= 0 {
			if !walk(ps[start], a.Next(), lastAddr6(ps[start].p)) {
				return
			}
			for _, p := range ps[start+1:] {
				if !walk(p, firstPod6(p.p), lastAddr6(p.p)) {
					return
				}
			}
		}
		for i, p := range ps {
			if i == start {
				walk(p, firstPod6(p.p), a)
				return
			}
			if !walk(p, firstPod6(p.p), lastAddr6(p.p)) {
				return
			}
		}
	}
}

// IPv6Size is how many addresses IPv6Usable yields, math.MaxInt when more.
func (s *EC2) IPv6Size(createdOnly bool) int {
	n := 0
	for _, p := range s.prefixes6(createdOnly) {
		host := 128 - p.p.Bits()
		if host >= 62 {
			return math.MaxInt
		}
		size := 1<<host - 1
		if n > math.MaxInt-size {
			return math.MaxInt
		}
		n += size
	}
	return n
}

// IsUsable6 reports whether IPv6Usable yields ip.
func (s *EC2) IsUsable6(ip netip.Addr, createdOnly bool) bool {
	return slices.ContainsFunc(s.prefixes6(createdOnly), func(p prefix6) bool { return podAddr6(p.p, ip) })
}

// ENIOf6 is the ENI whose prefix holds ip, usable or not.
func (s *EC2) ENIOf6(ip netip.Addr) (string, bool) {
	if s == nil {
		return "", false
	}
	for _, e := range s.ENIs {
		for _, p := range e.IPv6Prefixes {
			if p.Prefix.Contains(ip) {
				return e.ID, true
			}
		}
	}
	return "", false
}

// AddIPv6Prefixes records prefixes of eniID with their origin and returns
// how many were new; known ones keep their record.
func (s *EC2) AddIPv6Prefixes(eniID, origin string, ps []netip.Prefix, now time.Time) int {
	i := slices.IndexFunc(s.ENIs, func(e ENI) bool { return e.ID == eniID })
	if i < 0 {
		return 0
	}
	e := &s.ENIs[i]
	n := 0
	for _, p := range ps {
		p = p.Masked()
		if !slices.ContainsFunc(e.IPv6Prefixes, func(k IPv6Prefix) bool { return k.Prefix == p }) {
			e.IPv6Prefixes = append(e.IPv6Prefixes, IPv6Prefix{Prefix: p, Origin: origin, AddedAt: now.UTC()})
			n++
		}
	}
	return n
}
