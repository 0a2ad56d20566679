// Package alloc owns the node's address state: the JSON state file and its
// lock, the schema version, which sandbox attachment holds which address,
// the cooldown of freed addresses and the boot ID that invalidates
// allocations after a reboot. It knows nothing of netlink, AWS or CRI.
package alloc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// SchemaVersion is the state file format this binary reads and writes.
// Any change that adds or renames a field bumps it: an older binary would
// otherwise load a newer file, drop what it does not know and save it back.
// Every save stamps it; files of every earlier version are migrated on load
// (migrate.go, with fixtures of each version in testdata/).
//
//	1: allocations, cooling, lastIP; ec2 data in "pool" and an opaque "source"
//	2: ec2 data in one typed section "ec2" (section.EC2), each address with its origin
//	3: IPv6: allocations and cooling entries of either family, "ip6" (the
//	   IPv6 address of a dual-stack attachment), "lastIP6"
//
// SchemaVersion is the version of a file that holds no IPv6 address, which
// every file of an IPv4 network is: version 3 only adds fields, absent in
// such a file, so it is written as version 2 and the release before IPv6
// reads it (a downgrade of an IPv4 node keeps its state). A file that holds
// an IPv6 address is written as SchemaVersionIPv6, which that release
// refuses rather than drop the IPv6 entries it does not know on its next
// save. Reading a version-2 file needs no migration.
const (
	SchemaVersion     = 2
	SchemaVersionIPv6 = 3
)

// Key identifies one attachment of a sandbox to a network, the identity the
// CNI spec gives DEL: the netns may already be gone when DEL arrives.
type Key struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

func (k Key) String() string {
	return fmt.Sprintf("%s/%s in network %q", shortID(k.ContainerID), k.IfName, k.Network)
}

// Allocation records who holds an address. Pod name, namespace and UID are
// for people and logs; the sandbox (ContainerID) owns the address.
type Allocation struct {
	Key
	// IP is the attachment's address: its IPv4 address, or its IPv6
	// address on a network of IPv6 only.
	IP netip.Addr `json:"ip"`
	// IP6 is the IPv6 address of a dual-stack attachment (IP holds its
	// IPv4 address); unset on a network of one family. Addrs lists both.
	IP6 netip.Addr `json:"ip6,omitzero"`
	// Egress4 is the link-local IPv4 address an attachment of an
	// IPv6-only network reaches IPv4 destinations with (Egress4Range,
	// masqueraded by the node). It is not a pod address: the CNI result
	// does not list it, Addrs leaves it out, Wired has it.
	Egress4      netip.Addr `json:"egress4,omitzero"`
	PodNamespace string     `json:"podNamespace"`
	PodName      string     `json:"podName"`
	PodUID       string     `json:"podUID"`
	Netns        string     `json:"netns"`
	HostVeth     string     `json:"hostVeth"`
	ENI          string     `json:"eni"`
	AllocatedAt  time.Time  `json:"allocatedAt"`
	// AllocatedBoot is when the address was allocated on the boot clock
	// (CLOCK_BOOTTIME, see clock.go); gc's grace is measured on it.
	// Absent in files of older versions: the wall-clock stamp is used.
	AllocatedBoot time.Duration `json:"allocatedBootNs,omitempty"`
}

// Cooling is a freed address that must not be reused before Until, so that
// conntrack entries and ARP caches that still point at the old pod expire.
type Cooling struct {
	IP    netip.Addr `json:"ip"`
	Until time.Time  `json:"until"`
	// UntilBoot is the end of the cooldown on the boot clock (clock.go);
	// absent in files of older versions.
	UntilBoot time.Duration `json:"untilBootNs,omitempty"`
	// For is the cooldown of the network that released the address: in a
	// shared stateDir another network with a shorter one must not cut it
	// short. Absent in files of older versions (the reader's own cooldown
	// bounds the entry then).
	For time.Duration `json:"cooldownNs,omitempty"`
}

// State is the whole content of the state file.
type State struct {
	Version     int          `json:"version"`
	BootID      string       `json:"bootID"`
	Allocations []Allocation `json:"allocations"`
	Cooling     []Cooling    `json:"cooling"`
	// LastIP is where the previous allocation ended, so addresses are
	// handed out round-robin and a freed one is reused as late as possible.
	LastIP netip.Addr `json:"lastIP"`
	// LastIP6 is LastIP of the IPv6 addresses (LastIP is the IPv4 one's,
	// or the IPv6 one's in files of a network of IPv6 only written before
	// it: pick reads whichever is of the family it picks).
	LastIP6 netip.Addr `json:"lastIP6,omitzero"`
	// LastEgress4 is LastIP of the egress addresses (Egress4Range): a
	// freed one is reused as late as possible, as conntrack may still
	// hold the old pod's masqueraded flows.
	LastEgress4 netip.Addr `json:"lastEgress4,omitzero"`
	// EC2 is the ec2 provider's section, owned by package ec2/section; nil for
	// the static source. The store only carries, migrates and prunes it.
	EC2 *section.EC2 `json:"ec2,omitempty"`
	// Demands are ADDs waiting for an address on a dry pool.
	Demands []Demand `json:"demands,omitempty"`
	// Networks are the networks that have written this file (sorted): with
	// several networks sharing a stateDir, a file that another network
	// wrote after this one's state was lost must not pass for this
	// network's (Records). Absent in files from before the record.
	Networks []string `json:"networks,omitempty"`

	// missing: the store had no state file; this state is new.
	missing bool
}

