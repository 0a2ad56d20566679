package section

import (
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"time"
)

// EC2 is the ec2 source's section of the state file (alloc.State.EC2): the
// instance, its ENIs and limits, the pool of addresses with where each came
// from, and what `warm` must remember between passes. It is the only place
// eni-cni keeps EC2 data; nil on a node that never ran the ec2 source.
//
// The live instance is the truth and this section a cache of it: `warm`
// compares it with IMDS on every pass and with EC2 when they disagree.
type EC2 struct {
	// InstanceID is the instance this section describes. A disk moved to
	// another instance (a node image baked after install) carries the
	// builder's section: a mismatch with IMDS drops it (Reset).
	InstanceID   string  `json:"instanceID"`
	InstanceType string  `json:"instanceType"`
	AZ           string  `json:"az"`
	Region       string  `json:"region,omitempty"`
	Limits       *Limits `json:"limits,omitempty"`
	ENIs         []ENI   `json:"enis"`
	// Addrs is the pool: every secondary address (or address of a
	// delegated prefix) of the instance's ENIs, in address order.
	Addrs []Addr `json:"addrs"`
	// Tombstones are addresses given back to EC2 recently. IMDS lags EC2
	// and may still list them; a refresh from IMDS must not take them back.
	Tombstones []Tombstone `json:"tombstones,omitempty"`
	// Pending are ENIs being created: recorded, and saved, before the
	// Create call, so a pass killed before the ENI is attached and recorded
	// leaves a trace the next pass cleans up.
	Pending []PendingENI `json:"pending,omitempty"`
	// Dirty is set, and saved, before `warm` makes an EC2 call that changes
	// what is assigned, and cleared when the pass has recorded the results.
	// A pass that finds it set first reads the truth back from EC2.
	Dirty bool `json:"dirty,omitempty"`
	// VerifiedBoot is the boot in which InstanceID was last compared with
	// IMDS. ADD hands out no address in a boot that has not checked it.
	VerifiedBoot string `json:"verifiedBoot,omitempty"`
	// LastDescribe is when EC2's DescribeNetworkInterfaces was last read:
	// the hourly safety net runs when it is an hour old.
	LastDescribe time.Time `json:"lastDescribe,omitzero"`
	// SweptBoot is the boot in which leaked ENIs were last looked for;
	// LastSweep when.
	SweptBoot string    `json:"sweptBoot,omitempty"`
	LastSweep time.Time `json:"lastSweep,omitzero"`
	// SweepOwed marks a sweep that must not wait for the node's window of
	// the hour: an ENI eni-cni created was detached, or a sweep left a
	// young or undeletable leak behind.
	SweepOwed bool `json:"sweepOwed,omitempty"`
	// SNATBoot is the boot in which the SNAT chain was last ensured, so ADD
	// installs it once after a reboot if no `warm` pass has yet.
	SNATBoot string `json:"snatBoot,omitempty"`
	// Drift is the IMDS disagreement (Drift.Key) EC2 was last asked about.
	// IMDS lags: when EC2 has confirmed the store, the same disagreement
	// does not cost another call each pass; a new one does.
	Drift string `json:"drift,omitempty"`
	// LastPass is the outcome of the last warm pass that ADDs waiting on a
	// dry pool waited for; such an ADD that gets no address fails with
	// its reason.
	LastPass *PassOutcome `json:"lastPass,omitempty"`
	// PassStartedAt is when a warm pass with ADDs waiting for it began, so
	// they know it is under way and do not start another.
	PassStartedAt time.Time `json:"passStartedAt,omitzero"`
	// PassPID is the process of that pass, so that waiters see it died
	// (killed, OOM) rather than wait for a mark nobody will clear.
	PassPID int `json:"passPID,omitempty"`
	// FilledBoot is the boot in which the pool last reached its targets
	// (a warm pass's fill, or the addresses IMDS showed, as a launch
	// template assigns them), or as many addresses as the instance's
	// limits allow. STATUS (readyWhenFilled) says the network is not ready
	// for pods before that in a boot.
	FilledBoot string `json:"filledBoot,omitempty"`
	// FilledAt is when the pool first reached its targets in FilledBoot:
	// when the readiness gate let pods come. ADDs that began to wait soon
	// after it are the pods that the scheduler sent because the node
	// became Ready, and only their waits make warm's pace age (ec2's
	// backoff.go paceAged); zero in a store written before it was kept.
	FilledAt time.Time `json:"filledAt,omitzero"`
	// Growth is how the last warm pass's attempt to grow the pool ended,
	// with the boot it ran in, whoever waited for it (LastPass is only
	// recorded for waiting ADDs). It is saved when its result changes, so
	// a settled node's passes write nothing: STATUS reads it to tell a
	// pool that cannot grow.
	Growth *PassOutcome `json:"growth,omitempty"`
	// FullSubnets are pod subnets (custom subnets) EC2 last said were
	// full, each until it is worth trying again: a full subnet is not
	// asked again every pass, and warm moves on to the zone's next one.
	FullSubnets []FullSubnet `json:"fullSubnets,omitempty"`
}

