package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/fault"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/netsetup"
)

// HostNetwork adapts netsetup to the sweep's gc.Host.
type HostNetwork struct{ Prefix string }

func (h HostNetwork) Veths() ([]string, error) { return netsetup.OurVeths(h.Prefix) }

func (h HostNetwork) Rules() ([]gc.HostRule, error) {
	rules, err := netsetup.OurRules()
	out := make([]gc.HostRule, len(rules))
	for i, r := range rules {
		out[i] = gc.HostRule(r)
	}
	return out, err
}

func (h HostNetwork) Routes() ([]gc.HostRoute, error) {
	veths, err := netsetup.OurVeths(h.Prefix)
	if err != nil {
		return nil, err
	}
	routes, err := netsetup.OurRoutes(veths)
	out := make([]gc.HostRoute, len(routes))
	for i, r := range routes {
		out[i] = gc.HostRoute(r)
	}
	return out, err
}

func (h HostNetwork) DeleteVeth(names ...string) error { return netsetup.DeleteVeths(names...) }
func (h HostNetwork) DeleteRule(r gc.HostRule) error   { return netsetup.DeleteRule(netsetup.PodRule(r)) }
func (h HostNetwork) DeleteRoute(r gc.HostRoute) error {
	return netsetup.DeleteRoute(netsetup.PodRoute(r))
}

// Collection is the outcome of one GC run.
type Collection struct {
	Plan      gc.Plan
	Freed     []gc.Dead // what was actually freed (all of Plan.Free in a dry run)
	Leftovers gc.Leftovers
	Errors    []error
}

