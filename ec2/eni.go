package ec2

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/fault"
)

// Tag keys eni-cni puts on the ENIs it creates, so an operator (or a
// cleanup job) can tell them apart from ENIs made by anything else.
const (
	TagInstanceID = "eni-cni/instance-id"
	TagCreatedAt  = "eni-cni/created-at"
)

// newENI is one ENI a pass is about to create: the idempotency token that
// keys its pending record, the device index reserved for it, and how many
// addresses (or prefixes) it is created with. kept is set for an ENI an
// earlier pass created but could not attach: it is attached, not created.
type newENI struct {
	token        string
	card, device int
	count        int32
	kept         *section.UnattachedENI
}

// createENIs creates the ENIs the need takes, concurrently: one ENI's time
// (create, attach, link: about 3 s on EC2) instead of the sum. Only the
// ENIs the need takes are created, and no more than the instance and
// maxENIs allow. Each has its own pending record (all saved, with the
// dirty mark, before any Create call: see lifecycle.go for what the next
// pass does with the records a dead pass leaves) and its own device
// index, reserved here. A creation that fails does not stop the others:
// they finish and are recorded, and the pass reports the failures joined.
// The fill goes no further after a failed batch, and a throttle met by
// the batch's Creates is retried by one of them only (throttlegate.go):
// the batch fires no more calls into it than one creation would.
func (w *Warmer) createENIs(ctx context.Context, src *section.EC2, need int, target PodSubnet) error {
	batch := w.planENIs(src, need)
	if err := w.beginCreates(ctx, batch); err != nil {
		return err
	}
	fault.Point("warm:after-pending-mark")
	w.flushWake()
	in := w.createInput(src, target)
	gate := newThrottleGate()
	results := make([]createResult, len(batch))
	var wg sync.WaitGroup
	for i, n := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = w.createENI(ctx, src, in, n, func(ctx context.Context, in *ec2.CreateNetworkInterfaceInput) (*ec2.CreateNetworkInterfaceOutput, error) {
				return gate.create(ctx, w.API, in, i)
			})
		}()
	}
	wg.Wait()
	var errs []error
	clean := true
	for _, r := range results {
		errs = append(errs, r.err)
		clean = clean && (r.err == nil || r.clean)
	}
	err := errors.Join(errs...)
	if err != nil && clean {
		// Every failed creation certainly left EC2 as it was and every
		// other one is recorded: nothing for a resync to learn.
		err = errors.Join(err, w.setDirty(context.WithoutCancel(ctx), false))
	}
	return err
}

// keptENIs are the pending records of ENIs an earlier pass created and
// kept unattached, their attach throttled, and still unattached.
func keptENIs(src *section.EC2) []section.PendingENI {
	var kept []section.PendingENI
	for _, p := range src.Pending {
		if p.Unattached == nil {
			continue
		}
		if _, attached := src.ENI(p.ID); attached {
			continue // its attach got through after all: settlePending drops the record
		}
		kept = append(kept, p)
	}
	return kept
}

// attachKept attaches the ENIs an earlier pass created and kept (their
// attach throttled), for need addresses, before any Assign: their Create
// is spent, their attach is due anyway, and the Assign bucket is the one
// a fleet's readiness fills crowd (assigning first took a third Assign on
// the nodes that waited longest: 54 of 1,000 nodes, 35-38 throttled
// attempts each). A kept ENI whose attach fails for good is given up and
// the fill goes on (keptGone); a throttle, or a failure after an attach,
// stops the pass.
func (w *Warmer) attachKept(ctx context.Context, src *section.EC2, need int) error {
	err := w.createENIs(ctx, src, need, w.defaultSubnet(src))
	if err == nil || isThrottle(err) || !w.keptGone(ctx, src) {
		return err
	}
	w.say("kept ENIs given up, going on without them: %v", err)
	w.learnGivenUp(ctx)
	return nil
}

// learnGivenUp reads EC2 back when a kept ENI given up could not be
// deleted either (the batch left the dirty mark): it may be attached here
// after all, by an earlier attach EC2 carried out though its reply said
// throttled (a lost reply retried into the throttle). The store would not
// know the device index it holds, and the ENI the fill creates next would
// be attached there and fail, failing the pass and its waiting ADDs; a
// kept ENI forces no describe of its own, and IMDS may not show it yet.
// If EC2 cannot be read, the fill goes on all the same: the ENI's pending
// record forces the next pass's describe.
func (w *Warmer) learnGivenUp(ctx context.Context) {
	v, err := w.snapshot(ctx)
	if err != nil || !v.src.Dirty {
		return
	}
	if err := w.resync(ctx, "a kept ENI could be neither attached nor deleted", section.Drift{}); err != nil {
		w.say("going on without reading EC2 back: %v", err)
	}
}

