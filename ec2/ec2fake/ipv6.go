package ec2fake

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
)

// IPv6 as EC2 does it: a subnet may have one IPv6 /64; an ENI in it may
// get IPv6 addresses and delegated /80 prefixes of it (AssignIpv6Addresses),
// each taking one of the type's per-ENI IPv6 slots (as many as its IPv4
// ones), and give them back (UnassignIpv6Addresses). IMDS lists them under
// the ENI's mac (ipv6s, ipv6-prefix, subnet-ipv6-cidr-blocks,
// vpc-ipv6-cidr-blocks) and DescribeNetworkInterfaces in ipv6AddressesSet
// and ipv6PrefixSet.

// v6 is a subnet's IPv6 bookkeeping: every address and /80 given out,
// with its ENI. The first /80 of the /64 holds the single addresses (EC2
// reserves the first four of the subnet); prefixes come from the others.
type v6 struct {
	cidr     netip.Prefix // the /64; invalid: the subnet has no IPv6
	owner    map[netip.Prefix]string
	nextAddr uint64 // the next single address's interface ID
	nextPfx  uint64 // the next /80's index in the /64
}

func newV6(cidr netip.Prefix) *v6 {
	return &v6{cidr: cidr, owner: map[netip.Prefix]string{}, nextAddr: 4, nextPfx: 1}
}

// at is the address of the /64 with interface ID id.
func (v *v6) at(id uint64) netip.Addr {
	b := v.cidr.Addr().As16()
	binary.BigEndian.PutUint64(b[8:], id)
	return netip.AddrFrom16(b)
}

func (v *v6) allocAddr(owner string) (netip.Addr, error) {
	for ; v.nextAddr < 1<<48; v.nextAddr++ {
		p := netip.PrefixFrom(v.at(v.nextAddr), 128)
		if _, taken := v.owner[p]; !taken {
			v.owner[p] = owner
			v.nextAddr++
			return p.Addr(), nil
		}
	}
	return netip.Addr{}, apiErr("InsufficientFreeAddressesInSubnet", "The specified subnet does not have enough free IPv6 addresses to satisfy the request.")
}

func (v *v6) allocPrefix(owner string) (netip.Prefix, error) {
	for ; v.nextPfx < 1<<16; v.nextPfx++ {
		p := netip.PrefixFrom(v.at(v.nextPfx<<48), 80)
		if _, taken := v.owner[p]; !taken {
			v.owner[p] = owner
			v.nextPfx++
			return p, nil
		}
	}
	return netip.Prefix{}, apiErr("InsufficientCidrBlocks", "The specified subnet does not have enough contiguous free IPv6 space for a /80 prefix.")
}

// claim takes p (an address as a /128, or a /80) for owner.
func (v *v6) claim(p netip.Prefix, owner string) error {
	if !v.cidr.Contains(p.Addr()) || (p.Bits() != 128 && p.Bits() != 80) || p.Masked() != p {
		return apiErr("InvalidParameterValue", "The IPv6 address or prefix %s is not in the subnet's IPv6 CIDR block %s.", p, v.cidr)
	}
	for q := range v.owner {
		if q.Overlaps(p) {
			return apiErr("InvalidParameterValue", "The IPv6 address or prefix %s is already in use.", p)
		}
	}
	v.owner[p] = owner
	return nil
}

// ipv6Request is what AssignIpv6Addresses asks for.
type ipv6Request struct {
	count, prefixCount int
	ips                []netip.Addr
	prefixes           []netip.Prefix
}

func (r ipv6Request) slots() int { return r.count + r.prefixCount + len(r.ips) + len(r.prefixes) }