// FullSubnet is a pod subnet EC2 refused addresses in
// (InsufficientFreeAddressesInSubnet), skipped until Until.
type FullSubnet struct {
	ID    string    `json:"id"`
	Until time.Time `json:"until"`
}

// FullSubnetTTL is how long a full subnet is skipped before warm tries it
// again: pods elsewhere in the VPC end and give their addresses back.
const FullSubnetTTL = 10 * time.Minute

// SubnetFull reports whether id was found full less than FullSubnetTTL ago.
func (s *EC2) SubnetFull(id string, now time.Time) bool {
	for _, f := range s.FullSubnets {
		if f.ID == id && now.Before(f.Until) {
			return true
		}
	}
	return false
}

// MarkSubnetFull remembers that EC2 found id full at now, and forgets
// subnets whose time is up.
func (s *EC2) MarkSubnetFull(id string, now time.Time) {
	s.FullSubnets = slices.DeleteFunc(s.FullSubnets, func(f FullSubnet) bool { return f.ID == id || !now.Before(f.Until) })
	s.FullSubnets = append(s.FullSubnets, FullSubnet{ID: id, Until: now.Add(FullSubnetTTL).UTC()})
}

// Limits are the instance type's ENI limits, from DescribeInstanceTypes.
type Limits struct {
	MaxENIs    int `json:"maxENIs"`
	IPv4PerENI int `json:"ipv4PerENI"` // including the ENI's primary address
	// Cards are the ENI limits per network card of types with several;
	// empty means one card with MaxENIs.
	Cards []CardLimit `json:"cards,omitempty"`
	// VCPUs is the type's default vCPU count, which sets the maxPods cap
	// (MaxPods); 0 in stores written before it was recorded.
	VCPUs int `json:"vcpus,omitempty"`
}

// CardLimit is one network card's ENI limit.
type CardLimit struct {
	Index   int `json:"index"`
	MaxENIs int `json:"maxENIs"`
}

// ENI is one attached ENI.
type ENI struct {
	ID             string         `json:"id"`
	MAC            string         `json:"mac"`
	DeviceNumber   int            `json:"deviceNumber"`
	NetworkCard    int            `json:"networkCard,omitempty"`
	SubnetID       string         `json:"subnetID"`
	SubnetCIDR     netip.Prefix   `json:"subnetCIDR"`
	VPCCIDRs       []netip.Prefix `json:"vpcCIDRs"`
	PrimaryIP      netip.Addr     `json:"primaryIP"`
	SecurityGroups []string       `json:"securityGroups,omitempty"`
	Prefixes       []netip.Prefix `json:"prefixes,omitempty"`
	// IPv6Prefixes are the ENI's delegated IPv6 prefixes (a /80 each) on
	// a network of IPv6: pods get addresses of them (IPv6Usable). They are
	// kept as prefixes, never expanded as the IPv4 /28s are into Addrs: a
	// /80 holds 2^48 addresses.
	IPv6Prefixes []IPv6Prefix `json:"ipv6Prefixes,omitempty"`
	// Secondary counts the secondary addresses EC2 assigned to the ENI
	// (each takes one of the type's per-ENI slots, as each prefix does).
	Secondary int `json:"secondary"`
	// Created is true for ENIs eni-cni created (tagged with the instance
	// ID): every address on them is eni-cni's to give back.
	Created bool `json:"created,omitempty"`
	// Unmanaged: the ENI carries node.k8s.amazonaws.com/no_manage=true.
	// None of its addresses is used, none is assigned to or taken from it.
	Unmanaged bool `json:"unmanaged,omitempty"`
	// Unverified: seen in IMDS but its tags not yet read from EC2, so it
	// may be unmanaged; its addresses wait for the next describe.
	Unverified bool `json:"unverified,omitempty"`
	// AttachmentID and DeleteOnTermination of an ENI eni-cni attached:
	// `warm` retries setting DeleteOnTermination until EC2 confirms it.
	AttachmentID        string `json:"attachmentID,omitempty"`
	DeleteOnTermination bool   `json:"deleteOnTermination,omitempty"`
}

