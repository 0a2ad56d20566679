package ec2

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/fault"
)

// API is the part of the EC2 client `warm` uses.
type API interface {
	DescribeInstanceTypes(context.Context, *ec2.DescribeInstanceTypesInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
	DescribeSubnets(context.Context, *ec2.DescribeSubnetsInput, ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error)
	DescribeNetworkInterfaces(context.Context, *ec2.DescribeNetworkInterfacesInput, ...func(*ec2.Options)) (*ec2.DescribeNetworkInterfacesOutput, error)
	AssignPrivateIpAddresses(context.Context, *ec2.AssignPrivateIpAddressesInput, ...func(*ec2.Options)) (*ec2.AssignPrivateIpAddressesOutput, error)
	AssignIpv6Addresses(context.Context, *ec2.AssignIpv6AddressesInput, ...func(*ec2.Options)) (*ec2.AssignIpv6AddressesOutput, error)
	UnassignPrivateIpAddresses(context.Context, *ec2.UnassignPrivateIpAddressesInput, ...func(*ec2.Options)) (*ec2.UnassignPrivateIpAddressesOutput, error)
	CreateNetworkInterface(context.Context, *ec2.CreateNetworkInterfaceInput, ...func(*ec2.Options)) (*ec2.CreateNetworkInterfaceOutput, error)
	AttachNetworkInterface(context.Context, *ec2.AttachNetworkInterfaceInput, ...func(*ec2.Options)) (*ec2.AttachNetworkInterfaceOutput, error)
	ModifyNetworkInterfaceAttribute(context.Context, *ec2.ModifyNetworkInterfaceAttributeInput, ...func(*ec2.Options)) (*ec2.ModifyNetworkInterfaceAttributeOutput, error)
	DeleteNetworkInterface(context.Context, *ec2.DeleteNetworkInterfaceInput, ...func(*ec2.Options)) (*ec2.DeleteNetworkInterfaceOutput, error)
}

// HostENI is the node side `warm` keeps in shape. Both methods must be
// idempotent.
type HostENI interface {
	// SetupENI waits for the link of an ENI just attached and prepares
	// it: up with the MTU, and its route table.
	SetupENI(ctx context.Context, e section.ENI) error
	// Reassert puts back what the node should have and may have lost (a
	// table flushed by systemd-networkd or amazon-ec2-net-utils, a link
	// set down, a rule deleted): each secondary ENI's link and table, each
	// pod's rules, and the primary ENI's connection marking. It reports what it had to repair and what it could
	// not find (an ENI's link not, or no longer, on the node).
	Reassert(ctx context.Context, enis []section.ENI, pods []alloc.Allocation) (HostReport, error)
}

// HostReport is what Reassert found.
type HostReport struct {
	Repaired []string // what was put back
	SetUp    []string // what was made for the first time (nothing of it was there)
	Missing  []string // ENIs whose link is not on the node
}

// Warmer runs one `eni-cni warm` pass.
type Warmer struct {
	Mgr  *alloc.Manager
	API  API
	MD   Metadata
	Host HostENI
	Cfg  section.WarmConfig
	Out  io.Writer
	Log  *slog.Logger // optional; warnings also go here
	Now  func() time.Time
	// Spread makes the hourly check and the once-a-boot leak sweep in
	// this node's own window of the hour instead of an hour after the
	// last and at boot (spread.go); WarmPass sets it.
	Spread bool
	// Throttles remembers throttled passes for the next, so the timer's
	// passes pause after a throttle as the ADDs' do (throttlememo.go);
	// optional.
	Throttles ThrottleMemory
	// LimitsFile caches the limits EC2 gave of a type the built-in table
	// does not know (limits.go); optional.
	LimitsFile string

	// A pass creates the ENIs a burst needs concurrently (eni.go), so
	// what the pass shares is guarded. storeMu serializes the pass's own
	// store transactions: a DiskStore holds one flock at a time, and the
	// file lock itself only orders processes. mu guards wakePending and
	// the writes to Out.
	storeMu sync.Mutex
	mu      sync.Mutex
	// wakePending: addresses were recorded and waiting ADDs not yet woken
	// (wake is deferred to the pass's next EC2 call or its end, so that
	// the woken ADDs queue for the lock while warm waits for EC2, not
	// before warm's own next look).
	wakePending bool
	// candidates are the pod subnets of the node's zone, best first, read
	// once a pass by the first creation that needs them (custom subnets).
	candidates []PodSubnet
	// pace scales the back-off of the pass's mutating calls (backoff.go).
	pace pace
}

func (w *Warmer) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

func (w *Warmer) say(format string, args ...any) {
	if w.Out != nil {
		line := fmt.Sprintf("warm: "+format+"\n", args...)
		w.mu.Lock()
		defer w.mu.Unlock()
		_, _ = io.WriteString(w.Out, line)
	}
}

// warn is say for what an operator must not miss: a WARN line in the log
// (stderr, which the timer's journal keeps) when there is one, else a
// WARNING line in the pass's output.
func (w *Warmer) warn(format string, args ...any) {
	if w.Log != nil {
		w.Log.Warn(fmt.Sprintf(format, args...))
		return
	}
	w.say("WARNING: "+format, args...)
}

// view is a snapshot of the store taken under the lock.
type view struct {
	st     *alloc.State
	src    *section.EC2 // never nil: empty on a node warm never ran on
	counts alloc.Counts
}

func (w *Warmer) snapshot(ctx context.Context) (*view, error) {
	var v view
	err := w.mgrUpdate(ctx, func(st *alloc.State) (bool, error) {
		v = view{st: st, src: sectionOf(st), counts: w.Mgr.Counts(st)}
		return false, nil
	})
	return &v, err
}

// sectionOf returns the state's ec2 section, creating an empty one.
func sectionOf(st *alloc.State) *section.EC2 {
	if st.EC2 == nil {
		st.EC2 = &section.EC2{}
	}
	return st.EC2
}

// update applies fn to the current state and its ec2 section under the
// lock, and saves only if fn changed the section: a pass with nothing to
// do writes nothing.
func (w *Warmer) update(ctx context.Context, fn func(*alloc.State, *section.EC2) error) error {
	w.storeMu.Lock()
	defer w.storeMu.Unlock()
	return updateSection(ctx, w.Mgr, fn)
}

// mgrUpdate is the pass's way to the store: one transaction at a time
// (see storeMu).
func (w *Warmer) mgrUpdate(ctx context.Context, fn func(*alloc.State) (bool, error)) error {
	w.storeMu.Lock()
	defer w.storeMu.Unlock()
	return w.Mgr.Update(ctx, fn)
}

func updateSection(ctx context.Context, mgr *alloc.Manager, fn func(*alloc.State, *section.EC2) error) error {
	return mgr.Update(ctx, func(st *alloc.State) (bool, error) {
		before, err := json.Marshal(st.EC2)
		if err != nil {
			return false, err
		}
		if err := fn(st, sectionOf(st)); err != nil {
			return false, err
		}
		after, err := json.Marshal(st.EC2)
		return !bytes.Equal(before, after), err
	})
}

// Run is one pass: it reads IMDS, then does what RunWith does.
func (w *Warmer) Run(ctx context.Context) error {
	inst, err := discoverFor(ctx, w.MD, w.Mgr)
	if err != nil {
		return errors.Join(err, w.Failed(ctx, err))
	}
	return w.RunWith(ctx, inst)
}

// RunWith is one pass given what IMDS said at its start. How the pass
// ended is recorded for ADDs waiting on a dry pool (outcome.go).
func (w *Warmer) RunWith(ctx context.Context, inst *section.Instance) error {
	if _, ok := w.API.(pacedAPI); !ok && w.API != nil {
		w.API = pacedAPI{API: w.API, pace: &w.pace}
	}
	w.pace.set(1)
	if paused, err := w.throttlePause(ctx); paused || err != nil {
		return err
	}
	if err := w.markStarted(ctx); err != nil {
		return err
	}
	short, err := w.pass(ctx, inst)
	err = errors.Join(err, w.recordOutcome(ctx, short, err), w.rememberThrottle(classify(short, err)))
	w.flushWake()
	return err
}

// pass is the pass itself. Cheap first: the instance's identity and IMDS
// against the store (local, free); EC2's DescribeNetworkInterfaces only
// when they disagree, when the last pass left work unrecorded, or once an
// hour; then the ENIs' lifecycle, the node side of every ENI and pod, and
// last the pool's size. The lock is held only around state I/O, never
// across an EC2 or IMDS call. short reports that the instance's limits
// kept it from reaching its targets.
func (w *Warmer) pass(ctx context.Context, inst *section.Instance) (short bool, err error) {
	// How growing the pool went, for STATUS: what failed up to the fill,
	// not the node-side or lifecycle failures reported after it.
	filling := true
	defer func() {
		if filling {
			err = errors.Join(err, w.recordGrowth(ctx, short, err))
		}
	}()
	drift, v, err := w.observe(ctx, inst)
	if err != nil {
		return false, err
	}
	if v.src.Limits == nil {
		if err := w.fetchLimits(ctx); err != nil {
			return false, err
		}
	}
	// With ADDs waiting for this pass, what only checks (the hourly
	// describe) or tidies (the ENI lifecycle's EC2 calls: the sweep for
	// leaked ENIs, DeleteOnTermination retries) comes after the fill, not
	// before it: a describe forced by drift, a dirty or a pending record
	// still comes first. Lifecycle and node-side failures are reported at
	// the end: they must not keep the pool from being filled.
	waiting := v.st.Waiting(w.now()) > 0
	why := w.describeReason(v.src, drift)
	// A network of IPv6 whose store has no prefix (a fresh or lost store)
	// reads EC2 first all the same: the primary ENI may hold the /80 an
	// earlier store recorded, and fill6 would ask for another each time.
	checkLater := waiting && why == reasonHourly && !w.lacksPrefix(v.src)
	if why != "" && !checkLater {
		if err := w.resync(ctx, why, drift); err != nil {
			return false, err
		}
	}
	later := w.reassertHost(ctx)
	if !waiting {
		later = errors.Join(w.settleENIs(ctx), later)
	}
	short, err = w.fill(ctx)
	filling = false
	if gerr := w.recordGrowth(ctx, short, err); gerr != nil {
		later = errors.Join(later, gerr)
	}
	if waiting {
		later = errors.Join(later, w.settleENIs(ctx))
	}
	if checkLater && err == nil {
		later = errors.Join(later, w.resync(ctx, why, drift))
	}
	if err != nil {
		return short, errors.Join(err, later)
	}
	if err := w.trim(ctx); err != nil {
		return short, errors.Join(err, later)
	}
	return short, errors.Join(w.setDirty(ctx, false), later)
}

// setDirty records whether EC2 may hold changes the store does not. It
// saves only when the value changes, so a pass with nothing to do writes
// nothing.
func (w *Warmer) setDirty(ctx context.Context, dirty bool) error {
	v, err := w.snapshot(ctx)
	if err != nil || v.src.Dirty == dirty {
		return err
	}
	return w.update(context.WithoutCancel(ctx), func(_ *alloc.State, src *section.EC2) error {
		src.Dirty = dirty
		return nil
	})
}

// refused handles a failed call that would have added to what EC2 assigns:
// if EC2 certainly did nothing (see refusal) the dirty mark is cleared;
// otherwise it stays for the next pass to resync.
func (w *Warmer) refused(ctx context.Context, err error) error {
	if refusal(err) {
		if derr := w.setDirty(ctx, false); derr != nil {
			return errors.Join(err, derr)
		}
	}
	return err
}

// refusal reports whether a failed call certainly changed nothing: an
// error from EC2 itself (after the SDK's retries) means the request was
// rejected, and a failed dial means it never left. Anything else (a
// timeout, a connection lost mid-call, a 5xx such as InternalError, after
// which EC2 may have carried the request out) may hide a change.
func refusal(err error) bool {
	if errors.Is(err, errUnknownAttempt) {
		return false
	}
	var api smithy.APIError
	var op *net.OpError
	var resp *smithyhttp.ResponseError
	if errors.As(err, &resp) && resp.HTTPStatusCode() >= 500 && !isThrottle(err) {
		return false
	}
	return errors.As(err, &api) || (errors.As(err, &op) && op.Op == "dial")
}

// isThrottle: EC2 throttles with RequestLimitExceeded (and, for some
// calls, a 503): the request was not carried out.
func isThrottle(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "RequestLimitExceeded", "Throttling", "ThrottlingException", "RequestThrottled":
		return true
	}
	return false
}

