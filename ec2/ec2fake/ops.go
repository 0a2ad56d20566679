package ec2fake

import (
	"maps"
	"net/netip"
	"slices"
)

// The *Locked operations below are the EC2 semantics shared by the Query API
// handlers and the seeding methods. They run with s.mu held, validate fully
// before changing anything (EC2 calls are all-or-nothing) and return
// *APIError values carrying EC2's error codes.

// createRequest describes a new ENI.
type createRequest struct {
	subnetID    string
	sgs         []string
	description string
	primary     netip.Addr // chosen by EC2 when invalid
	noIPv4      bool
	tags        map[string]string
}

func (s *Server) lookupSubnetLocked(id string) (*subnet, error) {
	if id == "" {
		return nil, apiErr("MissingParameter", "The request must contain the parameter SubnetId")
	}
	if !validID(id, "subnet") {
		return nil, apiErr("InvalidSubnetID.Malformed", "Invalid id: \"%s\" (expecting \"subnet-...\")", id)
	}
	sn := s.subnets[id]
	if sn == nil {
		return nil, apiErr("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", id)
	}
	return sn, nil
}

func (s *Server) createENILocked(req createRequest) (*eni, error) {
	sn, err := s.lookupSubnetLocked(req.subnetID)
	if err != nil {
		return nil, err
	}
	sgs := req.sgs
	if len(sgs) == 0 {
		sgs = s.cfg.SecurityGroupIDs
	}
	for _, sg := range sgs {
		if !slices.Contains(s.cfg.SecurityGroupIDs, sg) {
			return nil, apiErr("InvalidGroup.NotFound", "The security group '%s' does not exist", sg)
		}
	}
	id := s.newIDLocked("eni")
	if !req.noIPv4 {
		if req.primary.IsValid() {
			err = sn.claimIP(req.primary, id)
		} else {
			req.primary, err = sn.allocIP(id)
		}
		if err != nil {
			return nil, err
		}
	}
	s.created++
	e := &eni{
		id: id, mac: s.newMACLocked(), subnetID: sn.id, description: req.description,
		sgs: slices.Clone(sgs), primary: req.primary, tags: maps.Clone(req.tags), created: s.created,
	}
	if e.tags == nil {
		e.tags = map[string]string{}
	}
	s.enis[id] = e
	s.noteLocked(e)
	return e, nil
}

// assignRequest is what AssignPrivateIpAddresses asks for; exactly one of the
// four fields is normally set.
type assignRequest struct {
	count       int
	ips         []netip.Addr
	prefixCount int
	prefixes    []netip.Prefix
}

func (r assignRequest) slots() int {
	return r.count + len(r.ips) + r.prefixCount + len(r.prefixes)
}

// assignLocked adds secondary addresses and /28 prefixes to an ENI. Both
// draw on the same per-ENI slot limit, as in real EC2.
func (s *Server) assignLocked(e *eni, r assignRequest) ([]netip.Addr, []netip.Prefix, error) {
	if e.slots()+r.slots() > s.limitsOfLocked(e).IPv4PerENI {
		return nil, nil, apiErr("PrivateIpAddressLimitExceeded", "Number of private addresses will exceed limit.")
	}
	sn := s.subnets[e.subnetID]
	var ips []netip.Addr
	var pfx []netip.Prefix
	fail := func(err error) ([]netip.Addr, []netip.Prefix, error) {
		for _, a := range ips {
			sn.releaseIP(a)
		}
		for _, p := range pfx {
			sn.releasePrefix(p)
		}
		return nil, nil, err
	}
	for _, a := range r.ips {
		if err := sn.claimIP(a, e.id); err != nil {
			return fail(err)
		}
		ips = append(ips, a)
	}
	for range r.count {
		a, err := sn.allocIP(e.id)
		if err != nil {
			return fail(err)
		}
		ips = append(ips, a)
	}
	for _, p := range r.prefixes {
		if err := sn.claimPrefix(p, e.id); err != nil {
			return fail(err)
		}
		pfx = append(pfx, p)
	}
	for range r.prefixCount {
		p, err := sn.allocPrefix(e.id)
		if err != nil {
			return fail(err)
		}
		pfx = append(pfx, p)
	}
	e.secondaries = append(e.secondaries, ips...)
	e.prefixes = append(e.prefixes, pfx...)
	s.noteLocked(e)
	return ips, pfx, nil
}

// unassignLocked removes secondary addresses and prefixes. Like EC2 it
// refuses the whole call if any of them is not on the ENI.
func (s *Server) unassignLocked(e *eni, ips []netip.Addr, pfx []netip.Prefix) error {
	for _, a := range ips {
		if a == e.primary {
			return apiErr("InvalidParameterValue", "The primary private IP address %s of %s cannot be unassigned", a, e.id)
		}
		if !slices.Contains(e.secondaries, a) {
			return apiErr("InvalidParameterValue", "Some of the specified addresses are not assigned to interface %s", e.id)
		}
	}
	for _, p := range pfx {
		if !slices.Contains(e.prefixes, p) {
			return apiErr("InvalidParameterValue", "Some of the specified prefixes are not assigned to interface %s", e.id)
		}
	}
	sn := s.subnets[e.subnetID]
	for _, a := range ips {
		sn.releaseIP(a)
	}
	for _, p := range pfx {
		sn.releasePrefix(p)
	}
	e.secondaries = slices.DeleteFunc(e.secondaries, func(a netip.Addr) bool { return slices.Contains(ips, a) })
	e.prefixes = slices.DeleteFunc(e.prefixes, func(p netip.Prefix) bool { return slices.Contains(pfx, p) })
	s.noteLocked(e)
	return nil
}

