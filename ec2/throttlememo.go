package ec2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/eni-cni/eni-cni/atomicfile"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// ThrottleMemory remembers, from one warm pass to the next, that EC2
// throttled the last ones: the timer's passes are processes of their own,
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

// throttlePause reports, and says, that the pause after a throttled pass
// still runs (section.PassOutcome.Pause): the one ADDs waiting on the pool
// recorded in the store, the growth of this boot's last pass, or the one
// the timer's passes remember. The pass after the pause does the work,
// IMDS's look included.
func (w *Warmer) throttlePause(ctx context.Context) (bool, error) {
	v, err := w.snapshot(ctx)
	if err != nil {
		return false, err
	}
	remembered, err := w.lastThrottled()
	if err != nil {
		return false, err
	}
	now, id := w.now(), v.src.InstanceID
	var lp *section.PassOutcome
	for _, o := range []*section.PassOutcome{v.src.LastPass, v.src.Growth, remembered} {
		if o != nil && (o != v.src.Growth || o.Boot == w.Mgr.BootID) && o.Pausing(id, now) {
			lp = o
			break
		}
	}
	if lp == nil {
		return false, nil
	}
	w.say("EC2 throttled the last %d passes in a row: no EC2 call until %s", lp.Streak, lp.At.Add(lp.Pause(v.src.InstanceID)).UTC().Format("15:04:05"))
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