func hasUnusable(src *section.EC2) bool {
	return slices.ContainsFunc(src.Addrs, func(a section.Addr) bool { return a.Unusable })
}

func (w *Warmer) fetchLimits(ctx context.Context) error {
	v, err := w.snapshot(ctx)
	if err != nil {
		return err
	}
	lim, from, err := w.limitsOf(ctx, v.src.InstanceType)
	if err != nil {
		return err
	}
	w.say("limits of %s (%s): %d ENIs, %d IPv4 addresses each", v.src.InstanceType, from, lim.MaxENIs, lim.IPv4PerENI)
	return w.update(ctx, func(_ *alloc.State, src *section.EC2) error {
		src.Limits = lim
		return nil
	})
}

// need is how many addresses the pool lacks: the target is the allocated
// addresses, plus one for each ADD waiting on a dry pool, plus
// warmIPTarget free ones (and at least minimumIPTarget in all). Sizing by
// the waiting ADDs is what lets a burst of pods be served by one request
// per ENI instead of warmIPTarget at a time. On a dual-stack network the
// targets are IPv4's (provider.Sized).
func (w *Warmer) need(v *view) int {
	waiting := v.st.Waiting(w.now())
	c := provider.Sized(v.counts)
	return max(w.Cfg.WarmIPTarget+waiting-c.Free, w.Cfg.MinimumIPTarget-c.Total, 0)
}