// keptGone reports whether none of the ENIs before kept (in before) is
// kept or attached any more: their attach failed for a reason a retry
// cannot cure (EC2 no longer has the ENI, or will not attach it) and the
// record was dropped, or left for a delete. The fill goes on without them
// instead of failing the pass, and with it every waiting ADD, on a node
// whose other ENIs have room.
func (w *Warmer) keptGone(ctx context.Context, before *section.EC2) bool {
	v, err := w.snapshot(ctx)
	if err != nil {
		return false
	}
	for _, p := range keptENIs(before) {
		if _, attached := v.src.ENI(p.ID); attached {
			return false
		}
		for _, q := range keptENIs(v.src) {
			if q.Token == p.Token {
				return false
			}
		}
	}
	return true
}

// keptSize is the addresses a kept ENI brings, 16 per /28 prefix.
func keptSize(u *section.UnattachedENI) int { return len(u.IPs) + 16*len(u.ENI.Prefixes) }

// keptAddrs is the addresses the kept ENIs bring.
func keptAddrs(src *section.EC2) int {
	n := 0
	for _, p := range keptENIs(src) {
		n += keptSize(p.Unattached)
	}
	return n
}

// planENIs splits the need over the ENIs it takes, each with full slots
// but the last, bounded by the ENIs the instance and maxENIs still allow
// (canCreate has said there is room for one), and reserves their device
// indexes.
func (w *Warmer) planENIs(src *section.EC2, need int) []newENI {
	room := w.maxENIs(src)
	for _, e := range src.ENIs {
		if e.NetworkCard == 0 {
			room--
		}
	}
	per := slots(src)
	var batch []newENI
	// ENIs created but not attached by an earlier pass come first: their
	// Create is spent already.
	for _, p := range keptENIs(src) {
		if need <= 0 || len(batch) >= max(room, 1) {
			break
		}
		batch = append(batch, newENI{token: p.Token, kept: p.Unattached})
		need -= keptSize(p.Unattached)
	}
	for need > 0 && len(batch) < max(room, 1) {
		var n int
		if w.Cfg.PrefixDelegation {
			n = min((need+15)/16, per)
			need -= 16 * n
		} else {
			n = min(need, per)
			need -= n
		}
		batch = append(batch, newENI{token: newToken(), count: int32(n)})
	}
	for i, dev := range freeSlots(src, len(batch)) {
		batch[i].device = dev
	}
	return batch
}

// createInput is the request the ENIs of a batch share but for their
// token and count: in the target subnet with its security groups
// (defaultSubnet: the primary ENI's, or those configured).
func (w *Warmer) createInput(src *section.EC2, target PodSubnet) ec2.CreateNetworkInterfaceInput {
	return ec2.CreateNetworkInterfaceInput{
		SubnetId:          aws.String(target.ID),
		Groups:            target.SGs,
		Description:       aws.String("eni-cni pod addresses of " + src.InstanceID),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeNetworkInterface, Tags: w.tags(src)}},
	}
}

// createCall makes a batch's Create call (through its throttleGate).
type createCall func(context.Context, *ec2.CreateNetworkInterfaceInput) (*ec2.CreateNetworkInterfaceOutput, error)

// createResult is how one creation of a batch ended. clean: it failed
// leaving EC2 certainly as it was (the Create refused, or the ENI deleted
// again), and its pending record is gone.
type createResult struct {
	err   error
	clean bool
}

