package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/pool"
	"github.com/eni-cni/eni-cni/fault"
	"github.com/eni-cni/eni-cni/netsetup"
)

// wirer is the kernel side of an attachment; netsetup in production, a fake
// in tests of the verb logic.
type wirer interface {
	Setup(netsetup.Pod) (netsetup.Links, error)
	Check(netsetup.Pod) (netsetup.Links, error)
	// Unroute removes the host routes and rules of attachments: after it,
	// their addresses reach the old veths no more.
	Unroute([]netsetup.Attachment) error
	// DeleteVeths deletes host veths (slow: the kernel waits for RCU).
	DeleteVeths(names ...string) error
}

// teardown removes an attachment's wiring: routes and rules, then the veth.
func teardown(w wirer, hostVeth string, ip netip.Addr) error {
	return errors.Join(w.Unroute([]netsetup.Attachment{{HostVeth: hostVeth, IP: ip}}), w.DeleteVeths(hostVeth))
}

// kernel is the real wirer.
type kernel struct{}

func (kernel) Setup(p netsetup.Pod) (netsetup.Links, error) { return netsetup.Setup(p) }
func (kernel) Check(p netsetup.Pod) (netsetup.Links, error) { return netsetup.Check(p) }
func (kernel) Unroute(a []netsetup.Attachment) error        { return netsetup.Unroute(a) }
func (kernel) DeleteVeths(names ...string) error            { return netsetup.DeleteVeths(names...) }

// attachment is what a CNI call says about the sandbox being attached.
type attachment struct {
	alloc.Key
	Netns                         string
	PodNamespace, PodName, PodUID string
}

var (
	// errNoAllocation: CHECK of an attachment the store does not know.
	errNoAllocation = errors.New("no allocation recorded")
	// errPrevResult: CHECK with a prevResult that is not ours.
	errPrevResult = errors.New("prevResult does not match the allocation")
)

// plugin carries the dependencies of the verbs.
type plugin struct {
	cfg    *config
	mgr    *alloc.Manager
	wire   wirer
	source poolSource
}

func (p *plugin) podSpec(a alloc.Allocation, netns string, r podRouting) netsetup.Pod {
	return netsetup.Pod{
		Netns: netns, IfName: a.IfName, HostVeth: a.HostVeth, IP: a.IP,
		MTU: p.cfg.MTU, Table: r.Table, FromDsts: r.FromDsts,
	}
}

// allocate takes an address; when the pool is empty it lets the source
// look once for addresses the store does not know yet (IMDS), then retries.
func (p *plugin) allocate(ctx context.Context, req alloc.Request) (alloc.Allocation, bool, *pool.EC2, error) {
	a, existed, source, err := p.mgr.AllocateWithSource(ctx, req)
	if errors.Is(err, errIdentityUnchecked) {
		// First ADD of a boot: compare the store with IMDS, then retry.
		if _, rerr := p.source.refresh(ctx); rerr != nil {
			return a, existed, source, fmt.Errorf("%w (%w)", err, rerr)
		}
		a, existed, source, err = p.mgr.AllocateWithSource(ctx, req)
	}
	if !errors.Is(err, alloc.ErrPoolExhausted) {
		return a, existed, source, err
	}
	if n, rerr := p.source.refresh(ctx); rerr == nil && n > 0 {
		return p.mgr.AllocateWithSource(ctx, req)
	}
	return a, existed, source, p.source.exhausted(err)
}

// add gives the attachment an address and wires it. Repeating ADD returns
// the same address, repairing the wiring if it is incomplete. On failure
// neither wiring nor allocation is left behind.
func (p *plugin) add(ctx context.Context, at attachment) (*current.Result, error) {
	req := alloc.Request{
		Key: at.Key, Netns: at.Netns,
		PodNamespace: at.PodNamespace, PodName: at.PodName, PodUID: at.PodUID,
		HostVeth: netsetup.HostVethName(p.cfg.VethPrefix, at.ContainerID, at.IfName),
	}
	a, existed, source, err := p.allocate(ctx, req)
	if err != nil {
		return nil, err
	}
	fault.Point("add:after-allocate")
	routing, err := p.source.prepare(ctx, a, source)
	if err != nil {
		return nil, p.undo(ctx, at, a, existed, err)
	}
	spec := p.podSpec(a, at.Netns, routing)
	if existed {
		if links, err := p.wire.Check(spec); err == nil {
			return p.result(a, at.Netns, links), nil
		}
		// Incomplete wiring from an ADD that died half-way: start over.
		if err := teardown(p.wire, a.HostVeth, a.IP); err != nil {
			return nil, fmt.Errorf("repair %s: %w", at.Key, err)
		}
		fault.Point("add:after-repair-teardown")
	}
	links, err := p.wire.Setup(spec)
	if err != nil {
		return nil, p.undo(ctx, at, a, existed, fmt.Errorf("wire %s with %s: %w", at.Key, a.IP, err))
	}
	fault.Point("add:after-wire")
	return p.result(a, at.Netns, links), nil
}

