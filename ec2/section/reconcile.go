package section

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Drift is where IMDS (the instance, read locally and for free) and the
// section disagree. Only EC2 can say which is right (IMDS lags EC2), so a
// non-empty Drift makes `warm` ask DescribeNetworkInterfaces; nothing is
// removed from the section on IMDS's word alone.
type Drift struct {
	NewENIs   []string     // attached per IMDS, unknown to the section
	GoneENIs  []string     // in the section, not attached per IMDS
	GoneAddrs []netip.Addr // in the section, not listed by IMDS
	// GonePrefixes are IPv6 prefixes in the section IMDS does not list.
	GonePrefixes []netip.Prefix
	Found        int // addresses IMDS lists that joined the pool
}

// Empty reports whether IMDS and the section agree (found addresses are
// taken in at once and are no disagreement left).
func (d Drift) Empty() bool {
	return len(d.NewENIs)+len(d.GoneENIs)+len(d.GoneAddrs)+len(d.GonePrefixes) == 0
}

// Key identifies the disagreement, to tell a new one from one EC2 has
// already been asked about.
func (d Drift) Key() string {
	if d.Empty() {
		return ""
	}
	h := fnv.New64a()
	fmt.Fprint(h, d.NewENIs, d.GoneENIs, d.GoneAddrs)
	if len(d.GonePrefixes) > 0 {
		// Only then: the key of an IPv4 disagreement stays what it was.
		fmt.Fprint(h, d.GonePrefixes)
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

func (d Drift) String() string {
	var parts []string
	if len(d.NewENIs) > 0 {
		parts = append(parts, "new ENIs "+strings.Join(d.NewENIs, " "))
	}
	if len(d.GoneENIs) > 0 {
		parts = append(parts, "ENIs gone "+strings.Join(d.GoneENIs, " "))
	}
	if n := len(d.GoneAddrs); n > 0 {
		s := fmt.Sprint(d.GoneAddrs[:min(n, 6)])
		if n > 6 {
			s = fmt.Sprintf("%s and %d more", s[:len(s)-1], n-6) + "]"
		}
		parts = append(parts, fmt.Sprintf("%d addresses gone %s", n, s))
	}
	if len(d.GonePrefixes) > 0 {
		parts = append(parts, fmt.Sprintf("IPv6 prefixes gone %v", d.GonePrefixes))
	}
	return strings.Join(parts, "; ")
}

// IMDSGrace is how long an address or ENI the store has may be missing
// from IMDS before that counts as a disagreement: IMDS shows what EC2
// assigned after a lag of seconds, sometimes longer.
const IMDSGrace = time.Minute

// Reconcile compares an IMDS discovery with the section, cheaply and
// without EC2. It records what IMDS adds (instance facts, ENI attributes,
// addresses found on the instance that are not tombstoned; new ENIs as
// unverified until EC2 has shown their tags) and reports what it
// contradicts. The caller has checked that inst is this section's instance.
func Reconcile(s *EC2, inst *Instance, now time.Time) Drift {
	s.InstanceID, s.InstanceType, s.AZ, s.Region = inst.ID, inst.Type, inst.AZ, inst.Region()
	var d Drift
	listed := map[netip.Addr]bool{}
	attached := map[string]bool{}
	for _, info := range inst.ENIs {
		attached[info.ID] = true
		_, known := s.ENI(info.ID)
		e := s.upsertENI(info)
		if !known && !e.Primary() {
			e.Unverified = true
		}
		if e.Unverified {
			d.NewENIs = append(d.NewENIs, info.ID)
		}
		// An address (or prefix) found here takes one of the ENI's slots
		// the store did not count: counting it keeps warm from asking EC2
		// for more than the ENI holds. Tombstoned ones (IMDS lagging an
		// unassign) are neither taken in nor counted.
		take := func(addrs []netip.Addr) int {
			for _, a := range addrs {
				listed[a] = true
			}
			fresh := slices.DeleteFunc(slices.Clone(addrs), func(a netip.Addr) bool { return a == info.PrimaryIP || s.Tombstoned(a, now) })
			return s.AddAddrs(info.ID, e.FoundOrigin(), fresh, now)
		}
		n := take(info.Secondary)
		e.Secondary += n
		d.Found += n
		for _, p := range info.Prefixes {
			n := take(Expand(p))
			if n > 0 && !slices.Contains(e.Prefixes, p.Masked()) {
				e.Prefixes = append(e.Prefixes, p.Masked())
			}
			d.Found += n
		}
		d.Found += s.AddIPv6Prefixes(info.ID, e.FoundOrigin(), info.IPv6Prefixes, now)
	}
	for _, e := range s.ENIs {
		if !attached[e.ID] {
			d.GoneENIs = append(d.GoneENIs, e.ID)
			continue
		}
		d.GonePrefixes = append(d.GonePrefixes, gonePrefixes(e, inst, now)...)
	}
	for _, a := range s.Addrs {
		if attached[a.ENI] && !listed[a.IP] && !a.Lost && Elapsed(now, a.AddedAt, IMDSGrace) {
			d.GoneAddrs = append(d.GoneAddrs, a.IP)
		}
	}
	return d
}

// gonePrefixes are e's IPv6 prefixes the ENI's IMDS entry does not list
// past IMDSGrace.
func gonePrefixes(e ENI, inst *Instance, now time.Time) []netip.Prefix {
	i := slices.IndexFunc(inst.ENIs, func(info ENIInfo) bool { return info.ID == e.ID })
	if i < 0 || !inst.ENIs[i].IPv6Read {
		return nil
	}
	var out []netip.Prefix
	for _, p := range e.IPv6Prefixes {
		if !slices.Contains(inst.ENIs[i].IPv6Prefixes, p.Prefix) && Elapsed(now, p.AddedAt, IMDSGrace) {
			out = append(out, p.Prefix)
		}
	}
	return out
}

// DropSettledLost removes lost addresses no allocation holds any more:
// they are not this instance's, and no pod uses them. It returns them.
func (s *EC2) DropSettledLost(allocated func(netip.Addr) bool) []netip.Addr {
	var out []netip.Addr
	s.Addrs = slices.DeleteFunc(s.Addrs, func(a Addr) bool {
		if a.Lost && !allocated(a.IP) {
			out = append(out, a.IP)
			return true
		}
		return false
	})
	return out
}

// Identify checks that the section describes the instance IMDS names. A
// section of another instance (a node image baked after install, a root
// volume moved) is dropped whole: its ENIs and addresses belong to that
// instance, and using them would duplicate its addresses in the VPC. It
// returns the instance ID it dropped, or "".
func (s *EC2) Identify(instanceID string) (dropped string) {
	if s.InstanceID == "" || s.InstanceID == instanceID {
		return ""
	}
	dropped = s.InstanceID
	*s = EC2{InstanceID: instanceID}
	return dropped
}
