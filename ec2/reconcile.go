package ec2

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// describeEvery is the safety net: EC2 is read at least this often even
// when IMDS and the store agree. It is the whole of the steady-state EC2
// budget (one call per node-hour).
const describeEvery = time.Hour

// observe is the cheap part of a pass: it checks that the store describes
// this instance (dropping the records of another one), takes in what IMDS
// adds, drops lost addresses whose pods are gone, and returns what IMDS
// contradicts for EC2 to settle, with the store as this left it (what the
// pass would read next: one load fewer).
func (w *Warmer) observe(ctx context.Context, inst *section.Instance) (section.Drift, *view, error) {
	var (
		d       section.Drift
		v       *view
		dropped string
		fresh   bool
		settled []netip.Addr
	)
	err := w.update(ctx, func(st *alloc.State, src *section.EC2) error {
		fresh = src.InstanceID == ""
		dropped = src.Identify(inst.ID)
		d = section.Reconcile(src, inst, w.now())
		src.VerifiedBoot = w.Mgr.BootID
		settled = src.DropSettledLost(allocatedIn(st))
		for _, ip := range settled {
			// EC2 no longer assigns it, but a lagging IMDS may still
			// list it: the next Reconcile must not take it back.
			src.Bury(ip, w.now())
		}
		if d.Empty() {
			src.Drift = ""
		}
		v = &view{st: st, src: src, counts: w.Mgr.Counts(st)}
		return nil
	})
	if err != nil {
		return d, nil, err
	}
	if dropped != "" {
		w.warn("the store describes instance %s but this is %s (a disk or node image from another instance?): "+
			"its ENIs and addresses are dropped and the pool is rediscovered; no EC2 call is made on them", dropped, inst.ID)
	}
	if fresh || dropped != "" {
		w.say("discovered %s (%s) with %d ENIs; %d addresses found on them", inst.ID, inst.Type, len(inst.ENIs), d.Found)
	} else if d.Found > 0 {
		w.say("%d addresses found on the instance joined the pool", d.Found)
	}
	if len(settled) > 0 {
		w.say("lost addresses whose pods are gone left the pool: %v", settled)
	}
	return d, v, nil
}

func allocatedIn(st *alloc.State) func(netip.Addr) bool {
	held := make(map[netip.Addr]bool, len(st.Allocations))
	for _, a := range st.Allocations {
		held[a.IP] = true
	}
	return func(ip netip.Addr) bool { return held[ip] }
}

// reasonHourly is the describe of the safety net: nothing is known to be
// wrong (a fresh store's first pass too: IMDS showed only the primary ENI,
// which needs no tags read, or a new ENI would be drift).
const reasonHourly = "hourly check"

// describeReason says why this pass must read EC2's truth, or "" if it
// need not.
func (w *Warmer) describeReason(src *section.EC2, d section.Drift) string {
	switch {
	case src.Dirty:
		return "the last pass may have changed EC2 without recording it"
	case hasUnusable(src):
		return "addresses being given back are unsettled"
	case w.unsettledCreation(src):
		return "an ENI creation did not finish"
	case !d.Empty() && d.Key() != src.Drift:
		return "IMDS disagrees with the store: " + d.String()
	case w.hourlyDue(src):
		return reasonHourly
	}
	return ""
}

// unsettledCreation reports a pending record only EC2 can settle: a
// creation whose outcome the store does not know (a pass that died or
// failed between its Create and its record), or a kept ENI due to be
// deleted (settlePending must know it is not attached here). An ENI kept
// unattached because its attach was throttled is not one: the pass that
// kept it recorded all EC2 holds (its batch ended clean, the dirty mark
// cleared; a pass killed while attaching it leaves the mark), and the
// describe it would force every pass drew on the Describe bucket ahead
// of the fill: at 1,000 nodes, 100 s of throttled describes before a
// starved node's next Attach, and its pods' ADDs failed.
func (w *Warmer) unsettledCreation(src *section.EC2) bool {
	return slices.ContainsFunc(src.Pending, func(p section.PendingENI) bool {
		return p.Unattached == nil || section.Elapsed(w.now(), p.Since, keptFor)
	})
}

// RefreshResult is what Refresh did.
type RefreshResult struct {
	Instance *section.Instance
	Added    int    // addresses found on the instance that joined the pool
	Dropped  string // the other instance whose records were dropped, if any
}

// Refresh is the part of a pass ADD may run (never EC2): it reads IMDS,
// checks the store describes this instance (dropping another's records),
// records that this boot has checked, and takes in addresses IMDS lists.
func Refresh(ctx context.Context, mgr *alloc.Manager, md Metadata, now time.Time) (*RefreshResult, error) {
	return RefreshTargets(ctx, mgr, md, now, nil)
}

// RefreshTargets is Refresh that also records the boot as filled when what
// IMDS shows meets the targets of w (nil: no targets): the addresses a
// launch template assigned make a new node ready for pods with no EC2
// call (provider.PoolReady).
func RefreshTargets(ctx context.Context, mgr *alloc.Manager, md Metadata, now time.Time, w *section.WarmConfig) (*RefreshResult, error) {
	inst, err := Discover(ctx, md)
	if err != nil {
		return nil, err
	}
	r := &RefreshResult{Instance: inst}
	err = updateSection(ctx, mgr, func(st *alloc.State, src *section.EC2) error {
		r.Dropped = src.Identify(inst.ID)
		r.Added = section.Reconcile(src, inst, now).Found
		src.VerifiedBoot = mgr.BootID
		if w != nil && w.ReadyWhenFilled && provider.TargetsMet(mgr.Counts(st), *w) {
			src.MarkFilled(mgr.BootID, now)
		}
		return nil
	})
	if err == nil && r.Added > 0 {
		_ = mgr.Wake() // ADDs waiting on a dry pool may take them
	}
	return r, err
}

// reassertHost has the node put back, for every ENI and every pod, what
// it should have: someone may have flushed a table or deleted a rule since
// the last pass. Failures are reported after the rest of the pass ran.
func (w *Warmer) reassertHost(ctx context.Context) error {
	if w.Host == nil {
		return nil
	}
	v, err := w.snapshot(ctx)
	if err != nil {
		return err
	}
	// The primary ENI stays even when no_manage: NodePort traffic enters it
	// whatever ENIs the pods are on.
	enis := slices.DeleteFunc(slices.Clone(v.src.ENIs), func(e section.ENI) bool { return (e.Unmanaged && !e.Primary()) || e.Unverified })
	r, err := w.Host.Reassert(ctx, enis, v.st.Allocations)
	if len(r.SetUp) > 0 {
		w.say("set up %s", strings.Join(r.SetUp, "; "))
	}
	if len(r.Repaired) > 0 {
		w.warn("the node had lost part of its setup, put back: %s", strings.Join(r.Repaired, "; "))
	}
	if len(r.Missing) > 0 {
		// Not a failure of the pass: right after an attach the link takes
		// a moment, and ADD on such an ENI fails with code 11 and retries.
		w.warn("no link on the node for %s (not yet appeared, or detached?)", strings.Join(r.Missing, "; "))
	}
	if err != nil {
		return fmt.Errorf("node setup: %w", err)
	}
	return nil
}
