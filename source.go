package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/pool"
	"github.com/eni-cni/eni-cni/netsetup"
)

// poolSource is what differs between pool sources when serving CNI verbs.
type poolSource interface {
	// prepare readies the node for address a (for ec2: its ENI's link and
	// route table) and says how the pod's traffic is routed. sec is the
	// state's ec2 section as read with the allocation (nil if none).
	prepare(a alloc.Allocation, sec *pool.EC2) (podRouting, error)
	// routing is prepare without changing anything, for CHECK.
	routing(a alloc.Allocation, sec *pool.EC2) podRouting
	// refresh looks for addresses the store does not know yet, once, when
	// the pool is empty; it returns how many it added.
	refresh(ctx context.Context) (int, error)
	// ready reports whether ADD can work at all (STATUS).
	ready(ctx context.Context, st *alloc.State) error
	// exhausted explains an empty pool to the operator.
	exhausted(err error) error
}

// podRouting is the policy routing of a pod address: the table of its
// `from` rule (0: none, the main table) and, with SNAT, the destinations the
// rule is limited to.
type podRouting struct {
	Table    int
	FromDsts []netip.Prefix
}

// staticSource is a pool of configured ranges on the node's own network.
type staticSource struct{ pool alloc.Pool }

func (s staticSource) prepare(alloc.Allocation, *pool.EC2) (podRouting, error) {
	return podRouting{}, nil
}
func (s staticSource) routing(alloc.Allocation, *pool.EC2) podRouting { return podRouting{} }
func (s staticSource) refresh(context.Context) (int, error)           { return 0, nil }
func (s staticSource) exhausted(err error) error                      { return err }
func (s staticSource) ready(_ context.Context, st *alloc.State) error {
	if s.pool.Size(st) == 0 {
		return fmt.Errorf("%w: the static pool has no addresses", errNotReady)
	}
	return nil
}

// ec2Source hands out the ENI secondary addresses `eni-cni warm` put in the
// store. ADD never calls EC2; it may read IMDS once when the pool is empty.
type ec2Source struct {
	cfg *config
	mgr *alloc.Manager
}

func (s ec2Source) eni(a alloc.Allocation, sec *pool.EC2) (pool.ENI, error) {
	e, ok := sec.ENI(a.ENI)
	if !ok {
		return e, fmt.Errorf("address %s belongs to %s, which the store does not describe", a.IP, a.ENI)
	}
	return e, nil
}

func (s ec2Source) prepare(a alloc.Allocation, sec *pool.EC2) (podRouting, error) {
	e, err := s.eni(a, sec)
	if err != nil || e.Table() == 0 {
		return podRouting{}, err
	}
	link := netsetup.ENILink{MAC: e.MAC, MTU: s.cfg.MTU, Table: e.Table(), SubnetCIDR: e.SubnetCIDR, Gateway: e.Gateway()}
	if err := netsetup.EnsureENI(link); err != nil {
		return podRouting{}, fmt.Errorf("set up %s (%s) for %s: %w", e.ID, e.MAC, a.IP, err)
	}
	return s.routingOf(e), nil
}

func (s ec2Source) routing(a alloc.Allocation, sec *pool.EC2) podRouting {
	e, err := s.eni(a, sec)
	if err != nil {
		return podRouting{}
	}
	return s.routingOf(e)
}

// routingOf: a pod on a secondary ENI sends through that ENI; with SNAT,
// only traffic to the VPC does, and the rest leaves through the primary ENI
// under the node's address.
func (s ec2Source) routingOf(e pool.ENI) podRouting {
	if e.Table() == 0 {
		return podRouting{}
	}
	r := podRouting{Table: e.Table()}
	if s.cfg.SNAT {
		r.FromDsts = e.VPCCIDRs
	}
	return r
}

func (s ec2Source) refresh(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return imdsRefresh(ctx, s.cfg, s.mgr)
}

func (s ec2Source) exhausted(err error) error {
	return fmt.Errorf("%w; IMDS lists no new addresses either: check that `eni-cni warm` runs (eni-cni-warm.timer) and its output", err)
}

// ready: a pool with addresses can serve ADD; an empty one can if IMDS
// answers (warm will fill it). Only an empty pool and no IMDS is a fault.
func (s ec2Source) ready(ctx context.Context, st *alloc.State) error {
	if s.cfg.Pool.Size(st) > 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := imdsCheck(ctx, s.cfg); err != nil {
		return fmt.Errorf("%w: the pool is empty and %w", errNotReady, err)
	}
	return nil
}

// internalResult is what `eni-cni internal imds-refresh` prints.
type internalResult struct {
	Added int `json:"added"`
}