// fill fills the pool of each of the network's families: the /80 of
// IPv6 (fill6), then IPv4's addresses (fill4). A dual-stack pass that
// cannot get the /80 fails before any IPv4 call: its pods need both.
func (w *Warmer) fill(ctx context.Context) (short bool, err error) {
	if w.Cfg.IPv6 {
		short, err = w.fill6(ctx)
		if err != nil || w.Cfg.IPv6Only() {
			return short, err
		}
	}
	short4, err := w.fill4(ctx)
	return short || short4, err
}

// fill4 assigns IPv4 addresses until the targets are met or the instance
// is full (short). With custom subnets a subnet that runs full is
// remembered and the fill goes on in the zone's next pod subnet
// (subnets.go).
func (w *Warmer) fill4(ctx context.Context) (short bool, err error) {
	custom := w.Cfg.CustomSubnets()
	for range 32 { // each round adds addresses or an ENI; bounded for safety
		v, err := w.snapshot(ctx)
		if err != nil {
			return false, err
		}
		need := w.need(v)
		if need == 0 {
			return false, nil
		}
		w.repace(v, need)
		if kept := keptAddrs(v.src); kept > 0 && w.canCreate(v.src) {
			if err := w.attachKept(ctx, v.src, min(need, kept)); err != nil {
				return false, err
			}
			continue
		}
		if e, room := w.roomyENI(v.src); room > 0 {
			err := w.assign(ctx, e, need, room)
			if custom && subnetFull(err) {
				err = w.markFull(ctx, e.SubnetID, err)
			}
			if err != nil {
				return false, err
			}
			continue
		}
		if !w.canCreate(v.src) {
			if full := w.roomInFullSubnets(v.src); custom && len(full) > 0 {
				return false, fmt.Errorf("%w: zone %s: %s (no more ENIs may be attached)", ErrSubnetsFull, v.src.AZ, strings.Join(full, ", "))
			}
			w.say("pool short by %d addresses: all %d ENIs are full (limit %d)", need, len(v.src.ENIs), w.maxENIs(v.src))
			return true, nil
		}
		target := w.defaultSubnet(v.src)
		if custom {
			if target, err = w.nextPodSubnet(ctx, v.src); err != nil {
				return false, err
			}
		}
		err = w.createENIs(ctx, v.src, need, target)
		if custom && subnetFull(err) {
			err = w.markFull(ctx, target.ID, err)
		}
		if err != nil {
			return false, err
		}
	}
	return false, nil
}

