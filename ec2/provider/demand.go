package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/lockfile"
)

// How an ADD waits on a dry ec2 pool.
const (
	// recheckEvery bounds each sleep: a waiter looks at the store at least
	// this often even if no wake-up comes (a lost event, a pass by an
	// older binary).
	recheckEvery = 5 * time.Second
	// pollEvery: how often a waiter that cannot watch the state
	// directory looks at the store.
	pollEvery = time.Second
	// triggerTimeout: a start that has not become a running pass by then
	// is tried again.
	triggerTimeout = 5 * time.Second
	// passStall: a pass marked as running for longer than this died.
	passStall = 60 * time.Second
	// failFresh: after a warm pass failed this recently, an ADD on a dry
	// pool fails at once with its reason instead of starting another pass
	// into the same wall (a denied role, a full subnet). Not after a
	// throttled pass: see throttledPause.
	failFresh = 10 * time.Second
	// throttledBase and throttledCap: the pause between a throttled pass
	// and the next one started for the ADDs waiting on it doubles from
	// one to the other, before the pass's pace scales it
	// (section.PassOutcome.Pause).
	throttledBase = section.ThrottledBase
	throttledCap  = section.ThrottledCap
)

// imdsLockName is held by the one ADD reading IMDS on a dry pool.
const imdsLockName = "imds.lock"

// ErrWithdrawn: the attachment was deleted while its ADD waited.
var ErrWithdrawn = errors.New("the attachment was deleted (DEL) while its ADD waited for an address")

// lookIMDS merges addresses IMDS lists and the store does not know (put
// there by something other than warm) and returns how many. Only one ADD
// at a time looks: in a burst on a dry pool the others go straight to
// waiting, which costs them nothing, instead of each starting the full
// build and reading IMDS.
func (s EC2) lookIMDS(ctx context.Context) int {
	if d, ok := s.Mgr.Store.(interface{ Dir() string }); ok {
		fl, err := lockfile.Open(filepath.Join(d.Dir(), imdsLockName), os.O_CREATE|os.O_RDONLY)
		if err != nil {
			return 0
		}
		defer fl.Close()
		if ok, err := fl.TryLock(); err != nil || !ok {
			return 0
		}
	}
	n, err := s.Refresh(ctx)
	if err != nil {
		return 0
	}
	return n
}

// waitResult is what the wait did, for the ADD's log line and messages.
type waitResult struct {
	checkedIdentity bool
	lookedIMDS      bool
	waited          time.Duration
	trigger         string // how the warm pass was started, if this ADD started one
	err             error  // starting it failed
	watchErr        error  // the wake-up watch failed: the waiter polled
}

// attrsIf is attrs when the ADD found the pool dry (w is its watch).
func (r waitResult) attrsIf(w alloc.Watcher) []any {
	if w == nil {
		return nil
	}
	return r.attrs()
}

func (r waitResult) attrs() []any {
	a := []any{"waitedMs", r.waited.Milliseconds()}
	if r.trigger != "" {
		a = append(a, "warm", r.trigger)
	}
	if r.err != nil {
		a = append(a, "warmErr", r.err.Error())
	}
	if r.watchErr != nil {
		a = append(a, "watchErr", r.watchErr.Error())
	}
	return a
}

// step is the decision of one look at the store.
type step struct {
	a        alloc.Allocation
	existed  bool
	got      bool          // a has the attachment's address
	fail     error         // give up with this
	imds     bool          // look at IMDS before recording the demand
	identity bool          // check the instance's identity with IMDS first
	trigger  bool          // start a warm pass, after the lock is released
	direct   bool          // start it as a process of its own, not through systemd
	next     time.Time     // look again at the latest then
	recorded *alloc.Demand // the demand this look recorded for the ADD
}