// limitsOfLocked is the limits of the instance e is attached to; a detached
// ENI gets the first instance's.
func (s *Server) limitsOfLocked(e *eni) Limits {
	if e.att != nil {
		if in := s.instances[e.att.instanceID]; in != nil {
			return in.limits
		}
	}
	return s.self.limits
}

func (s *Server) checkInstanceLocked(id string) (*instance, error) {
	if id == "" {
		return nil, apiErr("MissingParameter", "The request must contain the parameter InstanceId")
	}
	if !validID(id, "i") {
		return nil, apiErr("InvalidInstanceID.Malformed", "Invalid id: \"%s\"", id)
	}
	in := s.instances[id]
	if in == nil {
		return nil, apiErr("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
	}
	return in, nil
}

// freeDeviceLocked returns the lowest unused device index of a card (above
// the primary's 0 on card 0).
func (s *Server) freeDeviceLocked(in *instance, card int) int {
	used := map[int]bool{}
	for _, e := range in.attached {
		if e.att.card == card {
			used[e.att.device] = true
		}
	}
	if card > 0 && !used[0] {
		return 0
	}
	d := 1
	for used[d] {
		d++
	}
	return d
}

func (s *Server) attachLocked(e *eni, instanceID string, device, card int, deleteOnTermination bool) (*attachment, error) {
	in, err := s.checkInstanceLocked(instanceID)
	if err != nil {
		return nil, err
	}
	if e.att != nil {
		return nil, apiErr("InvalidParameterValue", "Interface: [%s] in use.", e.id)
	}
	if device < 0 {
		return nil, apiErr("InvalidParameterValue", "Invalid value '%d' for deviceIndex", device)
	}
	if card < 0 || card >= in.limits.cards() {
		return nil, apiErr("InvalidParameterValue", "Invalid value '%d' for networkCardIndex: %s has %d network cards", card, in.typ, in.limits.cards())
	}
	if sn := s.subnets[e.subnetID]; sn.az != in.az {
		return nil, apiErr("InvalidParameterValue", "Network interface %s is in availability zone %s, instance %s is in %s",
			e.id, sn.az, instanceID, in.az)
	}
	attached, onCard := in.attached, 0
	for _, o := range attached {
		if o.att.card != card {
			continue
		}
		onCard++
		if o.att.device == device {
			return nil, apiErr("InvalidParameterValue",
				"Instance '%s' already has an interface attached at device index '%d' of network card %d.", instanceID, device, card)
		}
	}
	if len(attached) >= in.limits.MaxENIs || onCard >= in.limits.perCard(card) {
		return nil, apiErr("AttachmentLimitExceeded", "Interface count %d exceeds the limit for %s (network card %d)",
			len(attached)+1, in.typ, card)
	}
	e.att = &attachment{
		id: s.newIDLocked("eni-attach"), instanceID: instanceID, device: device, card: card,
		deleteOnTermination: deleteOnTermination, at: s.now().UTC(),
	}
	in.attached = append(in.attached, e)
	slices.SortFunc(in.attached, func(a, b *eni) int { return a.att.slot() - b.att.slot() })
	s.noteLocked(e)
	return e.att, nil
}

func (s *Server) findAttachmentLocked(attID string) (*eni, error) {
	if attID == "" {
		return nil, apiErr("MissingParameter", "The request must contain the parameter AttachmentId")
	}
	for _, e := range s.enis {
		if e.att != nil && e.att.id == attID {
			return e, nil
		}
	}
	return nil, apiErr("InvalidAttachmentID.NotFound", "The attachment ID '%s' does not exist", attID)
}

// detachLocked detaches and returns the instance the ENI was on (nil for
// an instance that left the world).
func (s *Server) detachLocked(attID string) (*instance, error) {
	e, err := s.findAttachmentLocked(attID)
	if err != nil {
		return nil, err
	}
	if e.att.device == 0 && e.att.card == 0 {
		return nil, apiErr("OperationNotPermitted",
			"The network interface at device index 0 and networkCard index 0 cannot be detached.")
	}
	in := s.instances[e.att.instanceID]
	if in != nil {
		in.attached = slices.DeleteFunc(in.attached, func(o *eni) bool { return o == e })
	}
	e.att = nil
	s.noteLocked(e)
	return in, nil
}

func (s *Server) deleteENILocked(e *eni) error {
	if e.att != nil {
		return apiErr("InvalidNetworkInterface.InUse", "Network interface '%s' is currently in use.", e.id)
	}
	sn := s.subnets[e.subnetID]
	for _, a := range e.privateIPs() {
		sn.releaseIP(a)
	}
	for _, p := range e.prefixes {
		sn.releasePrefix(p)
	}
	for _, q := range slices.Concat(prefixes128(e.ipv6s), e.prefixes6) {
		s.releaseIPv6Locked(e, q)
	}
	delete(s.enis, e.id)
	delete(s.macs, e.mac)
	s.noteGoneLocked(e)
	return nil
}
