package plugin

import (
	"context"
	"fmt"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/netsetup"
)

// Provider is where a network's addresses come from (pool.source: static
// ranges, or the node's ENIs in ec2/provider): what differs between them
// when serving CNI verbs.
type Provider interface {
	// Prepare readies the node for address a (for ec2: its ENI's link and
	// route table) and says how the pod's traffic is routed. sec is the
	// state's ec2 section as read with the allocation (nil if none).
	Prepare(ctx context.Context, a alloc.Allocation, sec *section.EC2) (netsetup.Routing, error)
	// Routing is Prepare without changing anything, for CHECK; an error
	// means the routing cannot be known (CHECK fails rather than skip).
	Routing(a alloc.Allocation, sec *section.EC2) (netsetup.Routing, error)
	// Refresh compares the store with the instance (IMDS) and adds the
	// addresses it does not know yet; it returns how many it added.
	Refresh(ctx context.Context) (int, error)
	// Dry serves an ADD that found no free address (cause): it may find
	// or wait for one, or explains the empty pool. attrs go to the ADD's
	// log line.
	Dry(ctx context.Context, req alloc.Request, cause error) (a alloc.Allocation, existed bool, sec *section.EC2, attrs []any, err error)
	// Ready reports whether the network is ready for pods (STATUS). act
	// lets it start what makes it ready (the STATUS verb); without, it
	// only looks (`eni-cni status`, read-only).
	Ready(ctx context.Context, st *alloc.State, act bool) error
}

// staticProvider is a pool of configured ranges on the node's own network.
type staticProvider struct{ pool alloc.Pool }

func (s staticProvider) Prepare(context.Context, alloc.Allocation, *section.EC2) (netsetup.Routing, error) {
	return netsetup.Routing{}, nil
}

func (s staticProvider) Routing(alloc.Allocation, *section.EC2) (netsetup.Routing, error) {
	return netsetup.Routing{}, nil
}

func (s staticProvider) Refresh(context.Context) (int, error) { return 0, nil }

// Dry: a static pool gets no new addresses; the runtime retries (code 11).
func (s staticProvider) Dry(_ context.Context, _ alloc.Request, cause error) (alloc.Allocation, bool, *section.EC2, []any, error) {
	return alloc.Allocation{}, false, nil, nil, cause
}

func (s staticProvider) Ready(_ context.Context, st *alloc.State, _ bool) error {
	if s.pool.Size(st) == 0 {
		return fmt.Errorf("the static pool has no addresses")
	}
	return nil
}