// Allocate is ADD's allocation on an ec2 pool that may wait: it takes a
// free address, or, in the same locked read-modify-write that finds the pool
// dry, records the ADD's demand; then it starts a warm pass unless one is
// on its way, and waits (bounded by addWaitSeconds) to be woken by warm, a
// cooldown ending or the safety recheck, and tries again. One lock round on
// a dry pool, not two: in a burst, every waiting ADD queues for the lock
// that warm also needs. It ends with an address, or with code 11 and the
// reason: the node is full (with kubelet's maxPods for it), the last warm
// pass failed (and why), the attachment was deleted meanwhile, or the time
// is up. attrs are for the ADD's log line (none if it did not wait).
func (s EC2) Allocate(ctx context.Context, req alloc.Request) (alloc.Allocation, bool, *section.EC2, []any, error) {
	var res waitResult
	start := s.clock()
	until := start.Add(s.Cfg.AddWait)
	var w alloc.Watcher
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	// mine is the demand this ADD recorded, nil before it has one in the
	// store.
	var mine *alloc.Demand
	for first := true; ; {
		var st step
		var sec *section.EC2
		err := s.Mgr.Update(ctx, func(state *alloc.State) (bool, error) {
			sec = state.EC2
			if mine != nil && state.FindDemand(req.Key) < 0 {
				// Gone: a DEL withdrew it, and then this ADD must not take
				// an address for the deleted sandbox, even if one is free
				// now; or the wall clock was stepped and the save before
				// this look pruned it (its bounds are wall-clock times, the
				// wait is not), and then this ADD records it again.
				if mine.Live(s.Mgr.Clock()) {
					st = step{fail: fmt.Errorf("allocate ip for %s: %w; %w", req.Key, alloc.ErrPoolExhausted, ErrWithdrawn)}
					return false, nil
				}
				mine = nil
			}
			a, existed, changed, allocErr := s.Mgr.AllocateIn(state, req)
			if errors.Is(allocErr, ErrIdentityUnchecked) && !res.checkedIdentity {
				st = step{identity: true}
				return false, nil
			}
			if allocErr == nil || !errors.Is(allocErr, alloc.ErrPoolExhausted) {
				st = step{a: a, existed: existed, got: allocErr == nil}
				return changed, allocErr
			}
			if w == nil {
				// Before the demand is recorded, so that no wake-up
				// between this look and the sleep is lost. Without a
				// watch (no inotify instance left) the waiter looks on
				// its own, every pollEvery.
				if w, res.watchErr = s.Mgr.Watch(); res.watchErr != nil {
					w = alloc.PollWatcher{Every: pollEvery}
				}
			}
			st, changed = s.look(state, req, allocErr, first, mine == nil, start, until, res)
			return changed, nil
		})
		if err == nil && st.recorded != nil {
			mine = st.recorded
		}
		switch {
		case err != nil:
			return alloc.Allocation{}, false, nil, res.attrsIf(w), fmt.Errorf("allocate ip for %s: %w", req.Key, err)
		case st.got:
			res.waited = s.clock().Sub(start)
			return st.a, st.existed, sec, res.attrsIf(w), nil
		case st.fail != nil:
			res.waited = s.clock().Sub(start)
			return alloc.Allocation{}, false, nil, res.attrsIf(w), st.fail
		case st.identity:
			// First ADD of a boot: compare the store with IMDS (outside
			// the lock), then try again.
			res.checkedIdentity = true
			if _, err := s.Refresh(ctx); err != nil {
				return alloc.Allocation{}, false, nil, nil, fmt.Errorf("allocate ip for %s: %w (%w)", req.Key, ErrIdentityUnchecked, err)
			}
			continue
		case st.imds:
			// Outside the lock: it reads IMDS (the lean build execs its
			// full build for that). No demand recorded yet: the next look
			// is still the first.
			res.lookedIMDS = true
			s.lookIMDS(ctx)
			continue
		case st.trigger:
			res.trigger, res.err = s.Warm.StartWarm(ctx, s.Cfg, st.direct)
		}
		first = false
		if _, err := w.Wait(ctx, max(st.next.Sub(s.clock()), time.Millisecond)); err != nil {
			return alloc.Allocation{}, false, nil, res.attrsIf(w), fmt.Errorf("allocate ip for %s: wait for an address: %w", req.Key, err)
		}
	}
}

