// Package provider is the ADD side of the EC2 pool: what the CNI verbs do
// on a network whose addresses come from the node's ENIs (pool.source
// "ec2"). It hands out the addresses `eni-cni warm` put in the store, checks
// the store against the instance (IMDS) once a boot, readies an address's
// ENI, SNAT and NodePort marking, and on a dry pool records the ADD's
// demand, starts a warm pass and waits for it. It links neither the AWS
// SDK nor grpc (the lean build carries it into every ADD): what needs them
// comes through Full.
package provider

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
	"github.com/eni-cni/eni-cni/netsetup/connmark"
	"github.com/eni-cni/eni-cni/netsetup/snat"
)

// EC2 hands out the ENI secondary addresses `eni-cni warm` put in the
// store. ADD never calls EC2; it reads IMDS on the first allocation of a
// boot (to check the store describes this instance), and when the pool is
// empty it may read IMDS once, then starts a warm pass and waits for it
// (demand.go).
type EC2 struct {
	Cfg  *netconf.Config
	Mgr  *alloc.Manager
	Full Full             // IMDS reads (through the full build in the lean build)
	Warm WarmStarter      // nil: never start a pass (tests)
	Now  func() time.Time // nil: time.Now
	// Alive reports whether a process runs (nil: kill(pid, 0)), to tell a
	// warm pass that died from one still running.
	Alive func(pid int) bool
}

// ErrIdentityUnchecked: the store has not been compared with IMDS in this
// boot. Its disk may come from another instance (a node image baked after
// install): handing out its addresses would duplicate that instance's.
var ErrIdentityUnchecked = errors.New("the instance identity has not been checked against IMDS since boot")

// Admit is the allocator's Admit hook: no address of a store whose
// instance this boot has not checked.
func (s EC2) Admit(st *alloc.State) error {
	if st.EC2 != nil && (len(st.EC2.Addrs) > 0 || st.EC2.HasIPv6()) && st.EC2.VerifiedBoot != s.Mgr.BootID {
		return ErrIdentityUnchecked
	}
	return nil
}

func (s EC2) eni(a alloc.Allocation, sec *section.EC2) (section.ENI, error) {
	e, ok := sec.ENI(a.ENI)
	if !ok {
		return e, fmt.Errorf("address %s belongs to %s, which the store does not describe", a.IP, a.ENI)
	}
	return e, nil
}

func (s EC2) Prepare(ctx context.Context, a alloc.Allocation, sec *section.EC2) (netsetup.Routing, error) {
	if err := s.ensureSNAT(ctx, sec); err != nil {
		return netsetup.Routing{}, err
	}
	e, err := s.eni(a, sec)
	if err != nil || e.Table() == 0 {
		return netsetup.Routing{}, err
	}
	link := netsetup.ENILink{MAC: e.MAC, MTU: s.Cfg.MTU, Table: e.Table(), SubnetCIDR: e.SubnetCIDR, Gateway: e.Gateway(), Address: e.PrimaryIP}
	if err := netsetup.EnsureENI(link); err != nil {
		return netsetup.Routing{}, fmt.Errorf("set up %s (%s) for %s: %w", e.ID, e.MAC, a.IP, err)
	}
	s.ensureNodePort(ctx, a, sec)
	return s.routingOf(e), nil
}

// nodePortWait bounds what setting up the NodePort marking may add to an
// ADD: iptables waits for the xtables lock as long as another process
// (kube-proxy, for seconds on a big cluster) holds it.
const nodePortWait = 5 * time.Second

// ensureNodePort sets up the primary ENI's connection marking for a pod on
// a secondary ENI when no warm pass has yet in this boot (none of it
// survives a reboot): a NodePort to the pod would otherwise answer through
// the wrong ENI. Once set up it costs one rule dump (connmark.EnsureOnce);
// warm keeps the rest in shape. It never fails the ADD, nor holds it past
// nodePortWait: only NodePort replies to the pod need the marking, and
// without iptables, or with the xtables lock held, a failed ADD would keep
// the pod from starting at all. The next ADD or warm pass tries again.
func (s EC2) ensureNodePort(ctx context.Context, a alloc.Allocation, sec *section.EC2) {
	primary, ok := sec.PrimaryENI()
	if !ok {
		s.Cfg.Logger().Warn("nodeport marking not set up: no primary ENI in the store", "ip", a.IP.String())
		return
	}
	ctx, cancel := context.WithTimeout(ctx, nodePortWait)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := connmark.EnsureOnce(s.Cfg.StateDir, connmark.Spec{PrimaryMAC: primary.MAC, VethPrefix: s.Cfg.VethPrefix})
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = fmt.Errorf("gave up waiting for iptables (the xtables lock held?): %w", ctx.Err())
	}
	if err != nil {
		s.Cfg.Logger().Warn("nodeport marking not set up: NodePort replies to pods on secondary ENIs leave by the wrong ENI until an ADD or warm pass sets it up",
			"ip", a.IP.String(), "err", err)
	}
}