// repace sets the pass's pace from what the node has and lacks (v, need),
// at each round of the fill and after each ENI a batch records: a node
// yields harder the moment it holds more (paceOf), a NotReady node
// yields to those whose pods wait (paceFresh), and of those the longest
// waiter goes first (paceAged). On a dual-stack network the counts are
// IPv4's, as the fill's targets (need): the /80's addresses would hide
// an IPv4 side run dry.
func (w *Warmer) repace(v *view, need int) {
	now := w.now()
	waiting := v.st.Waiting(now)
	filled := v.src.FilledBoot == w.Mgr.BootID
	c := provider.Sized(v.counts)
	since := v.st.OldestWaiting(now)
	switch {
	case waiting > c.Free && filled && admitted(v.src.FilledAt, since):
		w.pace.set(paceAged(now.Sub(since)))
	case waiting == 0 && c.Total == 0 && !filled && w.Cfg.ReadyWhenFilled && w.Cfg.MinimumIPTarget == 0:
		w.pace.set(paceFresh)
	default:
		w.pace.set(paceOf(c.Total, need, waiting > c.Free))
	}
}

// admitted reports whether ADDs waiting since since are the pods the
// readiness gate let come when the pool was filled at filledAt, or
// kubelet's retries of them (within admittedWithin after it): only their
// waits age the pace. A burst sent
// to a fleet Ready long since makes every node wait together, where
// aging would raise every node's rate at once, ordering nothing (5.7
// times the throttled attempts in the 200-node burst run).
func admitted(filledAt, since time.Time) bool {
	return !filledAt.IsZero() && !since.IsZero() && !since.Before(filledAt) && since.Sub(filledAt) <= admittedWithin
}