// Demand is an ADD waiting for an address on a dry pool. `warm` sizes its
// request by the demands; the ADD's allocation, or a DEL of the same
// attachment, removes it. Until bounds it: the demand of an ADD that was
// killed while waiting is dropped by the first save after Until.
type Demand struct {
	Key
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// TriggeredAt is when this ADD started a warm pass (zero: it did not),
	// so the other waiters know one is on its way.
	TriggeredAt time.Time `json:"triggeredAt,omitzero"`
}

// Missing reports that the store had no state file and st is a new state:
// a node that never ran eni-cni, or one whose state file was lost.
func (s *State) Missing() bool { return s.missing }

// Records reports whether the file knows network n: n has written it, or
// holds allocations of n. A file from before the record (no Networks)
// knows every network, as it did then; its first save records the networks
// of its allocations and its writer's (RecordNetwork), so an upgrade
// declares nobody lost.
func (s *State) Records(n string) bool {
	return len(s.Networks) == 0 || slices.Contains(s.Networks, n) ||
		slices.ContainsFunc(s.Allocations, func(a Allocation) bool { return a.Network == n })
}

// RecordNetwork records n, and the networks of the allocations, as
// networks that have written the file ("" records nothing).
func (s *State) RecordNetwork(n string) {
	if n == "" {
		return
	}
	for _, name := range append([]string{n}, networksOf(s.Allocations)...) {
		if !slices.Contains(s.Networks, name) {
			s.Networks = append(s.Networks, name)
		}
	}
	slices.Sort(s.Networks)
}

func networksOf(as []Allocation) []string {
	var out []string
	for _, a := range as {
		if !slices.Contains(out, a.Network) {
			out = append(out, a.Network)
		}
	}
	return out
}

// Clone returns a deep copy of s, for a store that hands out one decoded
// state many times (DiskStore.ReuseDecoded): each caller changes its own.
func (s *State) Clone() *State {
	c := *s
	c.Allocations, c.Cooling = slices.Clone(s.Allocations), slices.Clone(s.Cooling)
	c.Demands, c.Networks = slices.Clone(s.Demands), slices.Clone(s.Networks)
	c.EC2 = s.EC2.Clone()
	return &c
}

// NewState returns the state of a node that has never run the plugin.
func NewState(bootID string) *State {
	return &State{Version: SchemaVersion, BootID: bootID, Allocations: []Allocation{}, Cooling: []Cooling{}}
}

// MissingState is what a store's Load returns when it holds no state: a
// new state (no boot ID yet) whose Missing reports true.
func MissingState() *State {
	st := NewState("")
	st.missing = true
	return st
}

// Find returns the index of the allocation for k, or -1.
func (s *State) Find(k Key) int {
	for i := range s.Allocations {
		if s.Allocations[i].Key == k {
			return i
		}
	}
	return -1
}

// ErrCorrupt reports a state file that cannot be trusted. The file is left
// as it is for the operator: resetting it would forget live allocations and
// hand their addresses to new pods.
var ErrCorrupt = errors.New("state file is corrupt")

// ErrUnsupportedVersion reports a state file written by a newer eni-cni.
var ErrUnsupportedVersion = errors.New("unsupported state file version")

// ErrStateLost reports a missing state file on a node that still has pods
// wired by eni-cni (Manager.OnMissing decides).
var ErrStateLost = errors.New("state file lost")

