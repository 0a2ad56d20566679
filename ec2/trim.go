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
	"github.com/eni-cni/eni-cni/ec2/pool"
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
	var batches []giveBack
	err := w.update(ctx, func(st *alloc.State, src *SourceState) error {
		src.Dirty = true // saved with the marks, before any unassign call
		c := w.Mgr.Counts(st)
		surplus := min(c.Free-w.Cfg.WarmIPTarget, c.Total-w.Cfg.MinimumIPTarget)
		if surplus <= 0 {
			return nil
		}
		batches = w.pickSurplus(st, src, surplus)
		if len(batches) == 0 {
			src.Dirty = false // nothing will be called: leave the flag as it was
		}
		for _, b := range batches {
			setUnusable(st, b, true)
		}
		return nil
	})
	if err != nil || len(batches) == 0 {
		return err
	}
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
func (w *Warmer) pickSurplus(st *alloc.State, src *SourceState, surplus int) []giveBack {
	ok := w.trimmable(st)
	var out []giveBack
	for i := len(src.ENIs) - 1; i >= 0 && surplus > 0; i-- {
		e := src.ENIs[i]
		b := giveBack{eni: e.ID}
		for _, p := range e.Prefixes {
			addrs := pool.Expand(p)
			if len(addrs) <= surplus && !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return !ok[a] }) {
				b.prefixes = append(b.prefixes, p)
				surplus -= len(addrs)
			}
		}
		for _, p := range st.Pool {
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

// trimmable is the set of pool addresses that may be given back now.
func (w *Warmer) trimmable(st *alloc.State) map[netip.Addr]bool {
	busy := map[netip.Addr]bool{}
	for _, a := range st.Allocations {
		busy[a.IP] = true
	}
	for _, c := range st.Cooling {
		busy[c.IP] = true
	}
	cutoff := w.now().Add(-w.Cfg.TrimAfter)
	ok := map[netip.Addr]bool{}
	for _, p := range st.Pool {
		if !p.Unusable && !busy[p.IP] && !p.AddedAt.After(cutoff) {
			ok[p.IP] = true
		}
	}
	return ok
}

func inPrefixes(ps []netip.Prefix, ip netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(ip) })
}

func setUnusable(st *alloc.State, b giveBack, v bool) {
	for i := range st.Pool {
		p := &st.Pool[i]
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
	err := w.update(context.WithoutCancel(ctx), func(st *alloc.State, src *SourceState) error {
		w.forget(st, src, b)
		return nil
	})
	if err == nil {
		w.say("unassigned %d addresses from %s (%s)", len(b.ips)+16*len(b.prefixes), b.eni, describe(b.ips, b.prefixes))
	}
	return err
}

func (w *Warmer) forget(st *alloc.State, src *SourceState, b giveBack) {
	until := w.now().Add(pool.TombstoneTTL).UTC()
	st.Pool = slices.DeleteFunc(st.Pool, func(p alloc.PoolAddr) bool {
		gone := p.ENI == b.eni && p.Unusable && (slices.Contains(b.ips, p.IP) || inPrefixes(b.prefixes, p.IP))
		if gone {
			src.Tombstones = append(src.Tombstones, Tombstone{IP: p.IP, Until: until})
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