// createENI creates one ENI of a batch, attaches it at its reserved device
// index, sets DeleteOnTermination, sets it up on the node and records it.
// It runs beside the batch's other creations: src is only read.
func (w *Warmer) createENI(ctx context.Context, src *section.EC2, shared ec2.CreateNetworkInterfaceInput, n newENI, create createCall) createResult {
	e, ips, prefixes, failed := w.created(ctx, src, shared, n, create)
	if failed != nil {
		return *failed
	}
	fault.Point("warm:after-create-before-attach")
	e.NetworkCard, e.DeviceNumber = n.card, n.device
	if err := w.attach(ctx, &e, src); err != nil {
		if isThrottle(err) {
			// The account's Attach bucket is empty, not this ENI at
			// fault: keep it for the next pass rather than spend a Delete
			// now and a Create then.
			return w.keep(ctx, n.token, e, ips, prefixes, err)
		}
		return w.abandon(ctx, n.token, e.ID, err)
	}
	// The link is set up before the addresses are recorded: an ADD
	// waiting on a dry pool takes one the moment it is recorded, and needs
	// the ENI's link and table then (the pending record and the dirty mark
	// cover a pass that dies meanwhile). DeleteOnTermination is set while
	// the link appears: that takes longer than the call.
	linked := e
	setup := make(chan error, 1)
	go func() { setup <- w.setupHost(ctx, linked) }()
	w.deleteOnTermination(ctx, &e)
	setupErr := <-setup
	fault.Point("warm:after-attach-before-record")
	if _, err := w.recordENI(ctx, n.token, e, ips, prefixes); err != nil {
		return createResult{err: errors.Join(err, setupErr)}
	}
	fault.Point("warm:after-record-eni")
	w.say("created %s (card %d device %d, subnet %s, %s) with %d addresses", e.ID, e.NetworkCard, e.DeviceNumber, e.SubnetID, e.MAC, len(ips)+16*len(prefixes))
	// The batch's other ENIs may still be on their way: the ADDs waiting
	// for these addresses take them meanwhile.
	w.recorded()
	w.flushWake()
	if v, err := w.snapshot(ctx); err == nil {
		w.repace(v, w.need(v))
	}
	return createResult{err: setupErr}
}

// created is the ENI of n once created: made by the Create call, or the
// one an earlier pass created and kept unattached. failed is how the
// creation ended when it did not get that far.
func (w *Warmer) created(ctx context.Context, src *section.EC2, shared ec2.CreateNetworkInterfaceInput, n newENI, create createCall) (e section.ENI, ips []netip.Addr, prefixes []netip.Prefix, failed *createResult) {
	if n.kept != nil {
		e = n.kept.ENI
		return e, slices.Clone(n.kept.IPs), slices.Clone(e.Prefixes), nil
	}
	primary, _ := src.PrimaryENI()
	in := shared
	in.ClientToken = aws.String(n.token)
	if w.Cfg.PrefixDelegation {
		in.Ipv4PrefixCount = aws.Int32(n.count)
	} else {
		in.SecondaryPrivateIpAddressCount = aws.Int32(n.count)
	}
	out, err := create(ctx, &in)
	if err != nil {
		err = fmt.Errorf("create ENI in %s: %w", aws.ToString(in.SubnetId), err)
		if refusal(err) {
			return e, nil, nil, &createResult{errors.Join(err, w.dropPending(ctx, n.token)), true}
		}
		return e, nil, nil, &createResult{err: err} // maybe created: the pending record leads a sweep to it
	}
	fault.Point("warm:after-create-before-note")
	e, ips, prefixes, err = w.newENIState(ctx, out.NetworkInterface, src, primary)
	if e.ID != "" {
		if perr := w.notePending(ctx, n.token, e.ID); perr != nil {
			return e, nil, nil, &createResult{err: errors.Join(err, perr)}
		}
	}
	if err != nil {
		r := w.abandon(ctx, n.token, e.ID, err)
		return e, nil, nil, &r
	}
	return e, ips, prefixes, nil
}

// keep records an ENI whose attach EC2 throttled in its pending record,
// for a later pass to attach (planENIs). The store then knows all EC2
// holds: the creation ends clean, with the throttle for the pass's
// outcome (the ADDs waiting keep waiting).
func (w *Warmer) keep(ctx context.Context, token string, e section.ENI, ips []netip.Addr, prefixes []netip.Prefix, cause error) createResult {
	e.NetworkCard, e.DeviceNumber, e.AttachmentID = 0, 0, ""
	e.Prefixes = prefixes
	err := w.update(context.WithoutCancel(ctx), func(_ *alloc.State, src *section.EC2) error {
		for i := range src.Pending {
			if src.Pending[i].Token == token {
				src.Pending[i].ID = e.ID
				src.Pending[i].Unattached = &section.UnattachedENI{ENI: e, IPs: ips}
			}
		}
		return nil
	})
	if err != nil {
		return createResult{err: errors.Join(cause, err)}
	}
	w.say("kept %s unattached for the next pass: %v", e.ID, cause)
	return createResult{cause, true}
}

// setupHost readies the node side of a new ENI (its link, once it appears).
func (w *Warmer) setupHost(ctx context.Context, e section.ENI) error {
	if w.Host == nil {
		return nil
	}
	if err := w.Host.SetupENI(ctx, e); err != nil {
		return fmt.Errorf("set up %s on the node (the next pass and ADD retry it): %w", e.ID, err)
	}
	return nil
}