// IPv6Prefix is one delegated IPv6 prefix of an ENI.
type IPv6Prefix struct {
	Prefix  netip.Prefix `json:"prefix"`
	Origin  string       `json:"origin"`
	AddedAt time.Time    `json:"addedAt"`
}

// Where a pool address came from.
const (
	// OriginAssigned: `warm` asked EC2 for it (or it is on an ENI eni-cni
	// created). Trim may give it back.
	OriginAssigned = "assigned"
	// OriginFound: it was on the instance already (a launch template, a
	// VIP, another tool). Used if its ENI may be managed and it is not
	// excluded; never given back.
	OriginFound = "found"
)

// Addr is one pool address.
type Addr struct {
	IP      netip.Addr `json:"ip"`
	ENI     string     `json:"eni"`
	Origin  string     `json:"origin"`
	AddedAt time.Time  `json:"addedAt"`
	// Unusable marks an address being given back to EC2: it is set, and
	// saved, before the unassign call so no ADD can take it meanwhile.
	Unusable bool `json:"unusable,omitempty"`
	// Lost marks an allocated address that neither IMDS nor EC2 lists any
	// more (unassigned or its ENI detached behind eni-cni's back). It is
	// shown by `list`, never handed out again, and leaves the pool when its
	// pod is gone.
	Lost bool `json:"lost,omitempty"`
}

// Tombstone remembers an unassigned address until IMDS has caught up.
type Tombstone struct {
	IP    netip.Addr `json:"ip"`
	Until time.Time  `json:"until"`
}

// PendingENI is an ENI being created and attached. ID is empty until the
// Create call has answered.
type PendingENI struct {
	Token string    `json:"token"` // the Create call's idempotency token
	ID    string    `json:"id,omitempty"`
	Since time.Time `json:"since"`
	// Unattached is set when the ENI was created but EC2 throttled its
	// attach past the call's retries: the ENI is kept, with what its
	// Create reply said, for a later pass to attach instead of deleting it
	// and creating another (which spends a Create and a Delete of the
	// account's buckets on each throttled attach).
	Unattached *UnattachedENI `json:"unattached,omitempty"`
}

// UnattachedENI is a created ENI waiting for its attach: the ENI as its
// Create reply described it (no attachment yet) and its secondary
// addresses; its prefixes are in ENI.Prefixes.
type UnattachedENI struct {
	ENI ENI          `json:"eni"`
	IPs []netip.Addr `json:"ips,omitempty"`
}

// TombstoneTTL is how long IMDS may keep listing an unassigned address.
const TombstoneTTL = 10 * time.Minute

// Table is the policy-routing table of the ENI, numbered as the AWS VPC CNI
// numbers them so the two agree on a node: the primary ENI (card 0, device
// 0) uses the main table (0 here), others of card 0 device+1, those of
// card N 10000+100N+device.
func (e ENI) Table() int {
	switch {
	case e.NetworkCard == 0 && e.DeviceNumber == 0:
		return 0
	case e.NetworkCard == 0:
		return e.DeviceNumber + 1
	default:
		return 10000 + 100*e.NetworkCard + e.DeviceNumber
	}
}

// Gateway is the VPC router of the ENI's subnet: its first host address.
func (e ENI) Gateway() netip.Addr { return e.SubnetCIDR.Masked().Addr().Next() }

// Primary reports whether e is the instance's primary ENI.
func (e ENI) Primary() bool { return e.NetworkCard == 0 && e.DeviceNumber == 0 }

// usable reports whether pods may get addresses of the ENI.
func (e ENI) usable() bool { return !e.Unmanaged && !e.Unverified }

// ForPods reports whether pods may get addresses of the ENI. With custom
// subnets (createdOnly) only ENIs eni-cni created for pods qualify: never
// the primary ENI, whose subnet is the node's, nor an ENI someone else
// attached, as the AWS VPC CNI's custom networking does.
func (e ENI) ForPods(createdOnly bool) bool {
	return e.usable() && (!createdOnly || (e.Created && !e.Primary()))
}

