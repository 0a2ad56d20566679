package alloc

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"
)

// MaxDemandWait is the longest an ADD may wait on a dry pool (the
// configuration's addWaitSeconds is bounded by it). A demand spanning more
// was not written by a waiting ADD: it is not in force.
const MaxDemandWait = 180 * time.Second

// Live reports whether d is in force at now: between its Since and its
// Until, a span no longer than an ADD may wait. The bounds are wall-clock
// times (they are shared between processes through the store), so the
// clock being stepped back must not make a marker outlive its ADD: one
// recorded "after" now is not in force either, and its waiter, if alive,
// records it again (see the ec2 source's wait).
func (d Demand) Live(now time.Time) bool {
	return !now.Before(d.Since) && now.Before(d.Until) && d.Until.Sub(d.Since) <= MaxDemandWait
}

// FindDemand returns the index of the demand of k, or -1.
func (s *State) FindDemand(k Key) int {
	return slices.IndexFunc(s.Demands, func(d Demand) bool { return d.Key == k })
}

// DropDemand removes the demand of k and reports whether there was one.
func (s *State) DropDemand(k Key) bool {
	i := s.FindDemand(k)
	if i < 0 {
		return false
	}
	s.Demands = slices.Delete(s.Demands, i, i+1)
	if len(s.Demands) == 0 {
		s.Demands = nil
	}
	return true
}

// Waiting counts the demands still in force at now: ADDs waiting for an
// address that `warm` should add on top of its warm target.
func (s *State) Waiting(now time.Time) int {
	n := 0
	for range s.waiting(now) {
		n++
	}
	return n
}

// OldestWaiting is when the longest-waiting ADD in force at now began to
// wait (zero when none waits).
func (s *State) OldestWaiting(now time.Time) time.Time {
	var oldest time.Time
	for d := range s.waiting(now) {
		if oldest.IsZero() || d.Since.Before(oldest) {
			oldest = d.Since
		}
	}
	return oldest
}

// waiting yields the demands in force at now whose ADD has no address yet.
func (s *State) waiting(now time.Time) iter.Seq[Demand] {
	return func(yield func(Demand) bool) {
		for _, d := range s.Demands {
			if d.Live(now) && s.Find(d.Key) < 0 && !yield(d) {
				return
			}
		}
	}
}

// pruneDemands drops demands no longer in force (Live) in memory: the next
// save writes the state without them, and nothing saves just for that (as
// with cooling).
func (m *Manager) pruneDemands(st *State) {
	if len(st.Demands) == 0 {
		return
	}
	now := m.now()
	st.Demands = slices.DeleteFunc(st.Demands, func(d Demand) bool { return !d.Live(now) })
	if len(st.Demands) == 0 {
		st.Demands = nil
	}
}

// Remove is DEL in the store, in one hold of the lock: the allocation of
// k, if any, is handed to unwire and, once unwire returns nil, released
// into cooldown and saved. A demand of an ADD of k still waiting for an
// address is cancelled (the runtime has given up on that ADD), so `warm`
// no longer sizes for it and the waiting ADD, woken, stops instead of
// taking an address for a dead sandbox.
//
// unwire runs under the lock because what it removes is found by address
// (the kernel's rules): only under the lock is a.IP still k's, so that no
// ADD can have been given it. Unrouting after the lock, a DEL stalled past
// the cooldown (while a repeated DEL or gc released k and an ADD took the
// address) would delete the new pod's rules. If unwire fails nothing is
// saved, and its error is returned as is: the address stays allocated, as
// it may still be routed to the old veth.
func (m *Manager) Remove(ctx context.Context, k Key, unwire func(Allocation) error) (a Allocation, found bool, err error) {
	var dropped bool
	var unwireErr error
	err = m.Update(ctx, func(st *State) (bool, error) {
		dropped = st.DropDemand(k)
		i := st.Find(k)
		if i < 0 {
			return dropped, nil
		}
		a, found = st.Allocations[i], true
		if unwireErr = unwire(a); unwireErr != nil {
			return false, unwireErr
		}
		m.releaseIn(st, k, a.IP, m.Cooldown)
		return true, nil
	})
	if unwireErr != nil {
		return a, found, unwireErr
	}
	if err != nil {
		return a, found, fmt.Errorf("remove %s: %w", k, err)
	}
	if dropped || (found && m.Cooldown <= 0) {
		// A cancelled demand, or an address free at once (as Release).
		_ = m.Wake() // best effort: the waiter also looks again on its own
	}
	return a, found, nil
}
