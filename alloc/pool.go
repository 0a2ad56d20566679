package alloc

import (
	"fmt"
	"iter"
	"net/netip"
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

// Range is an inclusive span of IPv4 addresses.
type Range struct {
	First, Last netip.Addr
}

// Ranges is the static pool: addresses from configuration, computed on each
// call rather than stored, so a /16 costs nothing until it is used.
type Ranges []Range

// ParseRanges parses CIDRs ("10.0.0.0/24", network and broadcast addresses
// excluded) and spans ("10.0.0.10-10.0.0.20", both ends included). Ranges
// must be IPv4 and must not overlap.
func ParseRanges(specs []string) (Ranges, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("no ranges given")
	}
	var rs Ranges
	for _, spec := range specs {
		r, err := parseRange(strings.TrimSpace(spec))
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

func parseRange(spec string) (Range, error) {
	if first, last, ok := strings.Cut(spec, "-"); ok {
		a, err := netip.ParseAddr(strings.TrimSpace(first))
		if err != nil {
			return Range{}, err
		}
		b, err := netip.ParseAddr(strings.TrimSpace(last))
		if err != nil {
			return Range{}, err
		}
		if !a.Is4() || !b.Is4() {
			return Range{}, fmt.Errorf("only IPv4 is supported")
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
	if !p.Addr().Is4() {
		return Range{}, fmt.Errorf("only IPv4 is supported")
	}
	if p.Masked() != p {
		return Range{}, fmt.Errorf("host bits set, did you mean %s?", p.Masked())
	}
	first, last := p.Addr(), lastAddr(p)
	if p.Bits() <= 30 {
		// The network and broadcast addresses are not host addresses.
		first, last = first.Next(), last.Prev()
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
		n += int(addrToUint(r.Last)-addrToUint(r.First)) + 1
	}
	return n
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
}

func (p StoredPool) Addrs(st *State) iter.Seq2[netip.Addr, string] {
	return st.EC2.Usable(p.Exclude)
}

func (p StoredPool) Contains(st *State, ip netip.Addr) bool {
	return st.EC2.IsUsable(ip, p.Exclude)
}

func (p StoredPool) Size(st *State) int {
	n := 0
	for range st.EC2.Usable(p.Exclude) {
		n++
	}
	return n
}
