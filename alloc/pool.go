package alloc

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"iter"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"strings"
)

// Pool is where the addresses handed to pods come from.
type Pool interface {
	// Addrs yields, in a stable order, every address that may be handed
	// out, with the ENI that holds it ("" when the source has no ENIs).
	Addrs(st *State) iter.Seq2[netip.Addr, string]
	// Size is the number of addresses Addrs yields.
	Size(st *State) int
	// Contains reports whether Addrs yields ip.
	Contains(st *State, ip netip.Addr) bool
}

// Range is an inclusive span of addresses of one family.
type Range struct {
	First, Last netip.Addr
}

// Ranges is the static pool: addresses from configuration, computed on each
// call rather than stored, so a /16 costs nothing until it is used.
type Ranges []Range

// ParseRanges parses CIDRs ("10.0.0.0/24", network and broadcast addresses
// excluded; "fd00:10::/120", its first address, the subnet-router anycast
// one, excluded) and spans ("10.0.0.10-10.0.0.20", both ends included).
// Ranges must be IPv4 and must not overlap.
func ParseRanges(specs []string) (Ranges, error) {
	return ParseRangesOf(specs, []Family{IPv4})
}

// ParseRangesOf is ParseRanges for a network of families: its ranges may
// be of each of them (and of no other).
func ParseRangesOf(specs []string, families []Family) (Ranges, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("no ranges given")
	}
	var rs Ranges
	for _, spec := range specs {
		r, err := parseRange(strings.TrimSpace(spec), families)
		if err == nil {
			err = r.special()
		}
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", spec, err)
		}
		for _, o := range rs {
			if r.First.Compare(o.Last) <= 0 && o.First.Compare(r.Last) <= 0 {
				return nil, fmt.Errorf("range %q overlaps %s-%s", spec, o.First, o.Last)
			}
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// familyAllowed refuses an address of a family the network does not have.
func familyAllowed(a netip.Addr, families []Family) error {
	if slices.Contains(families, FamilyOf(a)) {
		return nil
	}
	if FamilyOf(a) == IPv6 {
		return fmt.Errorf("only IPv4 is supported on a network of IPv4 only (add \"ipv6\" to ipFamilies for IPv6 ranges)")
	}
	return fmt.Errorf("an IPv4 range on a network of IPv6 only (add \"ipv4\" to ipFamilies for IPv4 ranges)")
}

func parseRange(spec string, families []Family) (Range, error) {
	if first, last, ok := strings.Cut(spec, "-"); ok {
		a, err := netip.ParseAddr(strings.TrimSpace(first))
		if err != nil {
			return Range{}, err
		}
		b, err := netip.ParseAddr(strings.TrimSpace(last))
		if err != nil {
			return Range{}, err
		}
		if err := cmp.Or(familyAllowed(a, families), familyAllowed(b, families)); err != nil {
			return Range{}, err
		}
		if a.Is4() != b.Is4() {
			return Range{}, fmt.Errorf("start %s and end %s are of different families", a, b)
		}
		if a.Zone() != "" || b.Zone() != "" {
			return Range{}, fmt.Errorf("an address with a zone is not a pod address")
		}
		if b.Less(a) {
			return Range{}, fmt.Errorf("end %s is before start %s", b, a)
		}
		return Range{a, b}, nil
	}
	p, err := netip.ParsePrefix(spec)
	if err != nil {
		return Range{}, fmt.Errorf("neither a CIDR nor a first-last span: %w", err)
	}
	if err := familyAllowed(p.Addr(), families); err != nil {
		return Range{}, err
	}
	if p.Masked() != p {
		return Range{}, fmt.Errorf("host bits set, did you mean %s?", p.Masked())
	}
	first, last := p.Addr(), lastAddr(p)
	switch {
	case p.Addr().Is4() && p.Bits() <= 30:
		// The network and broadcast addresses are not host addresses.
		first, last = first.Next(), last.Prev()
	case p.Addr().Is6() && p.Bits() <= 126:
		// IPv6 has no broadcast address; the first address of a subnet
		// is its routers' anycast address (RFC 4291 2.6.1), as
		// host-local leaves it out.
		first = first.Next()
	}
	return Range{first, last}, nil
}

// notForPods are the IPv4 blocks no pod address may come from (see
// PodAddress): a range reaching into one would hand a pod 127.0.0.1, the
// gateway 169.254.1.1 or a multicast address.
var notForPods = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/3"), // multicast, reserved and broadcast
	// IPv6: ::/8 holds the unspecified, loopback and IPv4-mapped
	// addresses; fe80::1 is every pod's gateway.
	netip.MustParsePrefix("::/8"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
}

func (r Range) special() error {
	for _, p := range notForPods {
		if r.First.Compare(lastAddr(p)) <= 0 && p.Addr().Compare(r.Last) <= 0 {
			return fmt.Errorf("reaches into %s, which holds no pod addresses", p)
		}
	}
	return nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	if p.Addr().Is6() {
		b := p.Addr().As16()
		for i := p.Bits(); i < 128; i++ {
			b[i/8] |= 0x80 >> (i % 8)
		}
		return netip.AddrFrom16(b)
	}
	a := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (rs Ranges) Addrs(*State) iter.Seq2[netip.Addr, string] {
	return func(yield func(netip.Addr, string) bool) {
		for _, r := range rs {
			for a := r.First; a.Compare(r.Last) <= 0; a = a.Next() {
				if !yield(a, "") {
					return
				}
				if a == r.Last { // Next of 255.255.255.255 is invalid
					break
				}
			}
		}
	}
}

func (rs Ranges) Size(*State) int {
	n := 0
	for _, r := range rs {
		n = addSat(n, r.size())
	}
	return n
}

// of are the ranges of family f.
func (rs Ranges) of(f Family) Ranges {
	var out Ranges
	for _, r := range rs {
		if FamilyOf(r.First) == f {
			out = append(out, r)
		}
	}
	return out
}

// FamilySize is Size of the ranges of family f.
func (rs Ranges) FamilySize(f Family) int {
	n := 0
	for _, r := range rs {
		if FamilyOf(r.First) == f {
			n = addSat(n, r.size())
		}
	}
	return n
}

// size is the number of addresses in r; an IPv6 range of more than
// math.MaxInt counts as math.MaxInt.
func (r Range) size() int {
	if r.First.Is4() {
		return int(addrToUint(r.Last)-addrToUint(r.First)) + 1
	}
	a, b := r.First.As16(), r.Last.As16()
	hiA, hiB := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(b[:8])
	loA, loB := binary.BigEndian.Uint64(a[8:]), binary.BigEndian.Uint64(b[8:])
	diff, borrow := bits.Sub64(loB, loA, 0)
	if hi, _ := bits.Sub64(hiB, hiA, borrow); hi != 0 || diff >= math.MaxInt {
		return math.MaxInt
	}
	return int(diff) + 1
}

func addSat(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// AddrsAfter yields the IPv6 addresses after a, then those from the
// first up to a, in pool order (see seeker): each walk starts where the
// last one ended instead of at the first address.
func (rs Ranges) AddrsAfter(_ *State, a netip.Addr) iter.Seq2[netip.Addr, string] {
	return func(yield func(netip.Addr, string) bool) {
		start := -1
		for i, r := range rs {
			if r.First.Is6() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0 {
				start = i
			}
		}
		walk := func(from, to netip.Addr) bool {
			for x := from; x.IsValid() && x.Compare(to) <= 0; x = x.Next() {
				if !yield(x, "") {
					return false
				}
			}
			return true
		}
		if start >= 0 {
			if !walk(a.Next(), rs[start].Last) {
				return
			}
			for _, r := range rs[start+1:] {
				if r.First.Is6() && !walk(r.First, r.Last) {
					return
				}
			}
		}
		for i, r := range rs {
			if !r.First.Is6() {
				continue
			}
			if i == start {
				walk(r.First, a)
				return
			}
			if !walk(r.First, r.Last) {
				return
			}
		}
	}
}

func (rs Ranges) Contains(_ *State, a netip.Addr) bool {
	for _, r := range rs {
		if r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0 {
			return true
		}
	}
	return false
}

func addrToUint(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// StoredPool is the pool of the ec2 source: the usable addresses of the
// state's EC2 section, as `eni-cni warm` recorded them, less Exclude (the
// excludeIPs of the configuration).
type StoredPool struct {
	Exclude []netip.Prefix
	// CreatedOnly: pods live in subnets of their own, on ENIs eni-cni
	// created there; the primary ENI's addresses are never theirs.
	CreatedOnly bool
	// IPv6: the network's pods get IPv6 addresses of the section's /80
	// prefixes. Without it the pool has none of them, whatever the
	// section holds.
	IPv6 bool
}

func (p StoredPool) Addrs(st *State) iter.Seq2[netip.Addr, string] {
	if !p.IPv6 {
		return st.EC2.UsableFor(p.Exclude, p.CreatedOnly)
	}
	return func(yield func(netip.Addr, string) bool) {
		for ip, eni := range st.EC2.UsableFor(p.Exclude, p.CreatedOnly) {
			if !yield(ip, eni) {
				return
			}
		}
		for ip, eni := range st.EC2.IPv6Usable(p.CreatedOnly) {
			if !yield(ip, eni) {
				return
			}
		}
	}
}

// AddrsOf is Addrs of family f alone.
func (p StoredPool) AddrsOf(st *State, f Family) iter.Seq2[netip.Addr, string] {
	if f == IPv6 {
		return p.AddrsAfter(st, netip.Addr{})
	}
	return st.EC2.UsableFor(p.Exclude, p.CreatedOnly)
}

func (p StoredPool) Contains(st *State, ip netip.Addr) bool {
	if ip.Is6() {
		return p.IPv6 && st.EC2.IsUsable6(ip, p.CreatedOnly)
	}
	return st.EC2.IsUsableFor(ip, p.Exclude, p.CreatedOnly)
}

func (p StoredPool) Size(st *State) int {
	return addSat(p.size4(st), p.FamilySizeIn(st, IPv6))
}

func (p StoredPool) size4(st *State) int {
	n := 0
	for range st.EC2.UsableFor(p.Exclude, p.CreatedOnly) {
		n++
	}
	return n
}

// FamilySizeIn is Size of family f: the IPv6 prefixes are counted, not
// walked.
func (p StoredPool) FamilySizeIn(st *State, f Family) int {
	if f == IPv6 {
		if !p.IPv6 {
			return 0
		}
		return st.EC2.IPv6Size(p.CreatedOnly)
	}
	return p.size4(st)
}

// AddrsAfter walks the IPv6 prefixes from a (see seeker).
func (p StoredPool) AddrsAfter(st *State, a netip.Addr) iter.Seq2[netip.Addr, string] {
	if !p.IPv6 {
		return func(func(netip.Addr, string) bool) {}
	}
	return st.EC2.IPv6After(a, p.CreatedOnly)
}
