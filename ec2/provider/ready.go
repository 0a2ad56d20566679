package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/lockfile"
)

// ErrPoolNotReady: the ec2 pool cannot give the pods a scheduler would send
// to the node their addresses now (STATUS with readyWhenFilled).
var ErrPoolNotReady = errors.New("the ec2 pool is not ready for pods")

const (
	// statusStartEvery bounds how often a not-ready STATUS starts a warm
	// pass (kubelet asks for the runtime's status every 5 s, and a pass
	// may take longer): as often as a dry ADD starts one after a failed
	// pass (failFresh).
	statusStartEvery = failFresh
	// throttledStuck throttled passes in a row mean the account's buckets
	// stay empty: the pool cannot grow for now.
	throttledStuck = 3
	// statusStampName holds when STATUS last started a pass, under its
	// own lock (never the state's: STATUS must not queue behind ADDs).
	statusStampName = "status.warm"
)

// TargetsMet reports whether a pool with counts c holds what warm keeps
// ready: warmIPTarget free addresses and minimumIPTarget in all (of
// IPv4 on a dual-stack network, see Sized), and on a dual-stack network an
// IPv6 address to go with them.
func TargetsMet(c alloc.Counts, w section.WarmConfig) bool {
	if w.DualStack && !has6(c) {
		return false
	}
	c = Sized(c)
	return c.Free >= w.WarmIPTarget && c.Total >= w.MinimumIPTarget
}

// Sized are the counts of c warm's targets and readiness are about: on a
// dual-stack network those of IPv4, whose addresses warm assigns one ENI
// slot at a time. The IPv6 /80's 2^48 addresses would meet any target
// and hide an IPv4 side run dry, and each pod needs one of both.
func Sized(c alloc.Counts) alloc.Counts {
	if c4, ok := c.Families.Of(alloc.IPv4); ok {
		return c4
	}
	return c
}

// has6 reports whether the pool has an IPv6 address free: the /80 is
// delegated (it is never used up).
func has6(c alloc.Counts) bool {
	c6, ok := c.Families.Of(alloc.IPv6)
	return ok && c6.Free > 0
}

// PoolReady reports whether an ec2 pool can give the pods a scheduler
// would send it their addresses: nil if it can, else why not
// (ErrPoolNotReady). It is pure, for STATUS and the fleet simulation: st
// is the state as Manager.Peek returns it (this boot's allocations,
// cooling ended), c its counts (Manager.Counts), bootID the node's boot.
//
// Not ready: the store not yet checked against the instance in this boot,
// the pool not filled in this boot (warm has not yet reached its targets,
// nor did IMDS show as many), or nothing free nor cooling while the last
// pass of this boot says the pool cannot grow (subnet full, IAM denied,
// IMDS or EC2 failing, throttled throttledStuck times in a row). A pool
// filled and then drained by pods stays ready while it can grow: the pods
// sent to it wait for warm (addWaitSeconds). A dual-stack pool is ready
// when both families can serve: the /80 delegated, and the IPv4 side by
// the rules above (its counts, Sized).
func PoolReady(st *alloc.State, c alloc.Counts, w section.WarmConfig, bootID string) error {
	sec := st.EC2
	if sec == nil {
		sec = &section.EC2{}
	}
	switch {
	case sec.InstanceID == "":
		return fmt.Errorf("%w: no warm pass has described this instance yet%s", ErrPoolNotReady, lastGrowth(sec, bootID))
	case sec.VerifiedBoot != bootID:
		return fmt.Errorf("%w: the store has not been checked against this instance (IMDS) since boot%s", ErrPoolNotReady, lastGrowth(sec, bootID))
	case w.DualStack && !has6(c):
		// Until warm delegates the /80, or again when EC2 took it away
		// (the pass that finds it gone asks for another).
		return fmt.Errorf("%w: no IPv6 prefix on the primary ENI for the pods' IPv6 addresses%s", ErrPoolNotReady, lastGrowth(sec, bootID))
	}
	filled := sec.FilledBoot == bootID || TargetsMet(c, w)
	c = Sized(c)
	switch {
	case !filled:
		target := fmt.Sprintf("warmIPTarget %d", w.WarmIPTarget)
		if w.MinimumIPTarget > 0 {
			target += fmt.Sprintf(", minimumIPTarget %d", w.MinimumIPTarget)
		}
		return fmt.Errorf("%w: the pool has not been filled since boot (%d free of %d addresses; %s)%s",
			ErrPoolNotReady, c.Free, c.Total, target, lastGrowth(sec, bootID))
	case c.Free > 0 || c.Cooling > 0:
		return nil
	case sec.AtHardLimitOf(w):
		// A full node: its pods hold every address the instance can
		// have. kubelet's maxPods (eni-cni max-pods) keeps pods off it;
		// NotReady would have its pods evicted (the not-ready NoExecute
		// taint, after 300 s by default).
		return nil
	}
	if g := sec.Growth; g != nil && g.Boot == bootID && cannotGrow(g) {
		return fmt.Errorf("%w: no free address (%d allocated) and the pool cannot grow: the warm pass of %s ended %s",
			ErrPoolNotReady, c.Allocated, g.At.Local().Format(time.TimeOnly), g.Describe())
	}
	return nil
}

