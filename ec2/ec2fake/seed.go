package ec2fake

import (
	"fmt"
	"net/netip"
)

// ENISpec describes an ENI to pre-seed with SeedENI. Seeding goes through
// the same rules as the API (subnet space, per-ENI and per-instance limits)
// but is visible in IMDS at once, without the lag.
type ENISpec struct {
	SubnetID         string // default: the primary ENI's subnet
	Detached         bool   // leave it "available" instead of attaching it
	DeviceIndex      int    // default: the lowest free index of the card
	NetworkCard      int    // network card of the attachment
	PrimaryIP        string // default: allocated
	NoIPv4           bool   // no IPv4 at all (IMDS local-ipv4s then 404s)
	SecondaryIPs     []string
	SecondaryIPCount int
	Prefixes         []string
	PrefixCount      int
	Description      string
	SecurityGroupIDs []string
	Tags             map[string]string
	// DeleteOnTermination is the attachment attribute.
	DeleteOnTermination bool
}

// SeedENI creates an ENI with the given addresses and, unless
// spec.Detached, attaches it to the (first) instance.
func (s *Server) SeedENI(spec ENISpec) (ENI, error) {
	defer s.flushChanges()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seedENILocked(s.self, spec)
}

func (s *Server) seedENILocked(in *instance, spec ENISpec) (ENI, error) {
	req, ar, err := spec.requests()
	if err != nil {
		return ENI{}, err
	}
	if req.subnetID == "" {
		req.subnetID = in.attached[0].subnetID
	}
	e, err := s.createENILocked(req)
	if err != nil {
		return ENI{}, fmt.Errorf("seed eni: %w", err)
	}
	if _, _, err := s.assignLocked(e, ar); err != nil {
		_ = s.deleteENILocked(e)
		return ENI{}, fmt.Errorf("seed eni addresses: %w", err)
	}
	if !spec.Detached {
		dev := spec.DeviceIndex
		if dev == 0 {
			dev = s.freeDeviceLocked(in, spec.NetworkCard)
		}
		if _, err := s.attachLocked(e, in.id, dev, spec.NetworkCard, spec.DeleteOnTermination); err != nil {
			_ = s.deleteENILocked(e)
			return ENI{}, fmt.Errorf("seed eni attach: %w", err)
		}
	}
	s.publishLocked(in, false)
	return s.snapshotLocked(e), nil
}

func (spec ENISpec) requests() (createRequest, assignRequest, error) {
	req := createRequest{
		subnetID: spec.SubnetID, sgs: spec.SecurityGroupIDs, description: spec.Description,
		noIPv4: spec.NoIPv4, tags: spec.Tags,
	}
	ar := assignRequest{count: spec.SecondaryIPCount, prefixCount: spec.PrefixCount}
	var err error
	if spec.PrimaryIP != "" {
		if req.primary, err = netip.ParseAddr(spec.PrimaryIP); err != nil {
			return req, ar, fmt.Errorf("seed eni primary ip: %w", err)
		}
	}
	if ar.ips, err = parseAddrs(spec.SecondaryIPs); err != nil {
		return req, ar, fmt.Errorf("seed eni secondary ips: %w", err)
	}
	if ar.prefixes, err = parsePrefixes(spec.Prefixes); err != nil {
		return req, ar, fmt.Errorf("seed eni prefixes: %w", err)
	}
	return req, ar, nil
}

// SeedIPs assigns count more secondary addresses to an ENI, visible in IMDS
// at once, and returns them.
func (s *Server) SeedIPs(eniID string, count int) ([]string, error) {
	ips, _, err := s.seedAssign(eniID, assignRequest{count: count})
	return ips, err
}

// SeedPrefixes delegates count more /28 prefixes to an ENI, visible in IMDS
// at once, and returns them.
func (s *Server) SeedPrefixes(eniID string, count int) ([]string, error) {
	_, pfx, err := s.seedAssign(eniID, assignRequest{prefixCount: count})
	return pfx, err
}

func (s *Server) seedAssign(eniID string, ar assignRequest) ([]string, []string, error) {
	defer s.flushChanges()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.lookupENILocked(eniID)
	if err != nil {
		return nil, nil, fmt.Errorf("seed addresses: %w", err)
	}
	ips, pfx, err := s.assignLocked(e, ar)
	if err != nil {
		return nil, nil, fmt.Errorf("seed addresses on %s: %w", eniID, err)
	}
	s.publishENILocked(e, false)
	return addrStrings(ips), prefixStrings(pfx), nil
}

// ENIs returns what EC2 currently has, attached ENIs by device index first.
func (s *Server) ENIs() []ENI {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ENI
	for _, e := range s.sortedENIsLocked() {
		out = append(out, s.snapshotLocked(e))
	}
	return out
}

// ENI returns one ENI by id.
func (s *Server) ENI(id string) (ENI, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.enis[id]
	if e == nil {
		return ENI{}, false
	}
	return s.snapshotLocked(e), true
}

// PrimaryENI returns the (first) instance's ENI at device index 0.
func (s *Server) PrimaryENI() ENI {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked(s.self.attached[0])
}

// SyncIMDS makes every instance's IMDS show the current EC2 state now,
// skipping any pending lag.
func (s *Server) SyncIMDS() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, in := range s.instances {
		s.publishLocked(in, false)
	}
}

func parseAddrs(in []string) ([]netip.Addr, error) {
	out := make([]netip.Addr, 0, len(in))
	for _, v := range in {
		a, err := netip.ParseAddr(v)
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("%q is not an IPv4 address", v)
		}
		out = append(out, a)
	}
	return out, nil
}

func parsePrefixes(in []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(in))
	for _, v := range in {
		p, err := netip.ParsePrefix(v)
		if err != nil || !p.Addr().Is4() {
			return nil, fmt.Errorf("%q is not an IPv4 prefix", v)
		}
		out = append(out, p)
	}
	return out, nil
}

func addrStrings(in []netip.Addr) []string {
	out := make([]string, 0, len(in))
	for _, a := range in {
		out = append(out, a.String())
	}
	return out
}

func prefixStrings(in []netip.Prefix) []string {
	out := make([]string, 0, len(in))
	for _, p := range in {
		out = append(out, p.String())
	}
	return out
}
