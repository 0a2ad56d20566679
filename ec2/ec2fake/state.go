package ec2fake

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// subnet is one VPC subnet and the address bookkeeping EC2 does for it:
// every private address and every delegated /28 belongs to exactly one ENI.
type subnet struct {
	id       string
	cidr     netip.Prefix
	az       string
	tags     map[string]string
	ips      map[netip.Addr]string   // single addresses -> owning ENI id
	prefixes map[netip.Prefix]string // delegated /28s -> owning ENI id
	// next is where allocIP starts looking: no address below it is free.
	// Without it a world of many instances allocates in quadratic time.
	next uint32
	// v6 is its IPv6 /64 and what of it is given out; nil without one.
	v6 *v6
}

// eni is the server's record of one network interface.
type eni struct {
	id          string
	mac         string
	subnetID    string
	description string
	sgs         []string
	primary     netip.Addr // invalid for an ENI without IPv4
	secondaries []netip.Addr
	prefixes    []netip.Prefix
	ipv6s       []netip.Addr
	prefixes6   []netip.Prefix
	tags        map[string]string
	att         *attachment
	created     uint64 // creation order, for stable listings
}

type attachment struct {
	id                  string
	instanceID          string
	device              int
	card                int // network card index
	deleteOnTermination bool
	at                  time.Time
}

// slots is how many of the per-ENI IPv4 slots are taken: the primary, every
// secondary address and every /28 prefix count as one each.
func (e *eni) slots() int {
	n := len(e.secondaries) + len(e.prefixes)
	if e.primary.IsValid() {
		n++
	}
	return n
}

func (e *eni) status() string {
	if e.att != nil {
		return "in-use"
	}
	return "available"
}

