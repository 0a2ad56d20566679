package ec2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/eni-cni/eni-cni/atomicfile"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// ThrottleMemory remembers, from one warm pass to the next, that EC2
// throttled the last ones (for lastingPause): the timer's passes are processes of their own,
// and without readyWhenFilled the store records a pass's outcome only for
// the ADDs waiting on it (a failed pass nobody waited for leaves the store
// as it was; with it, the pass's Growth says so and the memory is not
// written). Without either, a lasting throttle of the account would be met
// by every node's timer pass every 30 s whatever the last one met.
type ThrottleMemory interface {
	// Load returns the last throttled pass remembered, nil for none.
	Load() (*section.PassOutcome, error)
	// Save remembers o; nil forgets.
	Save(o *section.PassOutcome) error
}

// ThrottledName is the file of the state directory WarmPass remembers
// throttled passes in.
const ThrottledName = "warm.throttled"

// ThrottleFile is a ThrottleMemory in one small file (ThrottledName in the
// state directory), written only when a pass is throttled or the first
// after a throttle gets through: a quiet node's passes write nothing.
type ThrottleFile string

func (f ThrottleFile) Load() (*section.PassOutcome, error) {
	data, err := os.ReadFile(string(f))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f, err)
	}
	var o section.PassOutcome
	if err := json.Unmarshal(data, &o); err != nil {
		return nil, nil // a torn or foreign file remembers nothing: the pass runs
	}
	return &o, nil
}

func (f ThrottleFile) Save(o *section.PassOutcome) error {
	if o == nil {
		if err := os.Remove(string(f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", f, err)
		}
		return nil
	}
	data, err := json.Marshal(o)
	if err != nil {
		return err
	}
	// Losing it in a power cut costs one pass into the throttle: no sync.
	return atomicfile.Writer{NoSync: true}.WriteFile(string(f), data, 0o600)
}

// MemThrottles is a ThrottleMemory in memory, for a Warmer that runs its
// passes in one process (the fleet simulation).
type MemThrottles struct {
	mu sync.Mutex
	o  *section.PassOutcome
}

func (m *MemThrottles) Load() (*section.PassOutcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.o, nil
}

func (m *MemThrottles) Save(o *section.PassOutcome) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.o = o
	return nil
}

// A pass nobody waits for (the timer's, every 30 s) after lastingThrottle
// throttled passes in a row skips its EC2 work for lastingPause: the
// account's buckets stay empty, and the fleet's timers meeting them every
// 30 s only keep them so. It grows from lastingBase to lastingCap. Fewer
// throttles in a row pause no such pass (the 30 s of the timer already
// exceed the pause of ADDs, section.ThrottledPause), nor an operator's
// `eni-cni warm` run after one.
const (
	lastingThrottle = 3
	lastingBase     = time.Minute
	lastingCap      = 10 * time.Minute
)

// lastingPause is how long passes nobody waits for pause after the
// throttled pass o of instance id: nothing below lastingThrottle passes in
// a row, then lastingBase doubling to lastingCap, drawn from the upper
// half by the instance's ID so that a fleet throttled together comes back
// spread.
func lastingPause(o *section.PassOutcome, id string) time.Duration {
	if o == nil || o.Result != section.PassThrottled || o.Streak < lastingThrottle {
		return 0
	}
	d := lastingCap
	if n := o.Streak - lastingThrottle; n < 8 {
		d = min(lastingCap, lastingBase<<n)
	}
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", id, o.Streak)
	return d/2 + time.Duration(uint64(h.Sum32())%uint64(d/2+1))
}

// throttlePause reports, and says, that this pass skips its EC2 work: with
// ADDs waiting, while the pause after the throttled pass they recorded
// runs (as they do, section.PassOutcome.Pause); with none, while the
// lastingPause after this boot's throttled passes runs (the growth
// readyWhenFilled records, or what the Throttles memory keeps). The pass
// after the pause does the work, IMDS's look included.
func (w *Warmer) throttlePause(ctx context.Context) (bool, error) {
	v, err := w.snapshot(ctx)
	if err != nil {
		return false, err
	}
	now, id := w.now(), v.src.InstanceID
	if v.st.Waiting(now) > 0 {
		lp := v.src.LastPass
		if !lp.Pausing(id, now) {
			return false, nil
		}
		w.say("EC2 throttled the last %d passes in a row: no EC2 call until %s", lp.Streak, lp.At.Add(lp.Pause(id)).UTC().Format("15:04:05"))
		return true, nil
	}
	if v.counts.Total == 0 || (w.Cfg.ReadyWhenFilled && v.src.FilledBoot != w.Mgr.BootID) {
		// A node with nothing, or NotReady until its pool is filled: its
		// pass is what its pods, or the scheduler, wait for; it yields
		// to nobody (the back-off of its calls still paces it).
		return false, nil
	}
	o := v.src.Growth
	if o == nil || o.Boot != w.Mgr.BootID {
		if o, err = w.lastThrottled(); err != nil {
			return false, err
		}
	}
	d := lastingPause(o, id)
	if d == 0 || o.At.After(now) || !now.Before(o.At.Add(d)) {
		return false, nil
	}
	w.say("EC2 throttled the last %d passes in a row: no EC2 call until %s", o.Streak, o.At.Add(d).UTC().Format("15:04:05"))
	return true, nil
}

func (w *Warmer) lastThrottled() (*section.PassOutcome, error) {
	if w.Throttles == nil {
		return nil, nil
	}
	return w.Throttles.Load()
}

// rememberThrottle keeps the streak of throttled passes for the next
// pass (see ThrottleMemory).
func (w *Warmer) rememberThrottle(result string) error {
	if w.Cfg.ReadyWhenFilled {
		return nil // the pass's Growth, in the store, says it
	}
	last, err := w.lastThrottled()
	if err != nil || w.Throttles == nil {
		return err
	}
	if result != section.PassThrottled {
		if last == nil {
			return nil
		}
		return w.Throttles.Save(nil)
	}
	o := &section.PassOutcome{At: w.now().UTC(), Result: result, Streak: 1}
	if last != nil {
		o.Streak = last.Streak + 1
	}
	return w.Throttles.Save(o)
}