// beginCreates saves the dirty mark and the batch's pending records, in
// one write, before any Create call.
func (w *Warmer) beginCreates(ctx context.Context, batch []newENI) error {
	return w.update(ctx, func(_ *alloc.State, src *section.EC2) error {
		src.Dirty = true
		for _, n := range batch {
			if n.kept == nil {
				src.Pending = append(src.Pending, section.PendingENI{Token: n.token, Since: w.now().UTC()})
			}
		}
		return nil
	})
}

// notePending completes the pending record with the ID EC2 gave the ENI.
func (w *Warmer) notePending(ctx context.Context, token, id string) error {
	return w.update(context.WithoutCancel(ctx), func(_ *alloc.State, src *section.EC2) error {
		for i := range src.Pending {
			if src.Pending[i].Token == token {
				src.Pending[i].ID = id
			}
		}
		return nil
	})
}

// newENIState reads the created ENI from the reply.
func (w *Warmer) newENIState(ctx context.Context, ni *types.NetworkInterface, src *section.EC2, primary section.ENI) (section.ENI, []netip.Addr, []netip.Prefix, error) {
	if ni == nil || ni.NetworkInterfaceId == nil {
		return section.ENI{}, nil, nil, fmt.Errorf("create ENI: reply has no interface")
	}
	e := section.ENI{
		ID: aws.ToString(ni.NetworkInterfaceId), MAC: aws.ToString(ni.MacAddress),
		SubnetID: aws.ToString(ni.SubnetId), VPCCIDRs: primary.VPCCIDRs,
	}
	for _, g := range ni.Groups {
		e.SecurityGroups = append(e.SecurityGroups, aws.ToString(g.GroupId))
	}
	var ips []netip.Addr
	for _, a := range ni.PrivateIpAddresses {
		ip, err := netip.ParseAddr(aws.ToString(a.PrivateIpAddress))
		if err != nil {
			return e, nil, nil, fmt.Errorf("create ENI %s: bad address in reply: %w", e.ID, err)
		}
		if aws.ToBool(a.Primary) {
			e.PrimaryIP = ip
		} else {
			ips = append(ips, ip)
		}
	}
	var prefixes []netip.Prefix
	for _, p := range ni.Ipv4Prefixes {
		pfx, err := netip.ParsePrefix(aws.ToString(p.Ipv4Prefix))
		if err != nil {
			return e, nil, nil, fmt.Errorf("create ENI %s: bad prefix in reply: %w", e.ID, err)
		}
		prefixes = append(prefixes, pfx.Masked())
	}
	if !e.PrimaryIP.IsValid() {
		if ip, err := netip.ParseAddr(aws.ToString(ni.PrivateIpAddress)); err == nil {
			e.PrimaryIP = ip
		}
	}
	var err error
	e.SubnetCIDR, err = w.subnetCIDR(ctx, e.SubnetID, primary)
	return e, ips, prefixes, err
}

func (w *Warmer) subnetCIDR(ctx context.Context, subnet string, primary section.ENI) (netip.Prefix, error) {
	if subnet == primary.SubnetID {
		return primary.SubnetCIDR, nil
	}
	// Discovery read it already (candidates do not change while the
	// batch's creations run).
	for _, c := range w.candidates {
		if c.ID == subnet && c.CIDR.IsValid() {
			return c.CIDR, nil
		}
	}
	out, err := w.API.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{subnet}})
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("describe subnet %s: %w", subnet, err)
	}
	if len(out.Subnets) != 1 {
		return netip.Prefix{}, fmt.Errorf("describe subnet %s: %d subnets in reply", subnet, len(out.Subnets))
	}
	return netip.ParsePrefix(aws.ToString(out.Subnets[0].CidrBlock))
}

// attach attaches e at the card and device index reserved for it.
func (w *Warmer) attach(ctx context.Context, e *section.ENI, src *section.EC2) error {
	out, err := w.API.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{
		DeviceIndex:        aws.Int32(int32(e.DeviceNumber)),
		NetworkCardIndex:   aws.Int32(int32(e.NetworkCard)),
		InstanceId:         aws.String(src.InstanceID),
		NetworkInterfaceId: aws.String(e.ID),
	})
	if err != nil {
		return fmt.Errorf("attach %s to %s at card %d device %d: %w", e.ID, src.InstanceID, e.NetworkCard, e.DeviceNumber, err)
	}
	fault.Point("warm:after-attach-before-dot")
	e.AttachmentID = aws.ToString(out.AttachmentId)
	return nil
}