func readIPv6Request(p params) (ipv6Request, error) {
	var r ipv6Request
	var err error
	var hasCount, hasPrefixCount bool
	if r.count, hasCount, err = p.optInt("Ipv6AddressCount"); err != nil {
		return r, err
	}
	if r.prefixCount, hasPrefixCount, err = p.optInt("Ipv6PrefixCount"); err != nil {
		return r, err
	}
	if (hasCount && r.count < 1) || (hasPrefixCount && r.prefixCount < 1) {
		return r, apiErr("InvalidParameterValue", "Address and prefix counts must be at least 1")
	}
	for _, s := range p.list("Ipv6Addresses", "") {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is6() || a.Is4In6() {
			return r, apiErr("InvalidParameterValue", "Invalid value '%s' for IPv6 address", s)
		}
		r.ips = append(r.ips, a)
	}
	for _, s := range p.list("Ipv6Prefix", "") {
		q, err := netip.ParsePrefix(s)
		if err != nil || !q.Addr().Is6() || q.Bits() != 80 {
			return r, apiErr("InvalidParameterValue", "Invalid value '%s' for IPv6 prefix (want a /80)", s)
		}
		r.prefixes = append(r.prefixes, q)
	}
	addrs, pfx := r.count > 0 || len(r.ips) > 0, r.prefixCount > 0 || len(r.prefixes) > 0
	switch {
	case addrs && pfx:
		return r, apiErr("InvalidParameterCombination", "You may specify either IPv6 addresses or IPv6 prefixes, but not both.")
	case r.count > 0 && len(r.ips) > 0:
		return r, apiErr("InvalidParameterCombination", "Specify either Ipv6AddressCount or Ipv6Addresses, not both.")
	case r.prefixCount > 0 && len(r.prefixes) > 0:
		return r, apiErr("InvalidParameterCombination", "Specify either Ipv6PrefixCount or Ipv6Prefix, not both.")
	case r.slots() == 0:
		return r, apiErr("MissingParameter", "Either Ipv6AddressCount, Ipv6Addresses, Ipv6PrefixCount or Ipv6Prefix must be specified")
	}
	return r, nil
}

type assignIPv6Response struct {
	meta
	AssignedIPv6Addresses set[string] `xml:"assignedIpv6Addresses"`
	AssignedIPv6Prefixes  set[string] `xml:"assignedIpv6PrefixSet"`
	NetworkInterfaceID    string      `xml:"networkInterfaceId"`
}

func (s *Server) assignIPv6Addresses(p params) (response, error) {
	e, err := s.lookupENILocked(p.Get("NetworkInterfaceId"))
	if err != nil {
		return nil, err
	}
	r, err := readIPv6Request(p)
	if err != nil {
		return nil, err
	}
	sn := s.subnets[e.subnetID]
	if sn.v6 == nil {
		return nil, apiErr("InvalidParameterValue", "The subnet '%s' does not have an IPv6 CIDR block associated with it.", sn.id)
	}
	if len(e.ipv6s)+len(e.prefixes6)+r.slots() > s.limitsOfLocked(e).IPv4PerENI {
		return nil, apiErr("PrivateIpAddressLimitExceeded", "Number of IPv6 addresses and prefixes will exceed the limit of the network interface.")
	}
	var got []netip.Prefix
	fail := func(err error) (response, error) {
		for _, q := range got {
			delete(sn.v6.owner, q)
		}
		return nil, err
	}
	for _, a := range r.ips {
		if err := sn.v6.claim(netip.PrefixFrom(a, 128), e.id); err != nil {
			return fail(err)
		}
		got = append(got, netip.PrefixFrom(a, 128))
	}
	for _, q := range r.prefixes {
		if err := sn.v6.claim(q, e.id); err != nil {
			return fail(err)
		}
		got = append(got, q)
	}
	for range r.count {
		a, err := sn.v6.allocAddr(e.id)
		if err != nil {
			return fail(err)
		}
		got = append(got, netip.PrefixFrom(a, 128))
	}
	for range r.prefixCount {
		q, err := sn.v6.allocPrefix(e.id)
		if err != nil {
			return fail(err)
		}
		got = append(got, q)
	}
	resp := &assignIPv6Response{NetworkInterfaceID: e.id}
	for _, q := range got {
		if q.Bits() == 128 {
			e.ipv6s = append(e.ipv6s, q.Addr())
			resp.AssignedIPv6Addresses.Items = append(resp.AssignedIPv6Addresses.Items, q.Addr().String())
		} else {
			e.prefixes6 = append(e.prefixes6, q)
			resp.AssignedIPv6Prefixes.Items = append(resp.AssignedIPv6Prefixes.Items, q.String())
		}
	}
	s.noteLocked(e)
	s.publishENILocked(e, true)
	return resp, nil
}

type unassignIPv6Response struct {
	meta
	NetworkInterfaceID      string      `xml:"networkInterfaceId"`
	UnassignedIPv6Addresses set[string] `xml:"unassignedIpv6Addresses"`
	UnassignedIPv6Prefixes  set[string] `xml:"unassignedIpv6PrefixSet"`
}