// ENI returns the ENI with id.
func (s *EC2) ENI(id string) (ENI, bool) {
	if s == nil {
		return ENI{}, false
	}
	for _, e := range s.ENIs {
		if e.ID == id {
			return e, true
		}
	}
	return ENI{}, false
}

// PrimaryENI returns the instance's primary ENI.
func (s *EC2) PrimaryENI() (ENI, bool) {
	if s == nil {
		return ENI{}, false
	}
	for _, e := range s.ENIs {
		if e.Primary() {
			return e, true
		}
	}
	return ENI{}, false
}

// Usable yields, in address order, the addresses ADD may hand out with
// their ENI: not being given back, not lost, on an ENI that may be managed,
// and not in exclude.
func (s *EC2) Usable(exclude []netip.Prefix) iter.Seq2[netip.Addr, string] {
	return s.UsableFor(exclude, false)
}

// UsableFor is Usable, of only the ENIs eni-cni created when createdOnly
// (custom subnets: ENI.ForPods).
func (s *EC2) UsableFor(exclude []netip.Prefix, createdOnly bool) iter.Seq2[netip.Addr, string] {
	return func(yield func(netip.Addr, string) bool) {
		if s == nil {
			return
		}
		ok := make(map[string]bool, len(s.ENIs))
		for _, e := range s.ENIs {
			ok[e.ID] = e.ForPods(createdOnly)
		}
		for _, a := range s.Addrs {
			if a.Unusable || a.Lost || !ok[a.ENI] || Excluded(exclude, a.IP) {
				continue
			}
			if !yield(a.IP, a.ENI) {
				return
			}
		}
	}
}

// IsUsable reports whether Usable yields ip, without walking the pool
// into a map (Counts asks it for every allocation).
func (s *EC2) IsUsable(ip netip.Addr, exclude []netip.Prefix) bool {
	return s.IsUsableFor(ip, exclude, false)
}

// IsUsableFor reports whether UsableFor yields ip.
func (s *EC2) IsUsableFor(ip netip.Addr, exclude []netip.Prefix, createdOnly bool) bool {
	if s == nil || Excluded(exclude, ip) {
		return false
	}
	for _, a := range s.Addrs {
		if a.IP == ip {
			e, ok := s.ENI(a.ENI)
			return ok && e.ForPods(createdOnly) && !a.Unusable && !a.Lost
		}
	}
	return false
}