// deleteOnTermination sets the attachment's DeleteOnTermination: without it
// the ENI outlives the instance and its addresses leak. A failure is
// recorded (DeleteOnTermination false) and retried by every pass until EC2
// has set it.
func (w *Warmer) deleteOnTermination(ctx context.Context, e *section.ENI) {
	_, err := w.API.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{
		NetworkInterfaceId: aws.String(e.ID),
		Attachment: &types.NetworkInterfaceAttachmentChanges{
			AttachmentId: aws.String(e.AttachmentID), DeleteOnTermination: aws.Bool(true),
		},
	})
	e.DeleteOnTermination = err == nil
	if err != nil {
		w.warn("%s attached but DeleteOnTermination not set yet (retried next pass): %v", e.ID, err)
	}
}

// abandon deletes an ENI that was created but could not be attached, so a
// failed pass does not leave billable interfaces behind. The delete has its
// own timeout: the pass's context may be what ran out. If the delete fails
// too, the pending record stays and the next pass deletes it.
func (w *Warmer) abandon(ctx context.Context, token, id string, cause error) createResult {
	if id == "" {
		return createResult{err: cause}
	}
	if err := w.deleteENI(ctx, id); err != nil {
		err = fmt.Errorf("%w (and deleting %s failed, the next pass retries: %v)", cause, id, err)
		return createResult{err: errors.Join(err, w.unkeep(ctx, token))}
	}
	w.say("deleted %s again: %v", id, cause)
	// EC2 is as it was before the create: nothing for a resync to learn.
	return createResult{errors.Join(cause, w.dropPending(ctx, token)), true}
}

// unkeep makes the record of an ENI that could not be attached, kept
// (its earlier attach throttled) and now not deletable either, a plain
// pending record: settlePending deletes it. Kept, a pass would try its
// attach again before any Assign, and fail each time.
func (w *Warmer) unkeep(ctx context.Context, token string) error {
	return w.update(context.WithoutCancel(ctx), func(_ *alloc.State, src *section.EC2) error {
		for i := range src.Pending {
			if src.Pending[i].Token == token {
				src.Pending[i].Unattached = nil
			}
		}
		return nil
	})
}

func (w *Warmer) recordENI(ctx context.Context, token string, e section.ENI, ips []netip.Addr, prefixes []netip.Prefix) (int, error) {
	added := 0
	err := w.update(context.WithoutCancel(ctx), func(st *alloc.State, src *section.EC2) error {
		e.Secondary = len(ips)
		e.Prefixes = prefixes
		e.Created = true
		// An ADD's refresh may have taken the ENI in from IMDS already
		// (unverified, its addresses found): this record, from EC2's
		// replies, replaces that one.
		src.ENIs = slices.DeleteFunc(src.ENIs, func(k section.ENI) bool { return k.ID == e.ID })
		src.ENIs = append(src.ENIs, e)
		src.SortENIs()
		src.Pending = slices.DeleteFunc(src.Pending, func(p section.PendingENI) bool { return p.Token == token })
		if len(src.Pending) == 0 {
			src.Pending = nil
		}
		all := slices.Clone(ips)
		for _, p := range prefixes {
			all = append(all, section.Expand(p)...)
		}
		added = src.AddAddrs(e.ID, section.OriginAssigned, all, w.now())
		reassigned(src, e.ID, all)
		return nil
	})
	return added, err
}

func (w *Warmer) tags(src *section.EC2) []types.Tag {
	tags := []types.Tag{
		{Key: aws.String(TagInstanceID), Value: aws.String(src.InstanceID)},
		{Key: aws.String(TagCreatedAt), Value: aws.String(w.now().UTC().Format(time.RFC3339))},
	}
	keys := make([]string, 0, len(w.Cfg.Tags))
	for k := range w.Cfg.Tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		tags = append(tags, types.Tag{Key: aws.String(k), Value: aws.String(w.Cfg.Tags[k])})
	}
	return tags
}

// freeSlots is where the next n ENIs go: the default network card (0) and
// its n lowest device indexes no recorded ENI holds (the primary holds 0).
// One pass creates at a time (warm.lock), and the dirty mark or a pending
// record that a dead pass left forces a describe before the fill that
// records any ENI it attached: the recorded ENIs are all that hold one
// (an index taken behind eni-cni's back fails that ENI's attach, which
// deletes it again).
func freeSlots(src *section.EC2, n int) []int {
	used := map[int]bool{}
	for _, e := range src.ENIs {
		if e.NetworkCard == 0 {
			used[e.DeviceNumber] = true
		}
	}
	var out []int
	for device := 0; len(out) < n; device++ {
		if !used[device] {
			out = append(out, device)
		}
	}
	return out
}