func (s *Server) unassignIPv6Addresses(p params) (response, error) {
	e, err := s.lookupENILocked(p.Get("NetworkInterfaceId"))
	if err != nil {
		return nil, err
	}
	var gone []netip.Prefix
	for _, v := range p.list("Ipv6Addresses", "") {
		a, err := netip.ParseAddr(v)
		if err != nil || !slices.Contains(e.ipv6s, a) {
			return nil, apiErr("InvalidParameterValue", "Some of the specified addresses are not assigned to interface %s", e.id)
		}
		gone = append(gone, netip.PrefixFrom(a, 128))
	}
	for _, v := range p.list("Ipv6Prefix", "") {
		q, err := netip.ParsePrefix(v)
		if err != nil || !slices.Contains(e.prefixes6, q) {
			return nil, apiErr("InvalidParameterValue", "Some of the specified prefixes are not assigned to interface %s", e.id)
		}
		gone = append(gone, q)
	}
	if len(gone) == 0 {
		return nil, apiErr("MissingParameter", "Either Ipv6Addresses or Ipv6Prefix must be specified")
	}
	resp := &unassignIPv6Response{NetworkInterfaceID: e.id}
	for _, q := range gone {
		s.releaseIPv6Locked(e, q)
		if q.Bits() == 128 {
			resp.UnassignedIPv6Addresses.Items = append(resp.UnassignedIPv6Addresses.Items, q.Addr().String())
		} else {
			resp.UnassignedIPv6Prefixes.Items = append(resp.UnassignedIPv6Prefixes.Items, q.String())
		}
	}
	s.noteLocked(e)
	s.publishENILocked(e, true)
	return resp, nil
}

// releaseIPv6Locked gives q (an address as a /128, or a prefix) of e back
// to its subnet.
func (s *Server) releaseIPv6Locked(e *eni, q netip.Prefix) {
	if sn := s.subnets[e.subnetID]; sn.v6 != nil {
		delete(sn.v6.owner, q)
	}
	if q.Bits() == 128 {
		e.ipv6s = slices.DeleteFunc(e.ipv6s, func(a netip.Addr) bool { return a == q.Addr() })
	} else {
		e.prefixes6 = slices.DeleteFunc(e.prefixes6, func(p netip.Prefix) bool { return p == q })
	}
}

// UnassignIPv6Prefix takes prefix away from eniID behind the instance's
// back (an operator, another tool): drift for warm to notice.
func (s *Server) UnassignIPv6Prefix(eniID, prefix string) error {
	q, err := netip.ParsePrefix(prefix)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.lookupENILocked(eniID)
	if err != nil {
		return err
	}
	if !slices.Contains(e.prefixes6, q) {
		return apiErr("InvalidParameterValue", "prefix %s is not assigned to %s", q, e.id)
	}
	s.releaseIPv6Locked(e, q)
	s.noteLocked(e)
	s.publishENILocked(e, true)
	return nil
}

type xmlIPv6Address struct {
	IPv6Address   string `xml:"ipv6Address"`
	IsPrimaryIPv6 bool   `xml:"isPrimaryIpv6"`
}

type xmlIPv6Prefix struct {
	IPv6Prefix string `xml:"ipv6Prefix"`
}

type xmlIPv6CidrAssociation struct {
	IPv6CidrBlock      string `xml:"ipv6CidrBlock"`
	AssociationID      string `xml:"associationId"`
	IPv6CidrBlockState struct {
		State string `xml:"state"`
	} `xml:"ipv6CidrBlockState"`
}

// ipv6Leaves are the IMDS entries of e's IPv6 (absent when empty, as
// IMDS leaves them out).
func (s *Server) ipv6Leaves(e *eni, set func(k, v string)) {
	sn := s.subnets[e.subnetID]
	if sn.v6 == nil {
		return
	}
	set("subnet-ipv6-cidr-blocks", sn.v6.cidr.String())
	if vpc := s.vpcIPv6(); vpc.IsValid() {
		set("vpc-ipv6-cidr-blocks", vpc.String())
	}
	if len(e.ipv6s) > 0 {
		set("ipv6s", strings.Join(addrStrings(e.ipv6s), "\n"))
	}
	if len(e.prefixes6) > 0 {
		set("ipv6-prefix", strings.Join(prefixStrings(e.prefixes6), "\n"))
	}
}

// vpcIPv6 is the VPC's IPv6 block: the /56 of the first subnet with one.
func (s *Server) vpcIPv6() netip.Prefix {
	for _, id := range s.subnetOrder {
		if sn := s.subnets[id]; sn.v6 != nil {
			return netip.PrefixFrom(sn.v6.cidr.Addr(), 56).Masked()
		}
	}
	return netip.Prefix{}
}

func prefixes128(ips []netip.Addr) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ips))
	for _, a := range ips {
		out = append(out, netip.PrefixFrom(a, 128))
	}
	return out
}