// look is one look at a dry pool, under the lock: decide whether to give
// up, what to record and when to look again. changed reports whether st
// must be saved.
// record: the ADD has no demand in the store yet (or no longer: see
// allocate).
func (s EC2) look(st *alloc.State, req alloc.Request, allocErr error, first, record bool, start, until time.Time, res waitResult) (step, bool) {
	changed := false
	sec := st.EC2
	if sec == nil { // a node warm never described: no limits, no outcome
		sec = &section.EC2{}
	}
	now := s.clock()
	cause := fmt.Errorf("allocate ip for %s: %w", req.Key, allocErr)
	if reason := s.hopeless(st, sec, now, start, until, first); reason != "" {
		return step{fail: fmt.Errorf("%w; %s", cause, reason)}, st.DropDemand(req.Key)
	}
	// (The demand itself expires at until: the time is up, not withdrawn.
	// It may have been pruned from st already; the save writes it out.)
	if !now.Before(until) {
		st.DropDemand(req.Key)
		return step{fail: fmt.Errorf("%w; %s", cause, s.timedOut(sec, start, res))}, true
	}
	i := st.FindDemand(req.Key)
	if first && st.Waiting(now) == 0 && !res.lookedIMDS {
		// Addresses assigned by something else show in IMDS first: by
		// the launch template on a node warm never described (its first
		// pod is then served without waiting for a pass and its EC2
		// calls), or since the last pass. Not when ADDs already wait (one
		// of them looked).
		return step{imds: true}, false
	}
	var recorded *alloc.Demand
	if record || i < 0 {
		// One demand per attachment: one left by an earlier ADD of it
		// (killed while waiting) would be counted twice and outlive this
		// ADD's fulfilment. Until is now plus the time left, not until's
		// wall time: the wall clock may have been stepped since start.
		st.DropDemand(req.Key)
		d := alloc.Demand{Key: req.Key, Since: now.UTC(), Until: now.Add(until.Sub(now)).UTC()}
		st.Demands = append(st.Demands, d)
		i, changed, recorded = len(st.Demands)-1, true, &d
	}
	out := step{next: nextLook(st, sec, now, until), recorded: recorded}
	// At the hard limit (waiting for a cooldown to end) warm cannot help.
	if s.Warm != nil && !sec.AtHardLimitOf(s.Cfg.Warm) && needTrigger(st, sec, now, s.passAlive(sec)) {
		// A start that did not become a pass is not asked of systemd
		// again: `systemctl start --no-block` succeeds though the unit then
		// runs nothing (its start limit hit, its condition failing, its
		// binary gone).
		out.direct = startLost(st, sec, now)
		st.Demands[i].TriggeredAt = now.UTC()
		out.trigger, changed = true, true
	}
	return out, changed
}

// hopeless returns why waiting cannot help, or "".
func (s EC2) hopeless(st *alloc.State, sec *section.EC2, now, start, until time.Time, first bool) string {
	if sec.AtHardLimitOf(s.Cfg.Warm) && !coolingEndsBy(st, now, until) {
		return s.nodeFull(st, sec)
	}
	lp := sec.LastPass
	if lp == nil {
		return ""
	}
	// A pass that ended while this ADD waited. An outcome stamped after
	// now is from before a backward step of the wall clock: neither ended
	// meanwhile nor fresh, however long the step.
	future := lp.At.After(now)
	ended := lp.At.After(start) && !future
	switch {
	case lp.Result == section.PassThrottled:
		return "" // waited out: see throttledPause
	case lp.Failed() && (ended || (first && !future && now.Sub(lp.At) < failFresh)):
		return fmt.Sprintf("the warm pass of %s failed (%s); eni-cni warm retries on its timer", lp.At.Local().Format(time.TimeOnly), lp.Describe())
	case lp.Result == section.PassInstanceLimit && ended && !coolingEndsBy(st, now, until):
		return "warm could add no address: " + lp.Describe()
	}
	return ""
}

