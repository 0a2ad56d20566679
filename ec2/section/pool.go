// Package section is the EC2 provider's part of the store: the typed EC2
// section of the state file (the instance, its ENIs and limits, the pool
// with the origin of each address, tombstones, pending ENIs) and the pure
// logic that folds what IMDS lists into it. It has no AWS SDK and no other
// eni-cni import, so the store (alloc) can carry the section and the CNI hot
// path can read it.
package section

import (
	"net/netip"
	"slices"
	"time"
)

// FoundOrigin is the origin of an address eni-cni did not ask for but
// finds on e: every address of an ENI eni-cni created is its own.
func (e ENI) FoundOrigin() string {
	if e.Created {
		return OriginAssigned
	}
	return OriginFound
}

// upsertENI records or updates an ENI from discovery, returning a pointer
// into s.ENIs (valid until s.ENIs changes).
func (s *EC2) upsertENI(info ENIInfo) *ENI {
	i := slices.IndexFunc(s.ENIs, func(e ENI) bool { return e.ID == info.ID })
	if i < 0 {
		s.ENIs = append(s.ENIs, ENI{ID: info.ID})
		i = len(s.ENIs) - 1
	}
	e := &s.ENIs[i]
	e.MAC, e.DeviceNumber, e.NetworkCard, e.SubnetID, e.SubnetCIDR = info.MAC, info.DeviceNumber, info.NetworkCard, info.SubnetID, info.SubnetCIDR
	e.VPCCIDRs, e.PrimaryIP, e.SecurityGroups = info.VPCCIDRs, info.PrimaryIP, info.SecurityGroups
	s.SortENIs()
	return &s.ENIs[slices.IndexFunc(s.ENIs, func(e ENI) bool { return e.ID == info.ID })]
}

// Expand lists the addresses of a delegated /28 prefix: all of them are
// usable by pods, the prefix is routed to the ENI as a whole.
func Expand(p netip.Prefix) []netip.Addr {
	p = p.Masked()
	n := 1 << (32 - p.Bits())
	out := make([]netip.Addr, 0, n)
	for a, i := p.Addr(), 0; i < n; a, i = a.Next(), i+1 {
		out = append(out, a)
	}
	return out
}

// Instance is what IMDS says about this node.
type Instance struct {
	ID, Type, AZ string
	RegionName   string // IMDS placement/region; empty if IMDS lacks it
	PrimaryMAC   string
	ENIs         []ENIInfo // by network card, then device number
}

// Region is IMDS's placement/region, or else the AZ without its letter
// (which is wrong for Local Zones, such as us-west-2-lax-1a).
func (i *Instance) Region() string {
	if i.RegionName != "" {
		return i.RegionName
	}
	if len(i.AZ) < 2 {
		return ""
	}
	return i.AZ[:len(i.AZ)-1]
}

// ENIInfo is one attached network interface as IMDS describes it.
type ENIInfo struct {
	ID             string
	MAC            string
	DeviceNumber   int
	NetworkCard    int // IMDS network-card; 0 when IMDS has none
	SubnetID       string
	SubnetCIDR     netip.Prefix
	VPCCIDRs       []netip.Prefix
	PrimaryIP      netip.Addr   // never given to a pod
	Secondary      []netip.Addr // secondary addresses, in IMDS order
	Prefixes       []netip.Prefix
	SecurityGroups []string
	// IPv6Prefixes are the ENI's delegated IPv6 prefixes (IMDS
	// ipv6-prefix).
	IPv6Prefixes []netip.Prefix
	// IPv6Read: IPv6Prefixes were read (only for an ENI the store knows
	// with prefixes); unread, no prefix counts as gone.
	IPv6Read bool
}

// WarmConfig is the pool policy.
type WarmConfig struct {
	WarmIPTarget     int // free addresses to keep ready
	MinimumIPTarget  int // addresses to keep in the pool whatever the use
	MaxENIs          int // 0: the instance type's limit
	PrefixDelegation bool
	SubnetID         string   // for new ENIs; default the primary ENI's
	SecurityGroupIDs []string // for new ENIs; default the primary ENI's
	// Subnets are the pods' own subnets by availability zone (custom
	// subnets): new ENIs go to the node's zone's subnet, with its security
	// groups. SubnetDiscovery instead finds them by the AWS VPC CNI's tag
	// (SubnetRoleTag) in the node's zone and VPC, most free addresses
	// first. Either way pods get addresses only of ENIs eni-cni created
	// (ENI.ForPods), never the primary ENI's.
	Subnets         map[string]ZoneSubnet
	SubnetDiscovery bool
	Tags            map[string]string
	// ExcludeIPs are addresses (or prefixes) never handed to pods, such as
	// a VIP that keepalived moves between nodes.
	ExcludeIPs []netip.Prefix
	// TrimAfter is how long an address stays in the pool before it may be
	// given back, so a burst of pods does not make warm flap.
	TrimAfter time.Duration
	// ReadyWhenFilled (readyWhenFilled): STATUS reports the network not
	// ready while the pool has not been filled in this boot, or cannot
	// grow and has nothing free (provider.PoolReady), so kubelet keeps the
	// node NotReady and pods are scheduled elsewhere; warm records what
	// that needs (FilledBoot, Growth), and nothing of it when off.
	ReadyWhenFilled bool
	// IPv6 (ipFamilies with "ipv6"): pods get IPv6 addresses of a /80
	// prefix delegated to the primary ENI. Alone, no IPv4 address is
	// assigned for pods; with DualStack (ipFamilies ["ipv4", "ipv6"] in
	// either order) each pod gets one of each, and the IPv4 side is the
	// pool as without IPv6: its targets, limits, trim and max-pods.
	IPv6      bool
	DualStack bool
}

// IPv6Only reports whether pods get IPv6 addresses and no IPv4 ones: no
// IPv4 address is assigned, the pool is the /80 alone.
func (w WarmConfig) IPv6Only() bool { return w.IPv6 && !w.DualStack }

// ZoneSubnet is the pods' subnet of one availability zone and the
// security groups of the ENIs created in it (empty: securityGroupIDs, else
// the primary ENI's).
type ZoneSubnet struct {
	SubnetID         string
	SecurityGroupIDs []string
}

// SubnetRoleTag is the tag key that marks a subnet for pods, as the AWS
// VPC CNI's subnet discovery reads it (any value).
const SubnetRoleTag = "kubernetes.io/role/cni"

// CustomSubnets reports whether pods live in subnets of their own (subnets
// or subnetDiscovery) rather than the primary ENI's.
func (w WarmConfig) CustomSubnets() bool { return len(w.Subnets) > 0 || w.SubnetDiscovery }

// Elapsed reports whether d has passed since the wall-clock stamp t. A
// stamp more than d in the future also counts: the clock went back (an RTC
// set wrong at boot, then corrected by NTP), t's real age is unknown, and
// waiting for the clock to catch up could stop a safety net for a year. A
// small step back (less than d) only delays it, by less than d.
func Elapsed(now, t time.Time, d time.Duration) bool {
	age := now.Sub(t)
	return age >= d || age < -d
}