// ensureSNAT installs the SNAT chain on the first ADD of a boot when no
// warm pass has yet (the nat table does not survive a reboot, the store
// does): a pod started then would otherwise reach the internet with its
// own address. Later in the boot, warm keeps the chain in shape.
func (s EC2) ensureSNAT(ctx context.Context, sec *section.EC2) error {
	if !s.Cfg.SNAT || sec == nil || sec.SNATBoot == s.Mgr.BootID {
		return nil
	}
	spec, err := SNATSpec(sec, s.Cfg.Warm.ExcludeIPs)
	if err != nil {
		return err
	}
	if _, err := snat.Ensure(s.Cfg.StateDir, spec); err != nil {
		return fmt.Errorf("snat: %w", err)
	}
	return MarkSNAT(ctx, s.Mgr, true)
}

// MarkSNAT records in which boot the chain was last ensured ("" when snat
// is off and the chain removed).
func MarkSNAT(ctx context.Context, mgr *alloc.Manager, on bool) error {
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

// SNATSpec is the SNAT chain the ec2 section calls for: pod sources are the
// subnets of the ENIs eni-cni manages, less every address of those subnets
// that is not a pod's (ENI primaries, excluded addresses, addresses on
// unmanaged ENIs), rewritten to the primary ENI's address.
func SNATSpec(sec *section.EC2, exclude []netip.Prefix) (snat.Spec, error) {
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
		if unmanaged[a.ENI] || section.Excluded(exclude, a.IP) {
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

func (s EC2) Routing(a alloc.Allocation, sec *section.EC2) (netsetup.Routing, error) {
	e, err := s.eni(a, sec)
	if err != nil {
		return netsetup.Routing{}, err
	}
	return s.routingOf(e), nil
}

// routingOf: a pod on a secondary ENI sends through that ENI; with SNAT,
// only traffic to the VPC does, and the rest leaves through the primary ENI
// under the node's address.
func (s EC2) routingOf(e section.ENI) netsetup.Routing {
	if e.Table() == 0 {
		return netsetup.Routing{}
	}
	r := netsetup.Routing{Table: e.Table()}
	if s.Cfg.SNAT {
		r.FromDsts = e.VPCCIDRs
	}
	return r
}

func (s EC2) Refresh(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	r, err := s.Full.RefreshIMDS(ctx, s.Cfg, s.Mgr)
	if err != nil {
		return 0, err
	}
	if r.Dropped != "" {
		s.Cfg.Logger().Warn("the store described another instance (a disk or node image from it?): its ENIs and addresses were dropped; `eni-cni warm` rediscovers the pool",
			"storeInstance", r.Dropped, "instance", r.InstanceID)
	}
	return r.Added, nil
}

// Dry, with addWaitSeconds 0 (ADD does not wait: see Allocate), looks at
// IMDS once (addresses assigned by something else) and explains the empty
// pool.
func (s EC2) Dry(ctx context.Context, req alloc.Request, cause error) (alloc.Allocation, bool, *section.EC2, []any, error) {
	if n := s.lookIMDS(ctx); n > 0 {
		a, existed, source, err := s.Mgr.AllocateWithSection(ctx, req)
		if !errors.Is(err, alloc.ErrPoolExhausted) {
			return a, existed, source, nil, err
		}
		cause = err
	}
	return alloc.Allocation{}, false, nil, nil, s.exhausted(cause)
}

// Waits reports whether ADD waits for warm on a dry pool (Allocate).
func (s EC2) Waits() bool { return s.Cfg.AddWait > 0 }

// reachable is STATUS without readyWhenFilled: a pool with addresses can
// serve ADD; an empty one can if IMDS answers (warm will fill it). Only
// an empty pool and no IMDS is a fault.
func (s EC2) reachable(ctx context.Context, st *alloc.State) error {
	if s.Cfg.Pool.Size(st) > 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := s.Full.CheckIMDS(ctx, s.Cfg); err != nil {
		return fmt.Errorf("the pool is empty and %w", err)
	}
	return nil
}

// Refreshed is what `eni-cni internal imds-refresh` prints.
type Refreshed struct {
	Added      int    `json:"added"`
	Dropped    string `json:"dropped,omitempty"` // the other instance whose records were dropped
	InstanceID string `json:"instanceID,omitempty"`
}