// nodeFull is the message of a node at its hard limit: it cannot address
// more pods, and kubelet's maxPods should say so to the scheduler.
func (s EC2) nodeFull(st *alloc.State, sec *section.EC2) string {
	l := *sec.Limits
	maxENIs := s.Cfg.Warm.MaxENIs
	limit := fmt.Sprintf("all %d ENIs %s allows", l.ENILimit(maxENIs), sec.InstanceType)
	if maxENIs > 0 && maxENIs < l.MaxENIs {
		limit = fmt.Sprintf("all %d ENIs maxENIs allows (%s takes %d)", maxENIs, sec.InstanceType, l.MaxENIs)
	}
	return fmt.Sprintf("node is full: %s hold all the addresses they can (%d pod addresses, %d allocated); "+
		"set kubelet's maxPods to %d for this instance type and configuration so that no more pods are scheduled here (eni-cni max-pods)",
		limit, section.PodAddressesOf(l, s.Cfg.Warm), len(st.Allocations), section.MaxPodsOf(l, s.Cfg.Warm))
}

// timedOut says why the wait ended without an address.
func (s EC2) timedOut(sec *section.EC2, start time.Time, res waitResult) string {
	msg := fmt.Sprintf("waited %s for eni-cni warm", s.Cfg.AddWait)
	if res.trigger != "" {
		msg += " (started as " + res.trigger + ")"
	}
	if res.err != nil {
		msg += "; starting it failed: " + res.err.Error()
	}
	if lp := sec.LastPass; lp != nil && lp.At.After(start) {
		if lp.Failed() {
			return msg + "; its last pass ended " + lp.Describe()
		}
		return msg + "; its last pass ended " + lp.Describe() + " but left no address for this pod (other pods took them)"
	}
	if sec.PassPID > 0 && !sec.PassStartedAt.IsZero() {
		state := "still runs"
		if !s.passAlive(sec)(sec.PassPID) {
			state = "died without an outcome"
		}
		return msg + fmt.Sprintf("; the pass that began at %s (pid %d) %s: check `eni-cni warm` and its log",
			sec.PassStartedAt.Local().Format(time.TimeOnly), sec.PassPID, state)
	}
	return msg + "; no pass finished meanwhile: check `eni-cni warm` and its log"
}

// needTrigger reports whether a warm pass must be started for the waiting
// ADDs: none was started for them, or one ended since the last start and
// they still wait, or the pass started for them died (its process is gone:
// killed, OOM), or the last start has not become a running pass. alive
// reports whether a process is running.
func needTrigger(st *alloc.State, sec *section.EC2, now time.Time, alive func(pid int) bool) bool {
	last := lastTrigger(st, now)
	switch {
	case pausing(sec, now):
		return false
	case last.IsZero():
		return true
	case sec.LastPass != nil && sec.LastPass.At.After(last):
		return true
	case !sec.PassStartedAt.Before(last) && sec.PassPID > 0 && !alive(sec.PassPID):
		return true // the pass started for them died without an outcome
	case !sec.PassStartedAt.Before(last) && now.Sub(sec.PassStartedAt) < passStall:
		return false // the pass started for them is running
	}
	return now.Sub(last) >= triggerTimeout
}

// lastTrigger is when a waiting ADD last started a warm pass (zero: none).
func lastTrigger(st *alloc.State, now time.Time) time.Time {
	var last time.Time
	for _, d := range st.Demands {
		if d.Live(now) && d.TriggeredAt.After(last) {
			last = d.TriggeredAt
		}
	}
	return last
}

// startLost reports whether the last start of a pass for the waiting ADDs
// has become no pass at all: none marked itself running or ended since.
func startLost(st *alloc.State, sec *section.EC2, now time.Time) bool {
	last := lastTrigger(st, now)
	return !last.IsZero() && sec.PassStartedAt.Before(last) && (sec.LastPass == nil || !sec.LastPass.At.After(last))
}

// coolingEndsBy reports whether a cooling address becomes usable before t.
func coolingEndsBy(st *alloc.State, now, t time.Time) bool {
	for _, c := range st.Cooling {
		if c.Until.After(now) && c.Until.Before(t) {
			return true
		}
	}
	return false
}