// Excluded reports whether ip is in one of the prefixes.
func Excluded(exclude []netip.Prefix, ip netip.Addr) bool {
	return slices.ContainsFunc(exclude, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// Lost returns the addresses flagged lost.
func (s *EC2) Lost() []Addr {
	if s == nil {
		return nil
	}
	var out []Addr
	for _, a := range s.Addrs {
		if a.Lost {
			out = append(out, a)
		}
	}
	return out
}

// Tombstoned reports whether ip was given back less than TombstoneTTL ago.
func (s *EC2) Tombstoned(ip netip.Addr, now time.Time) bool {
	for _, t := range s.Tombstones {
		if t.IP == ip && now.Before(t.Until) {
			return true
		}
	}
	return false
}

// Bury tombstones ip until IMDS stops listing it.
func (s *EC2) Bury(ip netip.Addr, now time.Time) {
	until := now.Add(TombstoneTTL).UTC()
	for i := range s.Tombstones {
		if s.Tombstones[i].IP == ip {
			s.Tombstones[i].Until = until
			return
		}
	}
	s.Tombstones = append(s.Tombstones, Tombstone{IP: ip, Until: until})
}

// PruneTombstones drops expired tombstones. The store calls it on every
// save, so they never pile up.
func (s *EC2) PruneTombstones(now time.Time) {
	if s == nil {
		return
	}
	s.Tombstones = slices.DeleteFunc(s.Tombstones, func(t Tombstone) bool { return !now.Before(t.Until) })
	if len(s.Tombstones) == 0 {
		s.Tombstones = nil
	}
}

// AddAddrs puts addresses of eniID into the pool with their origin and
// returns how many were new. Addresses already in the pool keep their
// record.
func (s *EC2) AddAddrs(eniID, origin string, ips []netip.Addr, now time.Time) int {
	have := make(map[netip.Addr]bool, len(s.Addrs))
	for _, a := range s.Addrs {
		have[a.IP] = true
	}
	n := 0
	for _, ip := range ips {
		if !have[ip] {
			s.Addrs = append(s.Addrs, Addr{IP: ip, ENI: eniID, Origin: origin, AddedAt: now.UTC()})
			have[ip] = true
			n++
		}
	}
	s.SortAddrs()
	return n
}

// SortAddrs keeps the pool in address order, so output is stable.
func (s *EC2) SortAddrs() {
	slices.SortStableFunc(s.Addrs, func(a, b Addr) int { return a.IP.Compare(b.IP) })
}

// SortENIs keeps ENIs by network card, then device number.
func (s *EC2) SortENIs() {
	slices.SortStableFunc(s.ENIs, func(a, b ENI) int {
		if a.NetworkCard != b.NetworkCard {
			return a.NetworkCard - b.NetworkCard
		}
		return a.DeviceNumber - b.DeviceNumber
	})
}

// Validate checks what a well-formed section always has; nil is valid.
func (s *EC2) Validate() error {
	if s == nil {
		return nil
	}
	enis := map[string]bool{}
	for _, e := range s.ENIs {
		if e.ID == "" || enis[e.ID] {
			return fmt.Errorf("ENI %q empty or listed twice", e.ID)
		}
		enis[e.ID] = true
	}
	for _, e := range s.ENIs {
		for _, p := range e.IPv6Prefixes {
			if !p.Prefix.IsValid() || !p.Prefix.Addr().Is6() || p.Prefix.Addr().Is4In6() || p.Prefix.Bits() > 120 {
				return fmt.Errorf("ENI %s has IPv6 prefix %v, not an IPv6 prefix", e.ID, p.Prefix)
			}
		}
	}
	seen := map[netip.Addr]bool{}
	for _, a := range s.Addrs {
		switch {
		case !a.IP.Is4():
			return fmt.Errorf("pool entry without a valid IPv4 address")
		case seen[a.IP]:
			return fmt.Errorf("address %s is in the pool twice", a.IP)
		case a.Origin != OriginAssigned && a.Origin != OriginFound:
			return fmt.Errorf("address %s has origin %q, want %q or %q", a.IP, a.Origin, OriginAssigned, OriginFound)
		}
		seen[a.IP] = true
	}
	for _, t := range s.Tombstones {
		if !t.IP.Is4() {
			return fmt.Errorf("tombstone without a valid IPv4 address")
		}
	}
	return nil
}

// Clone returns a deep copy of s (nil for nil): a store that hands out one
// decoded state many times (alloc.DiskStore.ReuseDecoded) gives each
// caller its own to change.
func (s *EC2) Clone() *EC2 {
	if s == nil {
		return nil
	}
	c := *s
	if s.Limits != nil {
		lim := *s.Limits
		lim.Cards = slices.Clone(s.Limits.Cards)
		c.Limits = &lim
	}
	c.ENIs = slices.Clone(s.ENIs)
	for i := range c.ENIs {
		e := &c.ENIs[i]
		e.VPCCIDRs, e.SecurityGroups, e.Prefixes = slices.Clone(e.VPCCIDRs), slices.Clone(e.SecurityGroups), slices.Clone(e.Prefixes)
		e.IPv6Prefixes = slices.Clone(e.IPv6Prefixes)
	}
	c.Addrs, c.Tombstones, c.Pending = slices.Clone(s.Addrs), slices.Clone(s.Tombstones), slices.Clone(s.Pending)
	c.FullSubnets = slices.Clone(s.FullSubnets)
	for i, p := range c.Pending {
		if p.Unattached != nil {
			u := *p.Unattached
			u.IPs = slices.Clone(u.IPs)
			u.ENI.VPCCIDRs, u.ENI.SecurityGroups, u.ENI.Prefixes = slices.Clone(u.ENI.VPCCIDRs), slices.Clone(u.ENI.SecurityGroups), slices.Clone(u.ENI.Prefixes)
			u.ENI.IPv6Prefixes = slices.Clone(u.ENI.IPv6Prefixes)
			c.Pending[i].Unattached = &u
		}
	}
	if s.Growth != nil {
		o := *s.Growth
		c.Growth = &o
	}
	if s.LastPass != nil {
		o := *s.LastPass
		c.LastPass = &o
	}
	return &c
}

// MarkFilled records that the pool reached its targets in boot at now:
// FilledBoot, and FilledAt the first time in that boot.
func (s *EC2) MarkFilled(boot string, now time.Time) {
	if s.FilledBoot != boot {
		s.FilledAt = now.UTC()
	}
	s.FilledBoot = boot
}
