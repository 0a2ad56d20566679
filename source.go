package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/pool"
	"github.com/eni-cni/eni-cni/netsetup"
	"github.com/eni-cni/eni-cni/netsetup/snat"
)

// poolSource is what differs between pool sources when serving CNI verbs.
type poolSource interface {
	// prepare readies the node for address a (for ec2: its ENI's link and
	// route table) and says how the pod's traffic is routed. sec is the
	// state's ec2 section as read with the allocation (nil if none).
	prepare(ctx context.Context, a alloc.Allocation, sec *pool.EC2) (podRouting, error)
	// routing is prepare without changing anything, for CHECK; an error
	// means the routing cannot be known (CHECK fails rather than skip).
	routing(a alloc.Allocation, sec *pool.EC2) (podRouting, error)
	// refresh compares the store with the instance (IMDS) and adds the
	// addresses it does not know yet; it returns how many it added.
	refresh(ctx context.Context) (int, error)
	// dry serves an ADD that found no free address (cause): it may find
	// or wait for one, or explains the empty pool. attrs go to the ADD's
	// log line.
	dry(ctx context.Context, req alloc.Request, cause error) (a alloc.Allocation, existed bool, sec *pool.EC2, attrs []any, err error)
	// ready reports whether ADD can work at all (STATUS).
	ready(ctx context.Context, st *alloc.State) error
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

func (s staticSource) prepare(context.Context, alloc.Allocation, *pool.EC2) (podRouting, error) {
	return podRouting{}, nil
}
func (s staticSource) routing(alloc.Allocation, *pool.EC2) (podRouting, error) {
	return podRouting{}, nil
}
func (s staticSource) refresh(context.Context) (int, error) { return 0, nil }

// dry: a static pool gets no new addresses; the runtime retries (code 11).
func (s staticSource) dry(_ context.Context, _ alloc.Request, cause error) (alloc.Allocation, bool, *pool.EC2, []any, error) {
	return alloc.Allocation{}, false, nil, nil, cause
}
func (s staticSource) ready(_ context.Context, st *alloc.State) error {
	if s.pool.Size(st) == 0 {
		return fmt.Errorf("%w: the static pool has no addresses", errNotReady)
	}
	return nil
}

// ec2Source hands out the ENI secondary addresses `eni-cni warm` put in the
// store. ADD never calls EC2; it reads IMDS on the first allocation of a
// boot (to check the store describes this instance), and when the pool is
// empty it may read IMDS once, then starts a warm pass and waits for it
// (demand.go).
type ec2Source struct {
	cfg  *config
	mgr  *alloc.Manager
	warm warmStarter      // nil: never start a pass (tests)
	now  func() time.Time // nil: time.Now
	// alive reports whether a process runs (nil: kill(pid, 0)), to tell a
	// warm pass that died from one still running.
	alive func(pid int) bool
}

// errIdentityUnchecked: the store has not been compared with IMDS in this
// boot. Its disk may come from another instance (a node image baked after
// install): handing out its addresses would duplicate that instance's.
var errIdentityUnchecked = errors.New("the instance identity has not been checked against IMDS since boot")

// admit is the allocator's Admit hook: no address of a store whose
// instance this boot has not checked.
func (s ec2Source) admit(st *alloc.State) error {
	if st.EC2 != nil && len(st.EC2.Addrs) > 0 && st.EC2.VerifiedBoot != s.mgr.BootID {
		return errIdentityUnchecked
	}
	return nil
}

func (s ec2Source) eni(a alloc.Allocation, sec *pool.EC2) (pool.ENI, error) {
	e, ok := sec.ENI(a.ENI)
	if !ok {
		return e, fmt.Errorf("address %s belongs to %s, which the store does not describe", a.IP, a.ENI)
	}
	return e, nil
}

func (s ec2Source) prepare(ctx context.Context, a alloc.Allocation, sec *pool.EC2) (podRouting, error) {
	if err := s.ensureSNAT(ctx, sec); err != nil {
		return podRouting{}, err
	}
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

// ensureSNAT installs the SNAT chain on the first ADD of a boot when no
// warm pass has yet (the nat table does not survive a reboot, the store
// does): a pod started then would otherwise reach the internet with its
// own address. Later in the boot, warm keeps the chain in shape.
func (s ec2Source) ensureSNAT(ctx context.Context, sec *pool.EC2) error {
	if !s.cfg.SNAT || sec == nil || sec.SNATBoot == s.mgr.BootID {
		return nil
	}
	spec, err := snatSpec(sec, s.cfg.Warm.ExcludeIPs)
	if err != nil {
		return err
	}
	if _, err := snat.Ensure(spec); err != nil {
		return fmt.Errorf("snat: %w", err)
	}
	return markSNAT(ctx, s.mgr, true)
}

// markSNAT records in which boot the chain was last ensured ("" when snat
// is off and the chain removed).
func markSNAT(ctx context.Context, mgr *alloc.Manager, on bool) error {
	return mgr.Update(ctx, func(st *alloc.State) (bool, error) {
		boot := ""
		if on {
			boot = mgr.BootID
		}
		if st.EC2 == nil || st.EC2.SNATBoot == boot {
			return false, nil
		}
		st.EC2.SNATBoot = boot
		return true, nil
	})
}

// snatSpec is the SNAT chain the ec2 section calls for: pod sources are the
// subnets of the ENIs eni-cni manages, less every address of those subnets
// that is not a pod's (ENI primaries, excluded addresses, addresses on
// unmanaged ENIs), rewritten to the primary ENI's address.
func snatSpec(sec *pool.EC2, exclude []netip.Prefix) (snat.Spec, error) {
	primary, ok := sec.PrimaryENI()
	if !ok {
		return snat.Spec{}, fmt.Errorf("snat: no ENI discovered yet")
	}
	spec := snat.Spec{VPCCIDRs: primary.VPCCIDRs, PrimaryIP: primary.PrimaryIP}
	unmanaged := map[string]bool{}
	for _, e := range sec.ENIs {
		spec.NotPods = append(spec.NotPods, e.PrimaryIP)
		if e.Unmanaged {
			unmanaged[e.ID] = true
		} else if !slices.Contains(spec.PodNets, e.SubnetCIDR.Masked()) {
			spec.PodNets = append(spec.PodNets, e.SubnetCIDR.Masked())
		}
	}
	for _, a := range sec.Addrs {
		if unmanaged[a.ENI] || pool.Excluded(exclude, a.IP) {
			spec.NotPods = append(spec.NotPods, a.IP)
		}
	}
	for _, p := range exclude {
		if p.IsSingleIP() && !slices.Contains(spec.NotPods, p.Addr()) {
			spec.NotPods = append(spec.NotPods, p.Addr())
		}
	}
	slices.SortFunc(spec.NotPods, netip.Addr.Compare)
	spec.NotPods = slices.Compact(spec.NotPods)
	return spec, nil
}

func (s ec2Source) routing(a alloc.Allocation, sec *pool.EC2) (podRouting, error) {
	e, err := s.eni(a, sec)
	if err != nil {
		return podRouting{}, err
	}
	return s.routingOf(e), nil
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
	r, err := imdsRefresh(ctx, s.cfg, s.mgr)
	if err != nil {
		return 0, err
	}
	if r.Dropped != "" {
		newLogger(s.cfg).Warn("the store described another instance (a disk or node image from it?): its ENIs and addresses were dropped; `eni-cni warm` rediscovers the pool",
			"storeInstance", r.Dropped, "instance", r.InstanceID)
	}
	return r.Added, nil
}

// dry, with addWaitSeconds 0 (ADD does not wait: see allocate), looks at
// IMDS once (addresses assigned by something else) and explains the empty
// pool.
func (s ec2Source) dry(ctx context.Context, req alloc.Request, cause error) (alloc.Allocation, bool, *pool.EC2, []any, error) {
	if n := s.lookIMDS(ctx); n > 0 {
		a, existed, source, err := s.mgr.AllocateWithSource(ctx, req)
		if !errors.Is(err, alloc.ErrPoolExhausted) {
			return a, existed, source, nil, err
		}
		cause = err
	}
	return alloc.Allocation{}, false, nil, nil, s.exhausted(cause)
}

// waits reports whether ADD waits for warm on a dry pool (allocate).
func (s ec2Source) waits() bool { return s.cfg.AddWait > 0 }

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
	Added      int    `json:"added"`
	Dropped    string `json:"dropped,omitempty"` // the other instance whose records were dropped
	InstanceID string `json:"instanceID,omitempty"`
}
