package alloc_test

import (
	"context"
	"testing"
	"time"

	. "github.com/eni-cni/eni-cni/alloc"
)

// TestDemandsBoundedByTheirOwnSpan: a demand counts, and survives saves,
// only between its Since and its Until, and only if that span is one an
// ADD can wait. A wall clock stepped back (a marker recorded "in the
// future") or a hostile state.json (a deadline years away) must not keep
// warm sizing for an ADD that is long gone, nor trim from giving back.
func TestDemandsBoundedByTheirOwnSpan(t *testing.T) {
	m, s, c := newManager(t, "10.0.0.1-10.0.0.5")
	now := c.Now()
	err := m.Update(context.Background(), func(st *State) (bool, error) {
		st.Demands = []Demand{
			{Key: key("ok"), Since: now.Add(-time.Second), Until: now.Add(20 * time.Second)},
			// Recorded an hour "later": the clock has since been stepped back.
			{Key: key("stepped-back"), Since: now.Add(time.Hour), Until: now.Add(time.Hour + 25*time.Second)},
			{Key: key("immortal"), Since: now.Add(-time.Second), Until: now.Add(24 * 365 * time.Hour)},
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := s.Load()
	if n := st.Waiting(now); n != 1 {
		t.Errorf("Waiting = %d, want 1 (only the demand within its span)", n)
	}
	if _, _, err := m.Allocate(context.Background(), req("other")); err != nil {
		t.Fatal(err)
	}
	if d := demands(t, s); len(d) != 1 || d[0].ContainerID != "ok" {
		t.Errorf("demands after a save: %+v, want only ok's", d)
	}
}
