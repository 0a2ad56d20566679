package ec2

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/fault"
)

// TagNoManage on an ENI with the value "true" keeps eni-cni (and the AWS
// VPC CNI) away from it: none of its addresses goes to a pod, none is
// assigned to or taken from it.
const TagNoManage = "node.k8s.amazonaws.com/no_manage"

// ErrEC2Inconsistent: EC2's answer contradicts what cannot change (the
// primary ENI is attached), so the pass changes nothing on its word.
var ErrEC2Inconsistent = errors.New("EC2's answer is not about this instance")

// attached is what EC2 says one attached ENI holds.
type attached struct {
	state    section.ENI
	ips      []netip.Addr // secondary addresses
	prefixes []netip.Prefix
	// prefixes6 are its delegated IPv6 prefixes (learn6 records them).
	prefixes6 []netip.Prefix
}

// resync makes the store agree with EC2, whose DescribeNetworkInterfaces
// (filtered to this instance) is the truth, not IMDS, which lags. It runs
// when IMDS disagrees with the store, when the last pass may have changed
// EC2 without recording it, and once an hour. See applyTruth.
func (w *Warmer) resync(ctx context.Context, why string, d section.Drift) error {
	v, err := w.snapshot(ctx)
	if err != nil {
		return err
	}
	truth, err := w.describeAttached(ctx, v.src)
	if err != nil {
		return fmt.Errorf("read EC2 back (%s): %w", why, err)
	}
	// The primary ENI cannot be detached: an answer without it is not
	// about this instance (a wrong region, a read not yet consistent), and
	// taking it for the truth would drop every ENI and flag every pod's
	// address lost.
	if p, ok := v.src.PrimaryENI(); ok {
		if _, ok := truth[p.ID]; !ok {
			return fmt.Errorf("read EC2 back (%s): %w: DescribeNetworkInterfaces of %s in %s lacks its primary ENI %s; nothing changed",
				why, ErrEC2Inconsistent, v.src.InstanceID, v.src.Region, p.ID)
		}
	}
	fault.Point("warm:resync-after-describe")
	var report resyncReport
	err = w.update(ctx, func(st *alloc.State, src *section.EC2) error {
		if !w.Cfg.IPv6 {
			// A prefix someone delegated to an ENI of a node of IPv4 is
			// not this network's pool: the store never records one.
			for id, a := range truth {
				a.prefixes6 = nil
				truth[id] = a
			}
		}
		report = applyTruth(st, src, truth, w.now())
		if report.reclaim {
			// An ENI eni-cni created was detached: once it has sat
			// available past the leak age, a sweep deletes it, without
			// waiting for the node's window (that spreads only the
			// once-a-boot sweep).
			src.SweepOwed = true
		}
		src.Dirty = false
		src.LastDescribe = w.now().UTC()
		src.Drift = d.Key()
		return nil
	})
	if err != nil {
		return err
	}
	if report.changed() {
		w.say("read EC2 back (%s): %s", why, report)
	}
	for _, id := range report.detached {
		w.warn("%s was detached from this instance behind eni-cni's back; its free addresses left the pool", id)
	}
	for _, l := range report.lost {
		w.warn("%s (%s) is no longer assigned to this instance by EC2 (IMDS lacks it too): flagged lost in `eni-cni list`, never handed out again", l.IP, l.who)
	}
	for _, p := range report.gone6 {
		w.warn("IPv6 prefix %s is no longer delegated to this instance by EC2: it left the pool with its free addresses", p)
	}
	for _, l := range report.lost6 {
		w.warn("%s (%s) is of an IPv6 prefix EC2 no longer delegates: outside the pool in `eni-cni list`, never handed out again", l.IP, l.who)
	}
	return nil
}

func (w *Warmer) describeAttached(ctx context.Context, src *section.EC2) (map[string]attached, error) {
	in := &ec2.DescribeNetworkInterfacesInput{
		Filters: []types.Filter{{Name: aws.String("attachment.instance-id"), Values: []string{src.InstanceID}}},
	}
	truth := map[string]attached{}
	var failed error // attachedFrom's, not the call's
	err := describeENIs(ctx, w.API, in, func(ni *types.NetworkInterface) error {
		a, err := w.attachedFrom(ctx, ni, src)
		if err != nil {
			failed = err
			return err
		}
		truth[a.state.ID] = a
		return nil
	})
	switch {
	case failed != nil:
		return nil, failed
	case err != nil:
		return nil, fmt.Errorf("describe ENIs of %s: %w", src.InstanceID, err)
	}
	return truth, nil
}

