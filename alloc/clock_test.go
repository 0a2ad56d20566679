package alloc_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	. "github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
)

// clocks are a wall clock and a boot clock that tests move separately: the
// wall clock can step either way, the boot clock only advances.
type clocks struct {
	wall time.Time
	boot time.Duration
}

func (c *clocks) Now() time.Time           { return c.wall }
func (c *clocks) Boot() time.Duration      { return c.boot }
func (c *clocks) Advance(d time.Duration)  { c.wall, c.boot = c.wall.Add(d), c.boot+d }
func (c *clocks) StepWall(d time.Duration) { c.wall = c.wall.Add(d) }
func newClocks() *clocks {
	return &clocks{wall: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), boot: time.Hour}
}
func (c *clocks) manager(m *Manager) *Manager { m.Now, m.Boot = c.Now, c.Boot; return m }

func newClockedManager(t *testing.T, pool string) (*Manager, *allocfake.Store, *clocks) {
	t.Helper()
	c := newClocks()
	s := allocfake.NewStore()
	return c.manager(&Manager{Store: s, Pool: mustRanges(t, pool), BootID: "boot-1", Cooldown: 30 * time.Second}), s, c
}

// A wall-clock step in either direction changes neither the cooldown of a
// freed address nor the age of an allocation.
func TestCooldownAndAgeIgnoreWallClockSteps(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, -24 * time.Hour, 10 * time.Minute, -10 * time.Minute} {
		t.Run(fmt.Sprintf("step %s", step), func(t *testing.T) {
			m, _, clk := newClockedManager(t, "10.0.0.1-10.0.0.2")
			ctx := context.Background()
			a, _, err := m.Allocate(ctx, req("a"))
			if err != nil {
				t.Fatal(err)
			}
			keep, _, _ := m.Allocate(ctx, req("keep"))
			if _, _, err := m.Release(ctx, key("a"), a.IP); err != nil {
				t.Fatal(err)
			}
			clk.StepWall(step)
			clk.Advance(29 * time.Second)
			if _, _, err := m.Allocate(ctx, req("b")); !errors.Is(err, ErrPoolExhausted) {
				t.Fatalf("29 s after the release (wall stepped %s): %v, want the address still cooling", step, err)
			}
			if got := m.Age(keep); got != 29*time.Second {
				t.Errorf("age after a wall step of %s: %s, want 29s", step, got)
			}
			clk.Advance(2 * time.Second)
			b, _, err := m.Allocate(ctx, req("b"))
			if err != nil || b.IP != a.IP {
				t.Fatalf("31 s after the release (wall stepped %s): %v %v, want %s back", step, b.IP, err, a.IP)
			}
		})
	}
}

// Files of older versions carry only wall-clock stamps. A cooling entry
// with more than a cooldown left (the clock stepped back since) holds its
// address no more; one with less cools as the wall clock says; their
// allocations get the age the wall clock gives.
func TestLegacyStampsWithoutBootClock(t *testing.T) {
	clk := newClocks()
	s := allocfake.NewStore()
	old := NewState("boot-1")
	old.Allocations = []Allocation{{Key: key("old"), IP: netip.MustParseAddr("10.0.0.1"), HostVeth: "eniold", AllocatedAt: clk.wall.Add(-700 * time.Second)}}
	// 10.0.0.2 was written before the clock stepped back a day: "until" is
	// a day away. 10.0.0.3 has 20 s left.
	old.Cooling = []Cooling{{IP: netip.MustParseAddr("10.0.0.2"), Until: clk.wall.Add(24 * time.Hour)},
		{IP: netip.MustParseAddr("10.0.0.3"), Until: clk.wall.Add(20 * time.Second)}}
	if err := s.Save(old); err != nil {
		t.Fatal(err)
	}
	m := clk.manager(&Manager{Store: s, Pool: mustRanges(t, "10.0.0.1-10.0.0.3"), BootID: "boot-1", Cooldown: 30 * time.Second})
	ctx := context.Background()
	st, c, err := m.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cooling != 1 || c.Free != 1 {
		t.Fatalf("counts %+v, want 10.0.0.3 cooling and 10.0.0.2 free", c)
	}
	if got := m.Age(st.Allocations[0]); got != 700*time.Second {
		t.Errorf("age of a legacy allocation: %s, want 700s from its wall stamp", got)
	}
	if s.Saves != 1 {
		t.Errorf("reading a legacy file saved it (%d saves)", s.Saves-1)
	}
	got, _, err := m.Allocate(ctx, req("x"))
	if err != nil || got.IP != netip.MustParseAddr("10.0.0.2") {
		t.Fatalf("a cooling entry a day away froze its address: %v %v", got.IP, err)
	}
	if _, _, err := m.Allocate(ctx, req("y")); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("10.0.0.3 with 20 s left was handed out: %v", err)
	}
	clk.Advance(21 * time.Second)
	if got, _, err := m.Allocate(ctx, req("y")); err != nil || got.IP != netip.MustParseAddr("10.0.0.3") {
		t.Fatalf("after its 20 s: %v %v, want 10.0.0.3", got.IP, err)
	}
	st, _, _ = m.Snapshot(ctx)
	for _, a := range st.Allocations {
		if a.AllocatedBoot <= 0 {
			t.Errorf("allocation %s saved without a boot stamp", a.Key)
		}
	}
}

// A real boot clock is monotonic and positive.
func TestBootClock(t *testing.T) {
	a := BootClock()
	time.Sleep(time.Millisecond)
	if b := BootClock(); a <= 0 || b <= a {
		t.Errorf("CLOCK_BOOTTIME %s then %s: want positive and advancing", a, b)
	}
}

// A cooling stamp further away than one cooldown (edited by hand, or the
// cooldown lowered since the release) does not freeze the address.
func TestCoolingStampBeyondCooldown(t *testing.T) {
	m, s, clk := newClockedManager(t, "10.0.0.1-10.0.0.1")
	st := NewState("boot-1")
	st.Cooling = []Cooling{{IP: netip.MustParseAddr("10.0.0.1"), Until: clk.wall.Add(time.Hour), UntilBoot: clk.boot + 365*24*time.Hour}}
	if err := s.Save(st); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := m.Allocate(ctx, req("a")); err != nil {
		t.Fatalf("a cooling stamp a year away froze the address: %v", err)
	}
	_ = clk
}
