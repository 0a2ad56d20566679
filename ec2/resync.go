package ec2

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/pool"
)

// attached is what EC2 says one attached ENI holds.
type attached struct {
	state    pool.ENI
	ips      []netip.Addr // secondary addresses
	prefixes []netip.Prefix
}

// resync makes the store agree with EC2 after a pass that may have changed
// EC2 without recording it (the process died, a save failed, an unassign
// timed out). EC2's DescribeNetworkInterfaces is the truth, not IMDS, which
// lags. It adds ENIs and addresses EC2 has and the store lacks, settles
// addresses marked unusable (still assigned: usable again; gone: dropped
// and tombstoned), and drops free addresses EC2 no longer assigns.
// Allocated addresses are never dropped; a mismatch there is reported.
func (w *Warmer) resync(ctx context.Context) error {
	v, err := w.snapshot(ctx)
	if err != nil {
		return err
	}
	truth, err := w.describeAttached(ctx, v.src)
	if err != nil {
		return fmt.Errorf("resync with EC2: %w", err)
	}
	var report resyncReport
	err = w.update(ctx, func(st *alloc.State, src *pool.EC2) error {
		report = applyTruth(st, src, truth, w.now())
		src.Dirty = false
		return nil
	})
	if err == nil && report.changed() {
		w.say("resynced with EC2: %s", report)
	}
	return err
}

func (w *Warmer) describeAttached(ctx context.Context, src *pool.EC2) (map[string]attached, error) {
	primary := src.ENIs[0]
	in := &ec2.DescribeNetworkInterfacesInput{
		Filters: []types.Filter{{Name: aws.String("attachment.instance-id"), Values: []string{src.InstanceID}}},
	}
	truth := map[string]attached{}
	for {
		out, err := w.API.DescribeNetworkInterfaces(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("describe ENIs of %s: %w", src.InstanceID, err)
		}
		for i := range out.NetworkInterfaces {
			a, err := w.attachedFrom(ctx, &out.NetworkInterfaces[i], src, primary)
			if err != nil {
				return nil, err
			}
			truth[a.state.ID] = a
		}
		if aws.ToString(out.NextToken) == "" {
			return truth, nil
		}
		in.NextToken = out.NextToken
	}
}

func (w *Warmer) attachedFrom(ctx context.Context, ni *types.NetworkInterface, src *pool.EC2, primary pool.ENI) (attached, error) {
	e := pool.ENI{ID: aws.ToString(ni.NetworkInterfaceId), MAC: aws.ToString(ni.MacAddress), SubnetID: aws.ToString(ni.SubnetId), VPCCIDRs: primary.VPCCIDRs}
	if ni.Attachment != nil {
		e.DeviceNumber = int(aws.ToInt32(ni.Attachment.DeviceIndex))
	}
	if known, ok := src.ENI(e.ID); ok {
		e.SubnetCIDR, e.SecurityGroups = known.SubnetCIDR, known.SecurityGroups
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
	e.Secondary, e.Prefixes = len(a.ips), a.prefixes
	a.state = e
	return a, nil
}

type resyncReport struct {
	enis, added, settled, dropped int
	mismatched                    []netip.Addr // allocated, but EC2 no longer assigns them
}

func (r resyncReport) changed() bool {
	return r.enis+r.added+r.settled+r.dropped+len(r.mismatched) > 0
}

func (r resyncReport) String() string {
	s := fmt.Sprintf("%d ENIs learnt, %d addresses added, %d unusable settled, %d dropped", r.enis, r.added, r.settled, r.dropped)
	if len(r.mismatched) > 0 {
		s += fmt.Sprintf("; WARNING: allocated addresses EC2 no longer assigns: %v", r.mismatched)
	}
	return s
}

// applyTruth is resync's store update, pure given its inputs. Addresses
// EC2 lists and the store lacks join the pool (assigned on ENIs eni-cni
// created, found elsewhere); free ones EC2 no longer lists leave it; an
// allocated one is flagged lost, never handed out again, and leaves when
// its pod is gone.
func applyTruth(st *alloc.State, src *pool.EC2, truth map[string]attached, now time.Time) resyncReport {
	var r resyncReport
	assigned := map[netip.Addr]string{}
	for id, a := range truth {
		i := slices.IndexFunc(src.ENIs, func(e pool.ENI) bool { return e.ID == id })
		if i < 0 {
			src.ENIs = append(src.ENIs, a.state)
			i = len(src.ENIs) - 1
			r.enis++
		}
		src.ENIs[i].Secondary, src.ENIs[i].Prefixes = a.state.Secondary, a.state.Prefixes
		for _, ip := range a.ips {
			assigned[ip] = id
		}
		for _, p := range a.prefixes {
			for _, ip := range pool.Expand(p) {
				assigned[ip] = id
			}
		}
	}
	src.SortENIs()
	allocated := map[netip.Addr]bool{}
	for _, a := range st.Allocations {
		allocated[a.IP] = true
	}
	inPool := map[netip.Addr]bool{}
	src.Addrs = slices.DeleteFunc(src.Addrs, func(p pool.Addr) bool {
		inPool[p.IP] = true
		_, ok := assigned[p.IP]
		switch {
		case ok && p.Unusable:
			r.settled++
		case !ok && allocated[p.IP]:
			if !p.Lost {
				r.mismatched = append(r.mismatched, p.IP)
			}
		case !ok:
			r.dropped++
			src.Bury(p.IP, now)
			return true
		}
		return false
	})
	for i := range src.Addrs {
		_, ok := assigned[src.Addrs[i].IP]
		src.Addrs[i].Unusable = false
		src.Addrs[i].Lost = !ok
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