// cannotGrow reports whether a pass ended so that the next one will not
// add addresses either, until something changes outside the node.
func cannotGrow(g *section.PassOutcome) bool {
	switch g.Result {
	case section.PassSubnetFull, section.PassDenied, section.PassFailed:
		return true
	case section.PassThrottled:
		return g.Streak >= throttledStuck
	}
	return false
}

// lastGrowth is, for a message, how the last pass of this boot that did
// not fill the pool ended ("" if none did).
func lastGrowth(sec *section.EC2, bootID string) string {
	g := sec.Growth
	if g == nil || g.Boot != bootID || g.Result == section.PassDone {
		return ""
	}
	return fmt.Sprintf("; the warm pass of %s ended %s", g.At.Local().Format(time.TimeOnly), g.Describe())
}

// Ready is STATUS. With readyWhenFilled it reports a pool that is not
// ready for pods (PoolReady) as not ready, and with act starts what makes
// it ready; without readyWhenFilled, only an empty pool and no IMDS is a
// fault.
func (s EC2) Ready(ctx context.Context, st *alloc.State, act bool) error {
	if !s.Cfg.Warm.ReadyWhenFilled {
		return s.reachable(ctx, st)
	}
	notReady := PoolReady(st, s.Mgr.Counts(st), s.Cfg.Warm, s.Mgr.BootID)
	if notReady == nil || !act {
		return notReady
	}
	return s.progress(ctx, st, notReady)
}

// progress makes a pool that is not ready become ready by itself: no pod
// is sent to a NotReady node, so no ADD starts a pass for it, and the
// timer may not be installed yet or its next tick a minute away. Not
// while ADDs wait (they start passes for themselves), nor in the pause
// after throttled passes, and at most once per statusStartEvery: a look at
// IMDS while the store is unchecked in this boot (the addresses a launch
// template assigned make the pool ready with no EC2 call), then a warm
// pass, started as a dry ADD starts it and not waited for (the next
// STATUS sees what it did). The returned error is notReady with what was
// done about it.
func (s EC2) progress(ctx context.Context, st *alloc.State, notReady error) error {
	now := s.clock()
	sec := st.EC2
	if sec == nil {
		sec = &section.EC2{}
	}
	if n := st.Waiting(now); n > 0 {
		return fmt.Errorf("%w; %d ADDs wait for the warm pass they started", notReady, n)
	}
	if pausing(sec, now) || pausingAfter(sec.Growth, sec.InstanceID, now) {
		return fmt.Errorf("%w; the next warm pass waits out EC2's throttling", notReady)
	}
	stamp, last, err := s.statusTurn(now)
	if err != nil {
		return fmt.Errorf("%w; starting a warm pass: %w", notReady, err)
	}
	if stamp == nil {
		return fmt.Errorf("%w; a warm pass was started for it at %s", notReady, last.Local().Format(time.TimeOnly))
	}
	defer stamp.Close()
	if sec.VerifiedBoot != s.Mgr.BootID {
		if _, err := s.Refresh(ctx); err != nil {
			notReady = fmt.Errorf("%w; reading IMDS: %w", notReady, err)
		} else if fresh, c, err := s.Mgr.Peek(); err == nil {
			if notReady = PoolReady(fresh, c, s.Cfg.Warm, s.Mgr.BootID); notReady == nil {
				return nil
			}
		}
	}
	if s.Warm == nil {
		return notReady
	}
	how, err := s.Warm.StartWarm(ctx, s.Cfg, false)
	if err != nil {
		return fmt.Errorf("%w; %w", notReady, err)
	}
	return fmt.Errorf("%w; started a warm pass (%s)", notReady, how)
}

// statusTurn decides whether this STATUS starts a pass: it returns the
// stamp file, locked and already stamped with now, if so; nil and when the
// last one did if another STATUS did within statusStartEvery, or is doing
// so right now (its lock is held). The caller closes the stamp when done.
func (s EC2) statusTurn(now time.Time) (*lockfile.File, time.Time, error) {
	if err := os.MkdirAll(s.Cfg.StateDir, 0o700); err != nil {
		return nil, time.Time{}, err
	}
	f, err := lockfile.Open(filepath.Join(s.Cfg.StateDir, statusStampName), os.O_CREATE|os.O_RDWR)
	if err != nil {
		return nil, time.Time{}, err
	}
	ok, err := f.TryLock()
	if err != nil || !ok {
		f.Close()
		return nil, now, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		f.Close()
		return nil, time.Time{}, err
	}
	// An unreadable stamp (empty, hand-edited) is no start.
	last, perr := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
	if perr == nil && !section.Elapsed(now, last, statusStartEvery) {
		f.Close()
		return nil, last, nil
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, time.Time{}, err
	}
	if _, err := f.WriteAt([]byte(now.UTC().Format(time.RFC3339Nano)+"\n"), 0); err != nil {
		f.Close()
		return nil, time.Time{}, err
	}
	return f, time.Time{}, nil
}
