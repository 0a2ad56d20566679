package ec2

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/fault"
)

// giveBack is one unassign call's worth: addresses or prefixes of one ENI.
type giveBack struct {
	eni      string
	ips      []netip.Addr
	prefixes []netip.Prefix
}

// trim gives surplus addresses back to EC2. Only addresses that are free,
// not cooling and in the pool for at least TrimAfter qualify; they are
// marked unusable and saved before the unassign call, so no ADD can take
// one while EC2 is taking it away.
func (w *Warmer) trim(ctx context.Context) error {
	if w.Cfg.IPv6Only() {
		// The /80 is the pool for the node's life (fill6); no IPv4
		// address is assigned for pods to give back.
		return nil
	}
	var batches []giveBack
	err := w.update(ctx, func(st *alloc.State, src *section.EC2) error {
		// IPv4's counts on a dual-stack network: the /80 is never trimmed.
		c := provider.Sized(w.Mgr.Counts(st))
		surplus := min(c.Free-w.Cfg.WarmIPTarget-st.Waiting(w.now()), c.Total-w.Cfg.MinimumIPTarget)
		if surplus <= 0 {
			return nil
		}
		batches = w.pickSurplus(st, src, surplus)
		for _, b := range batches {
			setUnusable(src, b, true)
		}
		// Saved with the marks, before any unassign call; a trim with
		// nothing to give back changes (and saves) nothing.
		src.Dirty = src.Dirty || len(batches) > 0
		return nil
	})
	if err != nil || len(batches) == 0 {
		return err
	}
	fault.Point("warm:after-unusable-mark")
	var errs []error
	for _, b := range batches {
		if err := w.unassign(ctx, b); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("trim: %w", errs[0])
	}
	return nil
}

// pickSurplus chooses what to give back, from the highest ENI down so the
// primary ENI keeps its addresses. With prefix delegation only whole
// prefixes whose every address qualifies are given back.
func (w *Warmer) pickSurplus(st *alloc.State, src *section.EC2, surplus int) []giveBack {
	ok := w.trimmable(st, src)
	var out []giveBack
	for i := len(src.ENIs) - 1; i >= 0 && surplus > 0; i-- {
		e := src.ENIs[i]
		if e.Unmanaged {
			continue
		}
		b := giveBack{eni: e.ID}
		for _, p := range e.Prefixes {
			addrs := section.Expand(p)
			if len(addrs) <= surplus && !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return !ok[a] }) {
				b.prefixes = append(b.prefixes, p)
				surplus -= len(addrs)
			}
		}
		for _, p := range src.Addrs {
			if surplus > 0 && p.ENI == e.ID && ok[p.IP] && !inPrefixes(e.Prefixes, p.IP) {
				b.ips = append(b.ips, p.IP)
				surplus--
			}
		}
		if len(b.ips)+len(b.prefixes) > 0 {
			out = append(out, b)
		}
	}
	return out
}

// trimmable is the set of pool addresses that may be given back now: only
// addresses warm assigned, never ones found on the instance, and never an
// excluded one (a VIP or an Elastic IP's address the operator put on an ENI
// eni-cni created, whose addresses otherwise all count as its own).
func (w *Warmer) trimmable(st *alloc.State, src *section.EC2) map[netip.Addr]bool {
	busy := map[netip.Addr]bool{}
	for _, a := range st.Allocations {
		busy[a.IP] = true
	}
	for _, c := range st.Cooling {
		busy[c.IP] = true
	}
	ok := map[netip.Addr]bool{}
	for _, p := range src.Addrs {
		if p.Origin == section.OriginAssigned && !p.Unusable && !p.Lost && !busy[p.IP] && !section.Excluded(w.Cfg.ExcludeIPs, p.IP) &&
			section.Elapsed(w.now(), p.AddedAt, w.Cfg.TrimAfter) {
			ok[p.IP] = true
		}
	}
	return ok
}

func inPrefixes(ps []netip.Prefix, ip netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(ip) })
}

func setUnusable(src *section.EC2, b giveBack, v bool) {
	for i := range src.Addrs {
		p := &src.Addrs[i]
		if p.ENI == b.eni && (slices.Contains(b.ips, p.IP) || inPrefixes(b.prefixes, p.IP)) {
			p.Unusable = v
		}
	}
}

// unassign gives one batch back and settles the store: on success the
// addresses leave the pool (tombstoned, as IMDS still lists them for a
// while). On failure they stay unusable: a timeout or a lost reply may
// hide a done unassign, and handing such an address to a pod would let the
// VPC give it to another instance too. The next pass reads EC2's truth
// (resync) and decides.
func (w *Warmer) unassign(ctx context.Context, b giveBack) error {
	in := &ec2.UnassignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(b.eni)}
	for _, ip := range b.ips {
		in.PrivateIpAddresses = append(in.PrivateIpAddresses, ip.String())
	}
	for _, p := range b.prefixes {
		in.Ipv4Prefixes = append(in.Ipv4Prefixes, p.String())
	}
	if _, err := w.API.UnassignPrivateIpAddresses(ctx, in); err != nil {
		return fmt.Errorf("unassign %s from %s (kept unusable until the next pass checks EC2): %w", describe(b.ips, b.prefixes), b.eni, err)
	}
	fault.Point("warm:after-unassign-before-forget")
	err := w.update(context.WithoutCancel(ctx), func(st *alloc.State, src *section.EC2) error {
		w.forget(src, b)
		return nil
	})
	if err == nil {
		w.say("unassigned %d addresses from %s (%s)", len(b.ips)+16*len(b.prefixes), b.eni, describe(b.ips, b.prefixes))
	}
	return err
}

func (w *Warmer) forget(src *section.EC2, b giveBack) {
	src.Addrs = slices.DeleteFunc(src.Addrs, func(p section.Addr) bool {
		gone := p.ENI == b.eni && p.Unusable && (slices.Contains(b.ips, p.IP) || inPrefixes(b.prefixes, p.IP))
		if gone {
			src.Bury(p.IP, w.now())
		}
		return gone
	})
	for i := range src.ENIs {
		if src.ENIs[i].ID == b.eni {
			src.ENIs[i].Secondary = max(0, src.ENIs[i].Secondary-len(b.ips))
			src.ENIs[i].Prefixes = slices.DeleteFunc(src.ENIs[i].Prefixes, func(p netip.Prefix) bool { return slices.Contains(b.prefixes, p) })
		}
	}
}

// defaultTrimAfter keeps a freshly assigned address for a while.
const defaultTrimAfter = 5 * time.Minute