// validate checks the invariants a well-formed file always has.
func (s *State) validate() error {
	if s.Version == 0 {
		return fmt.Errorf("%w: no version field", ErrCorrupt)
	}
	if s.Version > SchemaVersionIPv6 || s.Version < 0 {
		return fmt.Errorf("%w: version %d, this eni-cni reads version %d", ErrUnsupportedVersion, s.Version, SchemaVersionIPv6)
	}
	keys := make(map[Key]bool, len(s.Allocations))
	ips := make(map[netip.Addr]Key, len(s.Allocations))
	for i, a := range s.Allocations {
		if a.Network == "" || a.ContainerID == "" || a.IfName == "" {
			return fmt.Errorf("%w: allocation %d has an empty network, containerID or ifname", ErrCorrupt, i)
		}
		if err := s.validAddrs(a); err != nil {
			return err
		}
		if !validIfName(a.HostVeth) {
			return fmt.Errorf("%w: allocation %s names host veth %q, which is not an interface name", ErrCorrupt, a.Key, a.HostVeth)
		}
		if keys[a.Key] {
			return fmt.Errorf("%w: allocation %s appears twice", ErrCorrupt, a.Key)
		}
		for _, ip := range a.Wired() {
			if other, dup := ips[ip]; dup {
				return fmt.Errorf("%w: address %s is allocated to both %s and %s", ErrCorrupt, ip, other, a.Key)
			}
			ips[ip] = a.Key
		}
		keys[a.Key] = true
	}
	for _, c := range s.Cooling {
		if !c.IP.Is4() && !(s.Version >= SchemaVersionIPv6 && c.IP.Is6()) {
			return fmt.Errorf("%w: cooling entry without a valid IPv4 address", ErrCorrupt)
		}
	}
	if err := s.EC2.Validate(); err != nil {
		return fmt.Errorf("%w: ec2 section: %v", ErrCorrupt, err)
	}
	for i, n := range s.Networks {
		if n == "" {
			return fmt.Errorf("%w: network %d of the networks record is empty", ErrCorrupt, i)
		}
	}
	for i, d := range s.Demands {
		if d.Network == "" || d.ContainerID == "" || d.IfName == "" {
			return fmt.Errorf("%w: demand %d has an empty network, containerID or ifname", ErrCorrupt, i)
		}
	}
	return nil
}

// validAddrs checks an allocation's addresses: IP an IPv4 pod address
// (or, in a version-3 file, an IPv6 one), IP6 if set an IPv6 one beside an
// IPv4 IP.
func (s *State) validAddrs(a Allocation) error {
	v6 := s.Version >= SchemaVersionIPv6
	if !a.IP.Is4() && !(v6 && a.IP.Is6()) {
		return fmt.Errorf("%w: allocation %s has no valid IPv4 address", ErrCorrupt, a.Key)
	}
	if a.IP6.IsValid() && (!v6 || !a.IP6.Is6() || !a.IP.Is4()) {
		return fmt.Errorf("%w: allocation %s has ip6 %s beside %s (want an IPv6 address beside an IPv4 one, in a version-%d file)", ErrCorrupt, a.Key, a.IP6, a.IP, SchemaVersionIPv6)
	}
	for _, ip := range a.Addrs() {
		if !podAddress(ip) {
			return fmt.Errorf("%w: allocation %s holds %s, which no pool can contain (loopback, multicast, link-local or broadcast)", ErrCorrupt, a.Key, ip)
		}
	}
	if a.Egress4.IsValid() && (!v6 || !a.IP.Is6() || a.IP6.IsValid() || !egress4Addr(a.Egress4)) {
		return fmt.Errorf("%w: allocation %s has egress4 %s (want an address of %s beside one IPv6 address, in a version-%d file)", ErrCorrupt, a.Key, a.Egress4, Egress4Range(), SchemaVersionIPv6)
	}
	return nil
}

// PodAddress reports whether ip could ever be a pod's address: unicast,
// not loopback, link-local (169.254.1.1 and fe80::1 are every pod's
// gateways), multicast, unspecified, the IPv4 broadcast address or an
// IPv4-mapped IPv6 one. Static ranges and the state file are both held to it.
func PodAddress(ip netip.Addr) bool { return podAddress(ip) }

func podAddress(ip netip.Addr) bool {
	if ip.Is6() && ip.Is4In6() {
		return false
	}
	return ip.IsValid() && !ip.IsLoopback() && !ip.IsMulticast() && !ip.IsLinkLocalUnicast() &&
		!ip.IsUnspecified() && ip != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// validIfName: what the kernel accepts as an interface name, so a recorded
// host veth can never make DEL act on something like "../x" ("" is allowed:
// nothing to delete). netsetup also deletes only links of type veth.
func validIfName(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > 15 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == '/' || r == ':' || r >= 0x7f {
			return false
		}
	}
	return true
}

// DecodeState parses and validates the bytes of a state file, migrating a
// file of an earlier version to this one (in memory: the next save writes
// it in the current format).
func DecodeState(data []byte) (*State, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: file is empty", ErrCorrupt)
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if s.Version > 0 && s.Version < SchemaVersion {
		migrated, err := migrate(data, s.Version)
		if err != nil {
			return nil, err
		}
		s = State{}
		if err := json.Unmarshal(migrated, &s); err != nil {
			return nil, fmt.Errorf("%w: after migration: %v", ErrCorrupt, err)
		}
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	if s.Allocations == nil {
		s.Allocations = []Allocation{}
	}
	if s.Cooling == nil {
		s.Cooling = []Cooling{}
	}
	return &s, nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// EncodeState writes compact JSON: it is read and written on every ADD
// and DEL, and indentation made up a third of the encoding time and a
// sixth of the bytes to parse. `eni-cni list --json` or `jq .` show it
// indented.
//
// The version is stamped here, on every save: a state read from an older
// file (migrated in memory) is written in this binary's format, version 2
// unless it holds an IPv6 address (SchemaVersion).
func EncodeState(st *State) ([]byte, error) {
	st.Version = SchemaVersion
	if st.needsV3() {
		st.Version = SchemaVersionIPv6
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