// privateIPs returns the primary address first, then the secondaries in the
// order they were assigned, which is also how IMDS local-ipv4s lists them.
func (e *eni) privateIPs() []netip.Addr {
	out := make([]netip.Addr, 0, 1+len(e.secondaries))
	if e.primary.IsValid() {
		out = append(out, e.primary)
	}
	return append(out, e.secondaries...)
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func fromU32(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// bounds returns the first and last address of the subnet as integers.
func (sn *subnet) bounds() (uint32, uint32) {
	first := u32(sn.cidr.Addr())
	size := uint32(1) << (32 - sn.cidr.Bits())
	return first, first + size - 1
}

// reserved reports whether EC2 keeps the address for itself: the network
// address, the VPC router, DNS, a future-use address and the broadcast.
func (sn *subnet) reserved(a netip.Addr) bool {
	first, last := sn.bounds()
	v := u32(a)
	return v < first+4 || v == last
}

func (sn *subnet) inPrefix(a netip.Addr) bool {
	_, ok := sn.prefixes[netip.PrefixFrom(a, 28).Masked()]
	return ok
}

func (sn *subnet) free(a netip.Addr) bool {
	if !sn.cidr.Contains(a) || sn.reserved(a) || sn.inPrefix(a) {
		return false
	}
	_, used := sn.ips[a]
	return !used
}

func (sn *subnet) claimIP(a netip.Addr, owner string) error {
	switch {
	case !a.Is4() || !sn.cidr.Contains(a):
		return apiErr("InvalidParameterValue", "Address %s does not fall within the subnet's address range", a)
	case sn.reserved(a):
		return apiErr("InvalidParameterValue", "Address %s is reserved by AWS in subnet %s", a, sn.id)
	case !sn.free(a):
		return apiErr("InvalidIPAddress.InUse", "The specified address %s is already in use", a)
	}
	sn.ips[a] = owner
	return nil
}

// allocIP hands out the lowest free address, which keeps runs reproducible.
func (sn *subnet) allocIP(owner string) (netip.Addr, error) {
	first, last := sn.bounds()
	for v := max(first+4, sn.next); v < last; v++ {
		if a := fromU32(v); sn.free(a) {
			sn.ips[a] = owner
			sn.next = v + 1
			return a, nil
		}
	}
	return netip.Addr{}, apiErr("InsufficientFreeAddressesInSubnet",
		"The specified subnet %s does not have enough free addresses to satisfy the request.", sn.id)
}

// releaseIP gives a back to the subnet.
func (sn *subnet) releaseIP(a netip.Addr) {
	delete(sn.ips, a)
	sn.next = min(sn.next, u32(a))
}

// releasePrefix gives a delegated /28 back to the subnet.
func (sn *subnet) releasePrefix(p netip.Prefix) {
	delete(sn.prefixes, p)
	sn.next = min(sn.next, u32(p.Addr()))
}

// blockFree reports whether a /28 inside the subnet can be delegated: no
// reserved address, no single address in use, not delegated already.
func (sn *subnet) blockFree(p netip.Prefix) bool {
	if _, taken := sn.prefixes[p]; taken {
		return false
	}
	base := u32(p.Addr())
	for i := uint32(0); i < 16; i++ {
		a := fromU32(base + i)
		if _, used := sn.ips[a]; used || sn.reserved(a) {
			return false
		}
	}
	return true
}

func (sn *subnet) claimPrefix(p netip.Prefix, owner string) error {
	if !p.Addr().Is4() || p.Bits() != 28 || p.Masked() != p || !sn.cidr.Contains(p.Addr()) || sn.cidr.Bits() > 28 {
		return apiErr("InvalidParameterValue", "Prefix %s is not a /28 inside subnet %s (%s)", p, sn.id, sn.cidr)
	}
	if !sn.blockFree(p) {
		return apiErr("InvalidParameterValue", "Prefix %s overlaps addresses already in use in subnet %s", p, sn.id)
	}
	sn.prefixes[p] = owner
	return nil
}

func (sn *subnet) allocPrefix(owner string) (netip.Prefix, error) {
	first, last := sn.bounds()
	for v := first; v+15 <= last && v >= first; v += 16 {
		p := netip.PrefixFrom(fromU32(v), 28)
		if sn.blockFree(p) {
			sn.prefixes[p] = owner
			return p, nil
		}
	}
	return netip.Prefix{}, apiErr("InsufficientCidrBlocks",
		"The specified subnet %s does not have enough contiguous free space for a /28 prefix.", sn.id)
}

// available is DescribeSubnets' AvailableIpAddressCount.
func (sn *subnet) available() int {
	size := 1 << (32 - sn.cidr.Bits())
	return size - 5 - len(sn.ips) - 16*len(sn.prefixes)
}

// mix is the splitmix64 finalizer: a bijection, so distinct sequence numbers
// give distinct, random-looking resource ids while staying deterministic.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// newIDLocked returns an id in EC2's long format: prefix, dash, 17 hex digits.
func (s *Server) newIDLocked(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s-0%016x", prefix, mix(s.seq))
}

// newMACLocked returns a unique locally administered unicast MAC, like the
// 02:xx:... addresses EC2 gives ENIs.
func (s *Server) newMACLocked() string {
	for {
		s.seq++
		v := mix(s.seq)
		mac := fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
		if !s.macs[mac] {
			s.macs[mac] = true
			return mac
		}
	}
}

// ENI is a snapshot of one network interface as EC2 (not IMDS) sees it.
type ENI struct {
	ID                  string            `json:"id"`
	MAC                 string            `json:"mac"`
	SubnetID            string            `json:"subnetId"`
	SubnetCIDR          string            `json:"subnetCidr"`
	Description         string            `json:"description,omitempty"`
	Status              string            `json:"status"`
	InstanceID          string            `json:"instanceId,omitempty"`
	AttachmentID        string            `json:"attachmentId,omitempty"`
	DeviceIndex         int               `json:"deviceIndex"` // -1 when detached
	NetworkCard         int               `json:"networkCard,omitempty"`
	DeleteOnTermination bool              `json:"deleteOnTermination"`
	PrimaryIP           string            `json:"primaryIp,omitempty"`
	SecondaryIPs        []string          `json:"secondaryIps"`
	Prefixes            []string          `json:"prefixes"`
	IPv6Prefixes        []string          `json:"ipv6Prefixes,omitempty"`
	IPv6s               []string          `json:"ipv6s,omitempty"`
	SecurityGroupIDs    []string          `json:"securityGroupIds"`
	Tags                map[string]string `json:"tags,omitempty"`
}

func (s *Server) snapshotLocked(e *eni) ENI {
	out := ENI{
		ID: e.id, MAC: e.mac, SubnetID: e.subnetID, Description: e.description,
		Status: e.status(), DeviceIndex: -1,
		SecondaryIPs:     make([]string, 0, len(e.secondaries)),
		Prefixes:         make([]string, 0, len(e.prefixes)),
		SecurityGroupIDs: slices.Clone(e.sgs),
		Tags:             maps.Clone(e.tags),
	}
	if sn := s.subnets[e.subnetID]; sn != nil {
		out.SubnetCIDR = sn.cidr.String()
	}
	if e.primary.IsValid() {
		out.PrimaryIP = e.primary.String()
	}
	for _, a := range e.secondaries {
		out.SecondaryIPs = append(out.SecondaryIPs, a.String())
	}
	for _, p := range e.prefixes {
		out.Prefixes = append(out.Prefixes, p.String())
	}
	out.IPv6Prefixes, out.IPv6s = prefixStrings(e.prefixes6), addrStrings(e.ipv6s)
	if e.att != nil {
		out.InstanceID, out.AttachmentID = e.att.instanceID, e.att.id
		out.DeviceIndex, out.DeleteOnTermination, out.NetworkCard = e.att.device, e.att.deleteOnTermination, e.att.card
	}
	return out
}

// slot orders attachments of an instance: by card, then device index.
func (a *attachment) slot() int { return a.card<<16 + a.device }

// sortedENIsLocked lists attached ENIs by device index, then detached ones in
// creation order (ENIs of several instances at one index too).
func (s *Server) sortedENIsLocked() []*eni {
	out := slices.Collect(maps.Values(s.enis))
	key := func(e *eni) int {
		if e.att == nil {
			return 1 << 30
		}
		return e.att.slot()
	}
	slices.SortFunc(out, func(a, b *eni) int {
		if ka, kb := key(a), key(b); ka != kb {
			return ka - kb
		}
		return int(a.created) - int(b.created)
	})
	return out
}

// lookupENILocked resolves an ENI id the way EC2 does: malformed ids and
// unknown ids are different errors.
func (s *Server) lookupENILocked(id string) (*eni, error) {
	if id == "" {
		return nil, apiErr("MissingParameter", "The request must contain the parameter NetworkInterfaceId")
	}
	if !validID(id, "eni") {
		return nil, apiErr("InvalidNetworkInterfaceID.Malformed", "Invalid id: \"%s\" (expecting \"eni-...\")", id)
	}
	e := s.enis[id]
	if e == nil {
		return nil, apiErr("InvalidNetworkInterfaceID.NotFound", "The networkInterface ID '%s' does not exist", id)
	}
	return e, nil
}

func validID(id, prefix string) bool {
	rest, ok := strings.CutPrefix(id, prefix+"-")
	if !ok || len(rest) < 8 {
		return false
	}
	for _, c := range rest {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
