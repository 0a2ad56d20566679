package alloc

import (
	"context"
	"fmt"
	"slices"
	"time"
)

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
	for _, d := range s.Demands {
		if now.Before(d.Until) && s.Find(d.Key) < 0 {
			n++
		}
	}
	return n
}

// pruneDemands drops expired demands in memory: the next save writes the
// state without them, and nothing saves just for that (as with cooling).
func (m *Manager) pruneDemands(st *State) {
	if len(st.Demands) == 0 {
		return
	}
	now := m.now()
	st.Demands = slices.DeleteFunc(st.Demands, func(d Demand) bool { return !now.Before(d.Until) })
	if len(st.Demands) == 0 {
		st.Demands = nil
	}
}

// Withdraw is DEL's look-up of k: the allocation, if any, and the demand of
// an ADD of k still waiting for an address is cancelled (the runtime has
// given up on that ADD), so `warm` no longer sizes for it and the waiting
// ADD, woken, stops instead of taking an address for a dead sandbox.
func (m *Manager) Withdraw(ctx context.Context, k Key) (a Allocation, found bool, err error) {
	var dropped bool
	err = m.Update(ctx, func(st *State) (bool, error) {
		if i := st.Find(k); i >= 0 {
			a, found = st.Allocations[i], true
		}
		dropped = st.DropDemand(k)
		return dropped, nil
	})
	if err != nil {
		return Allocation{}, false, fmt.Errorf("look up %s: %w", k, err)
	}
	if dropped {
		_ = m.Wake() // best effort: the waiter also looks again on its own
	}
	return a, found, nil
}