// slots is how many secondary addresses or prefixes one ENI takes.
func slots(src *section.EC2) int { return src.Limits.Slots() }

// roomyENI returns the lowest-numbered ENI eni-cni may manage with free
// slots, and how many. With custom subnets only the ENIs eni-cni created
// qualify, and not those in a subnet found full.
func (w *Warmer) roomyENI(src *section.EC2) (section.ENI, int) {
	custom := w.Cfg.CustomSubnets()
	for _, e := range src.ENIs {
		if !e.ForPods(custom) || (custom && src.SubnetFull(e.SubnetID, w.now())) {
			continue
		}
		if room := slots(src) - e.Secondary - len(e.Prefixes); room > 0 {
			return e, room
		}
	}
	return section.ENI{}, 0
}

// roomInFullSubnets are the subnets of ENIs for pods with free slots that
// only their subnet being full keeps warm from filling.
func (w *Warmer) roomInFullSubnets(src *section.EC2) []string {
	var out []string
	for _, e := range src.ENIs {
		if e.ForPods(true) && src.SubnetFull(e.SubnetID, w.now()) && slots(src)-e.Secondary-len(e.Prefixes) > 0 && !slices.Contains(out, e.SubnetID) {
			out = append(out, e.SubnetID)
		}
	}
	return out
}

func (w *Warmer) maxENIs(src *section.EC2) int { return src.Limits.ENILimit(w.Cfg.MaxENIs) }

// canCreate: fewer ENIs on the default network card than maxENIs. warm
// attaches only there (the instance type's maxPods assumes as much, see
// section.MaxPods); ENIs on other cards are someone else's, used where
// managed, with their own device index and table.
func (w *Warmer) canCreate(src *section.EC2) bool {
	n := 0
	for _, e := range src.ENIs {
		if e.NetworkCard == 0 {
			n++
		}
	}
	return n < w.maxENIs(src)
}

// assign asks EC2 for addresses (or /28 prefixes) on e and records exactly
// what the reply says was assigned.
func (w *Warmer) assign(ctx context.Context, e section.ENI, need, room int) error {
	in := &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(e.ID)}
	if w.Cfg.PrefixDelegation {
		in.Ipv4PrefixCount = aws.Int32(int32(min((need+15)/16, room)))
	} else {
		in.SecondaryPrivateIpAddressCount = aws.Int32(int32(min(need, room)))
	}
	if err := w.setDirty(ctx, true); err != nil {
		return err
	}
	fault.Point("warm:after-dirty-mark")
	w.flushWake()
	out, err := w.API.AssignPrivateIpAddresses(ctx, in)
	if err != nil {
		return w.refused(ctx, fmt.Errorf("assign addresses to %s: %w", e.ID, err))
	}
	fault.Point("warm:after-assign-before-record")
	var ips []netip.Addr
	for _, a := range out.AssignedPrivateIpAddresses {
		if ip, err := netip.ParseAddr(aws.ToString(a.PrivateIpAddress)); err == nil {
			ips = append(ips, ip)
		}
	}
	var prefixes []netip.Prefix
	for _, p := range out.AssignedIpv4Prefixes {
		if pfx, err := netip.ParsePrefix(aws.ToString(p.Ipv4Prefix)); err == nil {
			prefixes = append(prefixes, pfx)
		}
	}
	n, err := w.record(ctx, e.ID, ips, prefixes)
	fault.Point("warm:after-record")
	if err == nil {
		w.say("assigned %d addresses to %s (%s)", n, e.ID, describe(ips, prefixes))
		w.recorded()
	}
	return err
}