// collect frees the attachments that live says are dead and sweeps host
// objects no allocation explains. The decision is gc.MakePlan's; this is
// the doing, in an order that cannot free a live pod's address:
//  1. list host objects, then lock and read the store, so every object of a
//     live ADD is explained by the state read after;
//  2. plan, sweep leftovers and unroute the dead attachments under that
//     lock: rules are found by address alone, so an unroute after the lock
//     could, if gc stalled past the cooldown meanwhile (a DEL releasing the
//     address, an ADD taking it), delete a new pod's rules. Under the lock
//     each dead attachment still holds its address, and no ADD can take it;
//  3. delete the veths without the lock (the kernel's slow part): nothing
//     routes to them any more;
//  4. re-read the state under the lock and release what is still held by
//     the same address, in one save.
func (p *Plugin) Collect(ctx context.Context, live gc.Liveness, opts gc.Options, dryRun bool, host gc.Host) (*Collection, error) {
	snap, err := gc.ListHost(host)
	if err != nil {
		return nil, err
	}
	c := &Collection{}
	held := map[alloc.Key]alloc.Allocation{}
	var unrouted []alloc.Allocation
	err = p.Mgr.Update(ctx, func(st *alloc.State) (bool, error) {
		// A plugin killed in the middle of a save leaves its temporary
		// file; only with the lock held is none of them in use.
		if t, ok := p.Mgr.Store.(interface{ CleanTemp() }); ok && !dryRun {
			t.CleanTemp()
		}
		owned := gc.Owned{}
		now := p.Mgr.Clock()
		atts := make([]gc.Attachment, len(st.Allocations))
		for i, a := range st.Allocations {
			atts[i] = p.gcAttachment(a, now)
			held[a.Key] = a
			for _, ip := range a.Wired() {
				owned[ip] = a.HostVeth
			}
		}
		c.Plan = gc.MakePlan(atts, live, now, opts)
		if c.Plan.Refused != nil {
			return false, nil
		}
		c.Leftovers = gc.FindLeftovers(p.ours(st, snap), owned)
		fault.Point("gc:after-plan")
		if !dryRun {
			// Rules and routes go under the lock: no ADD may take one of
			// their addresses meanwhile. Leftover veths carry no route into
			// the pool any more once their routes are gone, and deleting
			// them waits on the kernel, so that happens after the lock.
			routesAndRules := c.Leftovers
			routesAndRules.Veths = nil
			if err := gc.RemoveLeftovers(host, routesAndRules); err != nil {
				c.Errors = append(c.Errors, err)
			}
			fault.Point("gc:after-leftover-unroute")
			unrouted = p.unroute(c, held)
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	if c.Plan.Refused != nil {
		return c, c.Plan.Refused
	}
	if dryRun {
		c.Freed = c.Plan.Free
		return c, nil
	}
	if len(c.Leftovers.Veths) > 0 {
		if err := host.DeleteVeth(c.Leftovers.Veths...); err != nil {
			c.Errors = append(c.Errors, fmt.Errorf("delete leftover veths: %w", err))
		}
	}
	p.free(ctx, c, unrouted)
	if err := p.keepEgress4(ctx); err != nil {
		c.Errors = append(c.Errors, err)
	}
	return c, nil
}

// keepEgress4 puts the egress masquerade back while pods hold egress
// addresses. ADD installs it once a boot; a nat table flushed since (a
// firewall reload, another agent's iptables-restore) would cut every
// IPv6-only pod off IPv4 until someone ran repair. gc is the job the timer
// runs every minute on every pool, so it keeps the chains.
func (p *Plugin) keepEgress4(ctx context.Context) error {
	st, _, err := p.Mgr.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("read the state for the egress masquerade: %w", err)
	}
	for _, a := range st.Allocations {
		if a.Egress4.IsValid() {
			return p.ensureEgress4(false)
		}
	}
	return nil
}

// unroute removes the routes and rules of the planned attachments, with
// one listing of the rules, and returns those it unrouted. It runs under
// the state lock (collect's step 2), where each of them still holds its
// address. One that fails keeps its address: it may still be routed to
// the old veth.
func (p *Plugin) unroute(c *Collection, held map[alloc.Key]alloc.Allocation) []alloc.Allocation {
	var dead []alloc.Allocation
	for _, d := range c.Plan.Free {
		dead = append(dead, held[keyOf(d.Attachment)])
	}
	if len(dead) == 0 {
		return nil
	}
	if err := p.wire.Unroute(attachmentsOf(dead)); err != nil {
		// Find out which failed.
		ok := dead[:0:0]
		for _, a := range dead {
			if err := p.wire.Unroute(attachmentsOf([]alloc.Allocation{a})); err != nil {
				c.Errors = append(c.Errors, fmt.Errorf("tear down %s (%s): %w", a.Key, addrList(a), err))
				continue
			}
			ok = append(ok, a)
		}
		dead = ok
	}
	fault.Point("gc:after-unroute")
	return dead
}

// free deletes the veths of the unrouted attachments (one kernel request)
// and releases them (one save). Unlike DEL, the veths go before the
// release: a gc that dies after releasing would leave veths that no
// allocation names and no route ties to this network, so no later gc
// could tell they are ours; the runtime repeats a failed DEL, nobody
// repeats a gc's work.
func (p *Plugin) free(ctx context.Context, c *Collection, unrouted []alloc.Allocation) {
	if len(unrouted) == 0 {
		return
	}
	held2 := make([]alloc.Held, len(unrouted))
	dead := make(map[alloc.Key]gc.Dead, len(c.Plan.Free))
	for _, d := range c.Plan.Free {
		dead[keyOf(d.Attachment)] = d
	}
	veths := make([]string, len(unrouted))
	for i, a := range unrouted {
		held2[i] = alloc.Held{Key: a.Key, IP: a.IP}
		veths[i] = a.HostVeth
	}
	// A veth that will not go is reported, and its address released all
	// the same: nothing routes to it any more.
	if err := p.wire.DeleteVeths(veths...); err != nil {
		c.Errors = append(c.Errors, fmt.Errorf("delete host veths: %w", err))
	}
	fault.Point("gc:after-veths")
	released, err := p.Mgr.ReleaseAll(ctx, held2)
	if err != nil {
		c.Errors = append(c.Errors, err)
	}
	for _, a := range released {
		c.Freed = append(c.Freed, dead[a.Key])
	}
	fault.Point("gc:after-release")
}

func attachmentsOf(as []alloc.Allocation) []netsetup.Attachment {
	out := make([]netsetup.Attachment, 0, len(as))
	for _, a := range as {
		out = append(out, unrouteOf(a.HostVeth, "", "", a.Wired())...)
	}
	return out
}

// ours keeps only what belongs to this network: rules for addresses of its
// pool, and veths routed to an address of its pool. Another eni-cni network
// on the node (its own stateDir, the same veth prefix) is not explained by
// this store, and its live pods must not be swept. A veth with no route
// into the pool cannot be attributed and is left alone.
func (p *Plugin) ours(st *alloc.State, snap gc.HostSnapshot) gc.HostSnapshot {
	inPool := func(ip netip.Addr) bool { return p.Cfg.Pool.Contains(st, ip) }
	routed := map[string]bool{}
	for _, r := range snap.Routes {
		if inPool(r.IP) {
			routed[r.Veth] = true
		}
	}
	snap.Veths = slices.DeleteFunc(slices.Clone(snap.Veths), func(v string) bool { return !routed[v] })
	// An egress address is no pool's: its rule is ours to sweep only when
	// no veth routes it (another network's store may hold it).
	egressRouted := map[netip.Addr]bool{}
	for _, r := range snap.Routes {
		egressRouted[r.IP] = true
	}
	strayEgress := func(ip netip.Addr) bool { return alloc.Egress4Range().Contains(ip) && !egressRouted[ip] }
	snap.Rules = slices.DeleteFunc(slices.Clone(snap.Rules), func(r gc.HostRule) bool { return !inPool(r.IP) && !strayEgress(r.IP) })
	snap.Routes = slices.DeleteFunc(slices.Clone(snap.Routes), func(r gc.HostRoute) bool { return !routed[r.Veth] })
	return snap
}

// gcAttachment is a as the planner sees it. Its allocation time is now
// minus its age on the boot clock, not the recorded wall-clock stamp: a
// wall clock stepped forward past the grace must not make a pod that is
// still being created look old (alloc/clock.go).
func (p *Plugin) gcAttachment(a alloc.Allocation, now time.Time) gc.Attachment {
	at := a.AllocatedAt
	if !at.IsZero() {
		at = now.Add(-p.Mgr.Age(a))
	}
	return gc.Attachment{
		Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName, IP: a.IP,
		PodNamespace: a.PodNamespace, PodName: a.PodName, PodUID: a.PodUID, AllocatedAt: at,
	}
}

func keyOf(a gc.Attachment) alloc.Key {
	return alloc.Key{Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName}
}

// reportErr prints the report and returns err, which runGC built from the
// per-item errors, or else the report's own error.
func (c *Collection) ReportErr(w io.Writer, dryRun bool, err error) error {
	rerr := c.Report(w, dryRun)
	if err != nil {
		return err
	}
	return rerr
}

// GCReport is what `eni-cni gc --json` prints.
type GCReport struct {
	OK        bool      `json:"ok"`
	DryRun    bool      `json:"dryRun"`
	Freed     []gcFreed `json:"freed"`
	Young     int       `json:"young"`
	Alive     int       `json:"alive"`
	Leftovers []string  `json:"leftovers"`
	Warnings  []string  `json:"warnings,omitempty"`
	Refused   string    `json:"refused,omitempty"`
	Error     string    `json:"error,omitempty"`
	Summary   string    `json:"summary,omitempty"`
}

// gcFreed is one freed attachment in gc --json.
type gcFreed struct {
	ContainerID  string  `json:"containerID"`
	IfName       string  `json:"ifname"`
	IP           string  `json:"ip"`
	PodNamespace string  `json:"podNamespace,omitempty"`
	PodName      string  `json:"podName,omitempty"`
	Reason       string  `json:"reason"`
	AgeSeconds   float64 `json:"ageSeconds"`
}

func GCReportOf(c *Collection, err error, dryRun bool) GCReport {
	r := GCReport{OK: err == nil, DryRun: dryRun, Freed: []gcFreed{}, Leftovers: []string{}}
	if err != nil {
		r.Error = err.Error()
	}
	if c == nil {
		return r
	}
	for _, d := range c.Freed {
		r.Freed = append(r.Freed, gcFreed{ContainerID: d.ContainerID, IfName: d.IfName, IP: d.IP.String(),
			PodNamespace: d.PodNamespace, PodName: d.PodName, Reason: d.Reason, AgeSeconds: d.Age.Seconds()})
	}
	r.Young, r.Alive, r.Warnings = len(c.Plan.Young), len(c.Plan.Alive), c.Plan.Warnings
	for _, v := range c.Leftovers.Veths {
		r.Leftovers = append(r.Leftovers, "veth "+v)
	}
	for _, x := range c.Leftovers.Rules {
		r.Leftovers = append(r.Leftovers, fmt.Sprintf("rule %s prio %d table %d", x.IP, x.Priority, x.Table))
	}
	for _, x := range c.Leftovers.Routes {
		r.Leftovers = append(r.Leftovers, fmt.Sprintf("route %s dev %s", x.IP, x.Veth))
	}
	if c.Plan.Refused != nil {
		r.Refused = c.Plan.Refused.Error()
	}
	summary := c.Plan
	summary.Free = c.Freed
	r.Summary = gc.Summary(summary, dryRun)
	return r
}

// report prints one line per freed attachment and leftover, warnings and a
// summary, and returns the per-item errors joined.
func (c *Collection) Report(w io.Writer, dryRun bool) error {
	for _, d := range c.Freed {
		fmt.Fprintln(w, gc.FreeLine(d, dryRun))
	}
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	for _, v := range c.Leftovers.Veths {
		fmt.Fprintf(w, "gc: %s leftover veth %s\n", verb, v)
	}
	for _, r := range c.Leftovers.Rules {
		fmt.Fprintf(w, "gc: %s leftover rule for %s (prio %d, table %d)\n", verb, r.IP, r.Priority, r.Table)
	}
	for _, r := range c.Leftovers.Routes {
		fmt.Fprintf(w, "gc: %s leftover route %s dev %s\n", verb, r.IP, r.Veth)
	}
	for _, warn := range c.Plan.Warnings {
		fmt.Fprintf(w, "gc: warning: %s\n", warn)
	}
	summary := c.Plan
	summary.Free = c.Freed
	fmt.Fprintf(w, "%s, %d host leftovers\n", gc.Summary(summary, dryRun), c.Leftovers.Len())
	if len(c.Errors) > 0 {
		return fmt.Errorf("gc: %d errors: %w", len(c.Errors), errors.Join(c.Errors...))
	}
	return nil
}

// RunGC is `eni-cni gc`: it lists the runtime's sandboxes (list, before
// the store is locked: a slow runtime must not stall ADDs) and collects. c
// is nil when nothing was planned; err includes the per-item errors.
func (p *Plugin) RunGC(ctx context.Context, list func(context.Context) (gc.Liveness, error), opts gc.Options, dryRun bool) (*Collection, error) {
	live, err := list(ctx)
	if err != nil {
		return nil, err
	}
	c, err := p.Collect(ctx, live, opts, dryRun, HostNetwork{p.Cfg.VethPrefix})
	if c == nil || err != nil {
		return c, err
	}
	if len(c.Errors) > 0 {
		return c, fmt.Errorf("gc: %d errors: %w", len(c.Errors), errors.Join(c.Errors...))
	}
	return c, nil
}
