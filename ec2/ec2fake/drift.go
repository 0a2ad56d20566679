package ec2fake

import (
	"fmt"
	"slices"
)

// Drift hooks: changes made to the instance behind the client's back, as
// another tool, an operator or AWS itself would make them. None of them is
// counted as an EC2 call. Like EC2 changes, they reach IMDS after
// Config.IMDSLag.

// DetachENI detaches an ENI from the instance as someone else would
// (`aws ec2 detach-network-interface`); it stays "available" with its
// addresses.
func (s *Server) DetachENI(id string) error {
	defer s.flushChanges()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.lookupENILocked(id)
	if err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	if e.att == nil {
		return fmt.Errorf("detach %s: not attached", id)
	}
	in, err := s.detachLocked(e.att.id)
	if err != nil {
		return fmt.Errorf("detach %s: %w", id, err)
	}
	if in != nil {
		s.publishLocked(in, true)
	}
	return nil
}

// ReattachENI detaches an ENI and attaches it again at another device
// index of its card, between two of the client's looks (an operator's
// detach and attach).
func (s *Server) ReattachENI(id string, device int) error {
	defer s.flushChanges()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.lookupENILocked(id)
	if err != nil {
		return fmt.Errorf("reattach: %w", err)
	}
	if e.att == nil {
		return fmt.Errorf("reattach %s: not attached", id)
	}
	old := *e.att
	in, err := s.detachLocked(old.id)
	if err != nil {
		return fmt.Errorf("reattach %s: %w", id, err)
	}
	if _, err := s.attachLocked(e, old.instanceID, device, old.card, old.deleteOnTermination); err != nil {
		return fmt.Errorf("reattach %s at %d (left detached): %w", id, device, err)
	}
	if in != nil {
		s.publishLocked(in, true)
	}
	return nil
}

// UnassignIPs takes secondary addresses away from an ENI behind the
// client's back.
func (s *Server) UnassignIPs(id string, ips ...string) error {
	addrs, err := parseAddrs(ips)
	if err != nil {
		return fmt.Errorf("unassign: %w", err)
	}
	defer s.flushChanges()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.lookupENILocked(id)
	if err != nil {
		return fmt.Errorf("unassign: %w", err)
	}
	if err := s.unassignLocked(e, addrs, nil); err != nil {
		return fmt.Errorf("unassign from %s: %w", id, err)
	}
	s.publishENILocked(e, true)
	return nil
}

// AssignIPs assigns given secondary addresses to an ENI behind the client's
// back: a VIP that keepalived or kube-vip moves between nodes, an address
// an EIP is bound to.
func (s *Server) AssignIPs(id string, ips ...string) error {
	addrs, err := parseAddrs(ips)
	if err != nil {
		return fmt.Errorf("assign: %w", err)
	}
	defer s.flushChanges()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.lookupENILocked(id)
	if err != nil {
		return fmt.Errorf("assign: %w", err)
	}
	if _, _, err := s.assignLocked(e, assignRequest{ips: addrs}); err != nil {
		return fmt.Errorf("assign to %s: %w", id, err)
	}
	s.publishENILocked(e, true)
	return nil
}

// TagENI sets tags on an ENI, such as node.k8s.amazonaws.com/no_manage.
func (s *Server) TagENI(id string, tags map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, err := s.lookupENILocked(id)
	if err != nil {
		return fmt.Errorf("tag: %w", err)
	}
	for k, v := range tags {
		e.tags[k] = v
	}
	return nil
}

// BecomeInstance makes the fake serve another instance in the same VPC: a
// node launched from an image whose disk was baked on the instance served
// so far. The old instance's ENIs stay in EC2, attached to the old
// instance, which keeps existing but leaves the world the API serves; the
// new one gets its own primary ENI and takes the old one's place among the
// instances. IMDS answers for the new instance at once (a new instance's
// IMDS is not stale).
func (s *Server) BecomeInstance(id string) error {
	if !validID(id, "i") {
		return fmt.Errorf("instance id %q: want i-<hex>", id)
	}
	defer s.flushChanges()
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.self
	if _, taken := s.instances[id]; taken || slices.Contains(s.former, id) {
		return fmt.Errorf("instance %s was already served", id)
	}
	in, err := s.addInstanceLocked(InstanceConfig{ID: id, Type: old.typ, AvailabilityZone: old.az})
	if err != nil {
		return fmt.Errorf("become %s: %w", id, err)
	}
	s.dropInstanceLocked(in)
	i := slices.Index(s.instOrder, old.id)
	s.instOrder[i] = id
	s.instances[id] = in
	delete(s.instances, old.id)
	s.former = append(s.former, old.id)
	// The SDK keeps its IMDSv2 token across the change, as the one served
	// URL stays the same.
	in.tokens, in.imdsURL = old.tokens, old.imdsURL
	s.self = in
	return nil
}

// SetHook runs fn each time action has taken effect, before its reply is
// sent, without the server's lock. A hook that blocks holds the reply back
// (a lost reply, a pass killed mid-call); one that signals lets a test kill
// the client at that moment. A nil fn removes the hook.
func (s *Server) SetHook(action string, fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fn == nil {
		delete(s.hooks, action)
		return
	}
	s.hooks[action] = fn
}

func (s *Server) runHook(action string) {
	s.mu.Lock()
	fn := s.hooks[action]
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
}