// recorded notes that addresses were recorded: waiting ADDs are woken at
// the pass's next EC2 call or its end.
func (w *Warmer) recorded() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakePending = true
}

// wake tells ADDs waiting on a dry pool to look again. Best effort: they
// also look on their own every few seconds.
func (w *Warmer) wake() {
	w.mu.Lock()
	w.wakePending = false
	w.mu.Unlock()
	if err := w.Mgr.Wake(); err != nil {
		w.say("warning: %v", err)
	}
}

// flushWake wakes waiting ADDs if addresses were recorded since the last
// wake.
func (w *Warmer) flushWake() {
	w.mu.Lock()
	pending := w.wakePending
	w.mu.Unlock()
	if pending {
		w.wake()
	}
}

// record adds addresses EC2 reported as assigned to eniID.
func (w *Warmer) record(ctx context.Context, eniID string, ips []netip.Addr, prefixes []netip.Prefix) (int, error) {
	added := 0
	// EC2 has made the change: record it even if the pass's time is up.
	err := w.update(context.WithoutCancel(ctx), func(st *alloc.State, src *section.EC2) error {
		i := slices.IndexFunc(src.ENIs, func(e section.ENI) bool { return e.ID == eniID })
		if i < 0 {
			return fmt.Errorf("record addresses of %s: ENI not in the store", eniID)
		}
		src.ENIs[i].Secondary += uncounted(src, eniID, ips)
		all := slices.Clone(ips)
		for _, p := range prefixes {
			if !slices.Contains(src.ENIs[i].Prefixes, p.Masked()) {
				src.ENIs[i].Prefixes = append(src.ENIs[i].Prefixes, p.Masked())
			}
			all = append(all, section.Expand(p)...)
		}
		added = src.AddAddrs(eniID, section.OriginAssigned, all, w.now())
		reassigned(src, eniID, all)
		return nil
	})
	return added, err
}

// uncounted is how many of ips, just assigned to eniID, the ENI's slot
// count lacks: all but those already in the pool on it and not lost (an
// ADD's refresh read them from IMDS between the call and this record, and
// Reconcile counted them).
func uncounted(src *section.EC2, eniID string, ips []netip.Addr) int {
	counted := map[netip.Addr]bool{}
	for _, a := range src.Addrs {
		if a.ENI == eniID && !a.Lost {
			counted[a.IP] = true
		}
	}
	n := 0
	for _, ip := range ips {
		if !counted[ip] {
			n++
		}
	}
	return n
}

// reassigned makes the records of addresses EC2 has just assigned to eniID
// say so: one already in the pool may be flagged lost (EC2 took it away
// and now gives it back), taken in as found by an ADD's refresh racing
// this pass, or filed under another ENI (moved behind
// eni-cni's back). The reply is the truth.
func reassigned(src *section.EC2, eniID string, ips []netip.Addr) {
	just := make(map[netip.Addr]bool, len(ips))
	for _, ip := range ips {
		just[ip] = true
	}
	for i := range src.Addrs {
		if a := &src.Addrs[i]; just[a.IP] {
			a.ENI, a.Lost, a.Origin = eniID, false, section.OriginAssigned
		}
	}
}

func describe(ips []netip.Addr, prefixes []netip.Prefix) string {
	var parts []string
	for _, p := range prefixes {
		parts = append(parts, p.String())
	}
	for _, ip := range ips {
		parts = append(parts, ip.String())
	}
	if len(parts) > 6 {
		return strings.Join(parts[:6], " ") + fmt.Sprintf(" and %d more", len(parts)-6)
	}
	return strings.Join(parts, " ")
}