func (w *Warmer) attachedFrom(ctx context.Context, ni *types.NetworkInterface, src *section.EC2) (attached, error) {
	primary, _ := src.PrimaryENI()
	e := section.ENI{ID: aws.ToString(ni.NetworkInterfaceId), MAC: aws.ToString(ni.MacAddress), SubnetID: aws.ToString(ni.SubnetId), VPCCIDRs: primary.VPCCIDRs}
	if at := ni.Attachment; at != nil {
		e.DeviceNumber, e.NetworkCard = int(aws.ToInt32(at.DeviceIndex)), int(aws.ToInt32(at.NetworkCardIndex))
		e.AttachmentID, e.DeleteOnTermination = aws.ToString(at.AttachmentId), aws.ToBool(at.DeleteOnTermination)
	}
	for _, t := range ni.TagSet {
		switch aws.ToString(t.Key) {
		case TagNoManage:
			e.Unmanaged = aws.ToString(t.Value) == "true"
		case TagInstanceID:
			e.Created = aws.ToString(t.Value) == src.InstanceID
		}
	}
	if known, ok := src.ENI(e.ID); ok && known.SubnetCIDR.IsValid() {
		e.SubnetCIDR, e.SecurityGroups = known.SubnetCIDR, known.SecurityGroups
		if len(known.VPCCIDRs) > 0 {
			e.VPCCIDRs = known.VPCCIDRs
		}
	} else {
		cidr, err := w.subnetCIDR(ctx, e.SubnetID, primary)
		if err != nil {
			return attached{}, err
		}
		e.SubnetCIDR = cidr
		for _, g := range ni.Groups {
			e.SecurityGroups = append(e.SecurityGroups, aws.ToString(g.GroupId))
		}
	}
	var a attached
	for _, p := range ni.PrivateIpAddresses {
		ip, err := netip.ParseAddr(aws.ToString(p.PrivateIpAddress))
		if err != nil {
			return attached{}, fmt.Errorf("describe %s: bad address: %w", e.ID, err)
		}
		if aws.ToBool(p.Primary) {
			e.PrimaryIP = ip
		} else {
			a.ips = append(a.ips, ip)
		}
	}
	for _, p := range ni.Ipv4Prefixes {
		pfx, err := netip.ParsePrefix(aws.ToString(p.Ipv4Prefix))
		if err != nil {
			return attached{}, fmt.Errorf("describe %s: bad prefix: %w", e.ID, err)
		}
		a.prefixes = append(a.prefixes, pfx.Masked())
	}
	for _, p := range ni.Ipv6Prefixes {
		pfx, err := netip.ParsePrefix(aws.ToString(p.Ipv6Prefix))
		if err != nil || !pfx.Addr().Is6() {
			return attached{}, fmt.Errorf("describe %s: bad IPv6 prefix %q", e.ID, aws.ToString(p.Ipv6Prefix))
		}
		if section.Delegated6(pfx) { // anything else is no pool of pods
			a.prefixes6 = append(a.prefixes6, pfx.Masked())
		}
	}
	e.Secondary, e.Prefixes = len(a.ips), a.prefixes
	a.state = e
	return a, nil
}

type lostAddr struct {
	IP  netip.Addr
	who string
}

type resyncReport struct {
	enis, added, settled, dropped int
	detached                      []string
	reclaim                       bool       // a detached ENI was one eni-cni created
	lost                          []lostAddr // allocated, but EC2 no longer assigns them
	// prefixes6 learnt from EC2; gone6 those EC2 no longer delegates (each
	// with the pods that keep addresses of it, lost6).
	prefixes6 int
	gone6     []netip.Prefix
	lost6     []lostAddr
}

func (r resyncReport) changed() bool {
	return r.enis+r.added+r.settled+r.dropped+len(r.detached)+len(r.lost)+r.prefixes6+len(r.gone6) > 0
}

func (r resyncReport) String() string {
	s := fmt.Sprintf("%d ENIs learnt, %d detached, %d addresses added, %d unusable settled, %d dropped, %d lost",
		r.enis, len(r.detached), r.added, r.settled, r.dropped, len(r.lost))
	if r.prefixes6+len(r.gone6) > 0 {
		s += fmt.Sprintf(", %d IPv6 prefixes added, %d gone", r.prefixes6, len(r.gone6))
	}
	return s
}

