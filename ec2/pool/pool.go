// Package pool is the ec2 source's part of the store: the instance, its
// ENIs and limits, tombstones of given-back addresses, and the add-only merge
// of what IMDS lists into the pool. It is pure (no AWS SDK), so the CNI hot
// path can read it without linking the SDK.
package pool

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
)

// SourceState is what the ec2 source keeps in the store (State.Source):
// the instance, its limits and its ENIs, so neither ADD nor a steady-state
// `warm` needs to ask IMDS or EC2 again.
type SourceState struct {
	InstanceID   string     `json:"instanceID"`
	InstanceType string     `json:"instanceType"`
	AZ           string     `json:"az"`
	Region       string     `json:"region,omitempty"`
	Limits       *Limits    `json:"limits,omitempty"`
	ENIs         []ENIState `json:"enis"`
	// Tombstones are addresses given back to EC2 recently. IMDS lags EC2
	// and may still list them; a refresh from IMDS must not take them back.
	Tombstones []Tombstone `json:"tombstones,omitempty"`
	// Dirty is set, and saved, before `warm` makes an EC2 call that changes
	// what is assigned, and cleared when the pass has recorded the results.
	// A pass that finds it set (the last one died or could not save) first
	// reads the truth back from EC2.
	Dirty bool `json:"dirty,omitempty"`
}

// Limits are the instance type's ENI limits, from DescribeInstanceTypes.
type Limits struct {
	MaxENIs    int `json:"maxENIs"`
	IPv4PerENI int `json:"ipv4PerENI"` // including the ENI's primary address
}

// ENIState is one attached ENI.
type ENIState struct {
	ID             string         `json:"id"`
	MAC            string         `json:"mac"`
	DeviceNumber   int            `json:"deviceNumber"`
	SubnetID       string         `json:"subnetID"`
	SubnetCIDR     netip.Prefix   `json:"subnetCIDR"`
	VPCCIDRs       []netip.Prefix `json:"vpcCIDRs"`
	PrimaryIP      netip.Addr     `json:"primaryIP"`
	SecurityGroups []string       `json:"securityGroups,omitempty"`
	Prefixes       []netip.Prefix `json:"prefixes,omitempty"`
	// Secondary counts the secondary addresses EC2 assigned to the ENI
	// (each takes one of the type's per-ENI slots, as each prefix does).
	Secondary int `json:"secondary"`
}

// Table is the policy-routing table of the ENI: device number + 1, as the
// AWS VPC CNI numbers them. The primary ENI (device 0) uses the main table.
func (e ENIState) Table() int {
	if e.DeviceNumber == 0 {
		return 0
	}
	return e.DeviceNumber + 1
}

// Gateway is the VPC router of the ENI's subnet: its first host address.
func (e ENIState) Gateway() netip.Addr { return e.SubnetCIDR.Masked().Addr().Next() }

// Tombstone remembers an unassigned address until IMDS has caught up.
type Tombstone struct {
	IP    netip.Addr `json:"ip"`
	Until time.Time  `json:"until"`
}

// TombstoneTTL is how long IMDS may keep listing an unassigned address.
const TombstoneTTL = 10 * time.Minute

// LoadSource decodes the ec2 part of the state; a node that never ran the
// ec2 source has none.
func LoadSource(st *alloc.State) (*SourceState, error) {
	src := &SourceState{}
	if len(st.Source) == 0 {
		return src, nil
	}
	if err := json.Unmarshal(st.Source, src); err != nil {
		return nil, fmt.Errorf("%w: ec2 source data: %v", alloc.ErrCorrupt, err)
	}
	return src, nil
}

// SaveSource encodes src into the state.
func SaveSource(st *alloc.State, src *SourceState) error {
	b, err := json.Marshal(src)
	if err != nil {
		return fmt.Errorf("encode ec2 source data: %w", err)
	}
	st.Source = b
	return nil
}

// ENI returns the ENI with id.
func (s *SourceState) ENI(id string) (ENIState, bool) {
	for _, e := range s.ENIs {
		if e.ID == id {
			return e, true
		}
	}
	return ENIState{}, false
}

func (s *SourceState) tombstoned(ip netip.Addr, now time.Time) bool {
	for _, t := range s.Tombstones {
		if t.IP == ip && now.Before(t.Until) {
			return true
		}
	}
	return false
}