// undo releases the allocation of a failed ADD (without cooldown: no pod
// ever used it) and returns cause, with the release's own error if any. An
// allocation that existed before this ADD is kept: the pod may be using it,
// and the runtime's DEL releases it with cooldown.
func (p *plugin) undo(ctx context.Context, at attachment, a alloc.Allocation, existed bool, cause error) error {
	if existed {
		return cause
	}
	fault.Point("add:before-undo")
	if err := p.mgr.Undo(context.WithoutCancel(ctx), at.Key, a.IP); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

func (p *plugin) result(a alloc.Allocation, netns string, l netsetup.Links) *current.Result {
	gw := netsetup.GatewayIP().AsSlice()
	return &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{
			{Name: a.HostVeth, Mac: l.HostMAC.String()},
			{Name: a.IfName, Mac: l.PodMAC.String(), Sandbox: netns},
		},
		IPs: []*current.IPConfig{{
			Interface: current.Int(1),
			Address:   net.IPNet{IP: a.IP.AsSlice(), Mask: net.CIDRMask(32, 32)},
			Gateway:   gw,
		}},
		Routes: []*types.Route{{Dst: net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, GW: gw}},
	}
}

// del frees the attachment's address. It needs no netns: the host side is
// found by the names the store recorded. An unknown attachment gets a
// best-effort teardown by derived name and is not an error.
func (p *plugin) del(ctx context.Context, k alloc.Key) error {
	a, found, err := p.mgr.Get(ctx, k)
	if err != nil {
		return err
	}
	if !found {
		return p.wire.DeleteVeths(netsetup.HostVethName(p.cfg.VethPrefix, k.ContainerID, k.IfName))
	}
	fault.Point("del:after-lookup")
	// The address may only be freed once nothing routes it to the old
	// veth, or a new pod could get an address still routed there.
	if err := p.wire.Unroute([]netsetup.Attachment{{HostVeth: a.HostVeth, IP: a.IP}}); err != nil {
		return fmt.Errorf("tear down %s (%s): %w", k, a.IP, err)
	}
	fault.Point("del:after-unroute")
	// From here the veth is only a dead end: release the address (into
	// cooldown) while the kernel takes its 15–30 ms to delete the veth.
	deleted := make(chan error, 1)
	go func() { deleted <- p.wire.DeleteVeths(a.HostVeth) }()
	_, _, err = p.mgr.Release(ctx, k, a.IP)
	fault.Point("del:after-release")
	if verr := <-deleted; verr != nil {
		err = errors.Join(err, fmt.Errorf("delete host veth of %s: %w", k, verr))
	}
	return err
}

// check verifies the allocation, prevResult and wiring agree.
func (p *plugin) check(ctx context.Context, at attachment, prev *current.Result) error {
	a, found, source, err := p.mgr.GetWithSource(ctx, at.Key)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("check %s: %w", at.Key, errNoAllocation)
	}
	if prev != nil && !resultHasIP(prev, a.IP) {
		return fmt.Errorf("check %s: %w: allocation holds %s", at.Key, errPrevResult, a.IP)
	}
	if _, err := p.wire.Check(p.podSpec(a, at.Netns, p.source.routing(a, source))); err != nil {
		return fmt.Errorf("check %s (%s): %w", at.Key, a.IP, err)
	}
	return nil
}

func resultHasIP(r *current.Result, ip netip.Addr) bool {
	for _, c := range r.IPs {
		if got, ok := netip.AddrFromSlice(c.Address.IP); ok && got.Unmap() == ip {
			return true
		}
	}
	return false
}

// errNotReady: STATUS found the plugin unable to serve any ADD.
var errNotReady = errors.New("cannot serve ADD")

// status reports whether ADD can work at all. A momentarily empty pool is
// not a failure: addresses cool down and `warm` adds more.
func (p *plugin) status(ctx context.Context) (alloc.Counts, error) {
	// Read without the lock: saves replace the file by rename, so a read
	// sees one whole state, and STATUS must not queue behind a busy ADD.
	st, err := p.mgr.Store.Load()
	if err != nil {
		return alloc.Counts{}, fmt.Errorf("%w: %w", errNotReady, err)
	}
	if err := p.source.ready(ctx, st); err != nil {
		return alloc.Counts{}, err
	}
	return p.mgr.Counts(st), nil
}