// applyTruth is resync's store update, pure given its inputs.
//   - ENIs: EC2's attributes win (tags: no_manage, created by eni-cni;
//     attachment); ENIs no longer attached leave the store.
//   - Addresses EC2 lists and the store lacks join the pool (assigned on
//     ENIs eni-cni created, found elsewhere).
//   - Free addresses EC2 no longer lists leave it (tombstoned, as IMDS may
//     still list them); an allocated one is flagged lost: never handed out
//     again, and dropped once its pod is gone.
//   - Addresses marked unusable (a give-back whose result was not
//     recorded) are settled: still assigned, usable again; gone, dropped.
func applyTruth(st *alloc.State, src *section.EC2, truth map[string]attached, now time.Time) resyncReport {
	var r resyncReport
	assigned := learnENIs(src, truth, &r)
	learn6(st, src, truth, now, &r)
	who := map[netip.Addr]string{}
	for _, a := range st.Allocations {
		who[a.IP] = fmt.Sprintf("pod %s/%s, container %.12s", a.PodNamespace, a.PodName, a.ContainerID)
	}
	inPool := map[netip.Addr]bool{}
	src.Addrs = slices.DeleteFunc(src.Addrs, func(p section.Addr) bool {
		inPool[p.IP] = true
		_, ok := assigned[p.IP]
		_, held := who[p.IP]
		switch {
		case ok && p.Unusable:
			r.settled++
		case !ok && held:
			if !p.Lost {
				r.lost = append(r.lost, lostAddr{p.IP, who[p.IP]})
			}
		case !ok:
			r.dropped++
			src.Bury(p.IP, now)
			return true
		}
		return false
	})
	for i := range src.Addrs {
		a := &src.Addrs[i]
		eni, ok := assigned[a.IP]
		a.Unusable, a.Lost = false, !ok
		if ok {
			a.ENI = eni
			if e, _ := src.ENI(eni); e.Created {
				a.Origin = section.OriginAssigned // learnt that eni-cni created its ENI
			}
		}
	}
	for ip, id := range assigned {
		if !inPool[ip] {
			e, _ := src.ENI(id)
			src.AddAddrs(id, e.FoundOrigin(), []netip.Addr{ip}, now)
			r.added++
		}
	}
	src.SortAddrs()
	return r
}

// learn6 makes each ENI's IPv6 prefixes those EC2 delegates: a prefix EC2
// lists and the store lacks joins the pool, one it no longer lists leaves
// it (its free addresses with it). Pods holding addresses of a prefix
// gone keep them, outside the pool (never handed out again), and are
// reported. learnENIs has made the ENIs EC2's.
func learn6(st *alloc.State, src *section.EC2, truth map[string]attached, now time.Time, r *resyncReport) {
	for i := range src.ENIs {
		e := &src.ENIs[i]
		a := truth[e.ID]
		kept := e.IPv6Prefixes[:0]
		for _, p := range e.IPv6Prefixes {
			if slices.Contains(a.prefixes6, p.Prefix) {
				kept = append(kept, p)
				continue
			}
			r.gone6 = append(r.gone6, p.Prefix)
			for _, al := range st.Allocations {
				for _, ip := range al.Addrs() {
					if p.Prefix.Contains(ip) {
						r.lost6 = append(r.lost6, lostAddr{ip, fmt.Sprintf("pod %s/%s, container %.12s", al.PodNamespace, al.PodName, al.ContainerID)})
					}
				}
			}
		}
		e.IPv6Prefixes = slices.Clip(kept)
		if len(e.IPv6Prefixes) == 0 {
			e.IPv6Prefixes = nil
		}
		r.prefixes6 += src.AddIPv6Prefixes(e.ID, e.FoundOrigin(), a.prefixes6, now)
	}
}

// learnENIs makes the section's ENIs those EC2 lists as attached, with
// EC2's attributes, and returns which ENI each assigned address is on.
func learnENIs(src *section.EC2, truth map[string]attached, r *resyncReport) map[netip.Addr]string {
	assigned := map[netip.Addr]string{}
	for id, a := range truth {
		if _, known := src.ENI(id); !known {
			r.enis++
		}
		learnENI(src, a.state)
		for _, ip := range a.ips {
			assigned[ip] = id
		}
		for _, p := range a.prefixes {
			for _, ip := range section.Expand(p) {
				assigned[ip] = id
			}
		}
	}
	src.ENIs = slices.DeleteFunc(src.ENIs, func(e section.ENI) bool {
		_, ok := truth[e.ID]
		if !ok {
			r.detached = append(r.detached, e.ID)
			r.reclaim = r.reclaim || e.Created
		}
		return !ok
	})
	src.SortENIs()
	return assigned
}

// learnENI records what EC2 says about an attached ENI.
func learnENI(src *section.EC2, e section.ENI) {
	i := slices.IndexFunc(src.ENIs, func(k section.ENI) bool { return k.ID == e.ID })
	if i < 0 {
		src.ENIs = append(src.ENIs, e)
		return
	}
	k := &src.ENIs[i]
	k.DeviceNumber, k.NetworkCard, k.Secondary, k.Prefixes = e.DeviceNumber, e.NetworkCard, e.Secondary, e.Prefixes
	k.Unmanaged, k.Unverified = e.Unmanaged, false
	k.Created = k.Created || e.Created
	k.AttachmentID, k.DeleteOnTermination = e.AttachmentID, e.DeleteOnTermination
	if k.MAC == "" {
		k.MAC = e.MAC
	}
	if !k.PrimaryIP.IsValid() {
		k.PrimaryIP = e.PrimaryIP
	}
	if !k.SubnetCIDR.IsValid() {
		k.SubnetID, k.SubnetCIDR, k.SecurityGroups = e.SubnetID, e.SubnetCIDR, e.SecurityGroups
	}
	if len(k.VPCCIDRs) == 0 {
		k.VPCCIDRs = e.VPCCIDRs
	}
}