func (s *SourceState) pruneTombstones(now time.Time) {
	s.Tombstones = slices.DeleteFunc(s.Tombstones, func(t Tombstone) bool { return !now.Before(t.Until) })
}

// Merge folds an IMDS discovery into the state and reports how many
// addresses it added. It only ever adds: IMDS lags EC2, so an address
// missing from IMDS may just have been assigned (the EC2 response is the
// truth), and one still listed may just have been unassigned (tombstoned).
// ENI primaries are never pool addresses.
func Merge(st *alloc.State, src *SourceState, inst *Instance, now time.Time) int {
	src.InstanceID, src.InstanceType, src.AZ, src.Region = inst.ID, inst.Type, inst.AZ, inst.Region()
	src.pruneTombstones(now)
	inPool := make(map[netip.Addr]bool, len(st.Pool))
	for _, p := range st.Pool {
		inPool[p.IP] = true
	}
	added := 0
	for _, info := range inst.ENIs {
		e := src.upsertENI(info)
		var addrs []netip.Addr
		addrs = append(addrs, info.Secondary...)
		for _, p := range info.Prefixes {
			if !slices.Contains(e.Prefixes, p) {
				e.Prefixes = append(e.Prefixes, p)
			}
			addrs = append(addrs, Expand(p)...)
		}
		for _, a := range addrs {
			if a == info.PrimaryIP || inPool[a] || src.tombstoned(a, now) {
				continue
			}
			st.Pool = append(st.Pool, alloc.PoolAddr{IP: a, ENI: info.ID, AddedAt: now.UTC()})
			inPool[a] = true
			added++
		}
		e.Secondary = max(e.Secondary, len(info.Secondary))
	}
	SortPool(st)
	return added
}

// upsertENI records or updates an ENI from discovery, returning a pointer
// into src.ENIs.
func (s *SourceState) upsertENI(info ENIInfo) *ENIState {
	i := slices.IndexFunc(s.ENIs, func(e ENIState) bool { return e.ID == info.ID })
	if i < 0 {
		s.ENIs = append(s.ENIs, ENIState{ID: info.ID})
		i = len(s.ENIs) - 1
	}
	e := &s.ENIs[i]
	e.MAC, e.DeviceNumber, e.SubnetID, e.SubnetCIDR = info.MAC, info.DeviceNumber, info.SubnetID, info.SubnetCIDR
	e.VPCCIDRs, e.PrimaryIP, e.SecurityGroups = info.VPCCIDRs, info.PrimaryIP, info.SecurityGroups
	slices.SortFunc(s.ENIs, func(a, b ENIState) int { return a.DeviceNumber - b.DeviceNumber })
	return &s.ENIs[slices.IndexFunc(s.ENIs, func(e ENIState) bool { return e.ID == info.ID })]
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

// SortPool keeps the pool in address order, so output is stable.
func SortPool(st *alloc.State) {
	slices.SortStableFunc(st.Pool, func(a, b alloc.PoolAddr) int { return a.IP.Compare(b.IP) })
}

// Instance is what IMDS says about this node.
type Instance struct {
	ID, Type, AZ string
	RegionName   string // IMDS placement/region; empty if IMDS lacks it
	PrimaryMAC   string
	ENIs         []ENIInfo // by device number
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
	SubnetID       string
	SubnetCIDR     netip.Prefix
	VPCCIDRs       []netip.Prefix
	PrimaryIP      netip.Addr   // never given to a pod
	Secondary      []netip.Addr // secondary addresses, in IMDS order
	Prefixes       []netip.Prefix
	SecurityGroups []string
}

// WarmConfig is the pool policy.
type WarmConfig struct {
	WarmIPTarget     int // free addresses to keep ready
	MinimumIPTarget  int // addresses to keep in the pool whatever the use
	MaxENIs          int // 0: the instance type's limit
	PrefixDelegation bool
	SubnetID         string   // for new ENIs; default the primary ENI's
	SecurityGroupIDs []string // for new ENIs; default the primary ENI's
	Tags             map[string]string
	// TrimAfter is how long an address stays in the pool before it may be
	// given back, so a burst of pods does not make warm flap.
	TrimAfter time.Duration
}