// A throttled pass fails none of the ADDs waiting on it: EC2 throttles
// per account, its buckets refill within seconds, and a failed ADD comes
// back from kubelet to start the next pass at once, into the same empty
// bucket, with every other node doing the same. The ADDs wait out their
// own time instead, and the next pass for them starts after the pause of
// section.EC2.ThrottledPause.
func throttledPause(sec *section.EC2) time.Duration { return sec.ThrottledPause() }

func pausing(sec *section.EC2, now time.Time) bool { return sec.Pausing(now) }

// pausingAfter is pausing after outcome lp of instance id's pass.
func pausingAfter(lp *section.PassOutcome, id string, now time.Time) bool {
	return lp.Pausing(id, now)
}

// nextLook is when to look again without a wake-up: the end of a cooldown
// (nothing is written when one ends) or of the pause after a throttled
// pass, the safety recheck or the deadline.
func nextLook(st *alloc.State, sec *section.EC2, now, until time.Time) time.Time {
	next := now.Add(recheckEvery)
	if until.Before(next) {
		next = until
	}
	if pausing(sec, now) {
		if end := sec.LastPass.At.Add(throttledPause(sec)); end.Before(next) {
			next = end
		}
	}
	for _, c := range st.Cooling {
		if c.Until.After(now) && c.Until.Before(next) {
			next = c.Until
		}
	}
	return next
}

// processAlive reports whether process pid runs: it exists (kill(pid, 0):
// EPERM means it does, ESRCH that it is gone) and is not a zombie (a pass
// killed while its parent, the ADD that started it, has not reaped it).
func (s EC2) processAlive(pid int) bool {
	if s.Alive != nil {
		return s.Alive(pid)
	}
	if errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
		return false
	}
	return !zombie(pid)
}

// passAlive returns whether a process runs the pass marked in sec: pid
// runs (processAlive) and began before the mark (a pass marks itself
// running after it starts). A process that began after the mark was given
// the PID of a pass that died since: PIDs wrap (pid_max is 32768 on many
// kernels, and a busy node forks thousands a minute), and trusting it kept
// the waiters from starting another pass for passStall, beyond their whole
// wait. The process's start is on the boot clock and the mark on the wall
// clock: a wall clock stepped back since the mark makes the process look
// older (trusted, as before this check), one stepped forward may make a
// running pass look new, which costs one more start that warm.lock turns
// away.
func (s EC2) passAlive(sec *section.EC2) func(pid int) bool {
	return func(pid int) bool {
		if !s.processAlive(pid) {
			return false
		}
		if s.Alive != nil || sec.PassStartedAt.IsZero() {
			return true
		}
		age, ok := processAge(pid)
		return !ok || !time.Now().Add(-age).After(sec.PassStartedAt.Add(passStartSlack))
	}
}

// passStartSlack covers the resolution of a process's start time (clock
// ticks) and of the conversion between the clocks.
const passStartSlack = time.Second

// zombie reports whether /proc says pid has exited and awaits its reaping.
func zombie(pid int) bool {
	f, ok := procStat(pid)
	return ok && len(f) > 0 && f[0] == "Z"
}

// processAge is how long ago, on the boot clock, process pid began.
func processAge(pid int) (time.Duration, bool) {
	f, ok := procStat(pid)
	// starttime is field 22 of the line, the 20th after the command name,
	// in clock ticks since boot (USER_HZ, 100 on Linux).
	if !ok || len(f) < 20 {
		return 0, false
	}
	ticks, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, false
	}
	return alloc.BootClock() - time.Duration(ticks)*(time.Second/100), true
}

// procStat returns the fields of /proc/<pid>/stat after the command name
// (the state first).
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(b[i+1:])), true
}

func (s EC2) clock() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// exhausted explains an empty pool when ADD does not wait (addWaitSeconds 0).
func (s EC2) exhausted(err error) error {
	return fmt.Errorf("%w; IMDS lists no new addresses either: check that `eni-cni warm` runs (eni-cni-warm.timer) and its output", err)
}
