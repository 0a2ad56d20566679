package gc

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// HostRule is a policy rule of ours: `to IP` (prio 512) or `from IP`
// (prio 1536, ENI table).
type HostRule struct {
	IP       netip.Addr
	Priority int
	Table    int
	From     bool
	Dst      netip.Prefix // of a `from` rule limited to a destination
}

// HostRoute is a /32 route to a pod address through one of our veths.
type HostRoute struct {
	IP   netip.Addr
	Veth string
}

// Host is what the sweep needs of the node's network stack: listings of our
// objects (host veths with our naming, our rules, our /32 routes) and their
// deletion.
type Host interface {
	Veths() ([]string, error)
	Rules() ([]HostRule, error)
	Routes() ([]HostRoute, error)
	DeleteVeth(names ...string) error
	DeleteRule(HostRule) error
	DeleteRoute(HostRoute) error
}

// HostSnapshot is the node's objects, listed before the store is read.
type HostSnapshot struct {
	Veths  []string
	Rules  []HostRule
	Routes []HostRoute
}

// Owned is what the store explains: each allocated address and its host veth.
type Owned map[netip.Addr]string

// Leftovers are host objects no allocation explains.
type Leftovers struct {
	Veths  []string
	Rules  []HostRule
	Routes []HostRoute
}

func (l Leftovers) Len() int { return len(l.Veths) + len(l.Rules) + len(l.Routes) }

// ListHost takes the snapshot. List first, read the store second: an ADD
// records its allocation before it creates anything, so every object in the
// snapshot that belongs to a live ADD is explained by the store read after.
func ListHost(h Host) (HostSnapshot, error) {
	var s HostSnapshot
	var err error
	if s.Veths, err = h.Veths(); err != nil {
		return s, fmt.Errorf("list host veths: %w", err)
	}
	if s.Rules, err = h.Rules(); err != nil {
		return s, fmt.Errorf("list rules: %w", err)
	}
	if s.Routes, err = h.Routes(); err != nil {
		return s, fmt.Errorf("list routes: %w", err)
	}
	return s, nil
}

// FindLeftovers returns the objects of s that owned does not explain. It is
// pure; the caller deletes them while holding the store lock, so no ADD can
// take one of these addresses in between.
func FindLeftovers(s HostSnapshot, owned Owned) Leftovers {
	vethOwned := make(map[string]bool, len(owned))
	for _, v := range owned {
		vethOwned[v] = true
	}
	var l Leftovers
	for _, v := range s.Veths {
		if !vethOwned[v] {
			l.Veths = append(l.Veths, v)
		}
	}
	for _, r := range s.Rules {
		if _, ok := owned[r.IP]; !ok {
			l.Rules = append(l.Rules, r)
		}
	}
	for _, r := range s.Routes {
		// A route disappears with its veth; only routes through a veth we
		// keep, to an address that veth does not own, need deleting.
		if owner, ok := owned[r.IP]; (!ok || owner != r.Veth) && vethOwned[r.Veth] {
			l.Routes = append(l.Routes, r)
		}
	}
	slices.Sort(l.Veths)
	slices.SortFunc(l.Rules, func(a, b HostRule) int { return a.IP.Compare(b.IP) })
	return l
}

// RemoveLeftovers deletes l from h. Every deletion is tried; the errors are
// returned together.
func RemoveLeftovers(h Host, l Leftovers) error {
	var errs []error
	for _, r := range l.Rules {
		if err := h.DeleteRule(r); err != nil {
			errs = append(errs, fmt.Errorf("delete rule for %s prio %d: %w", r.IP, r.Priority, err))
		}
	}
	for _, r := range l.Routes {
		if err := h.DeleteRoute(r); err != nil {
			errs = append(errs, fmt.Errorf("delete route %s dev %s: %w", r.IP, r.Veth, err))
		}
	}
	if len(l.Veths) > 0 {
		if err := h.DeleteVeth(l.Veths...); err != nil {
			errs = append(errs, fmt.Errorf("delete veths %v: %w", l.Veths, err))
		}
	}
	return errors.Join(errs...)
}
