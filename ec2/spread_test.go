package ec2

import (
	"fmt"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// TestSpreadChecks: a spreading node makes its hourly check and its
// boot's leak sweep in its own windows of the hour, not an hour after its
// first pass nor at boot: over five hours of timer passes every describe
// after the first falls in the node's window (the sweep half an hour
// later), one an hour.
func TestSpreadChecks(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 3})
	e.w.Spread = true
	slot := hourSlot(e.fake.Info().InstanceID)
	// Boot a minute after the node's sweep window, so that neither window
	// is at boot.
	e.now = time.Unix(0, 0).Add(slot + sweepShift + slotWindow + time.Minute)
	e.warm(t)
	if n := e.fake.Calls()["DescribeNetworkInterfaces"]; n != 1 {
		t.Fatalf("first pass: %d describes, want 1 (the fresh store's read back; no sweep outside the window)", n)
	}
	var checks, sweeps []time.Duration
	for range 5 * 120 {
		before := e.fake.Calls()["DescribeNetworkInterfaces"]
		_, _, src := e.counts(t)
		lastSweep := src.LastSweep
		e.passes(t, 1)
		if e.fake.Calls()["DescribeNetworkInterfaces"] == before {
			continue
		}
		into := time.Duration(e.now.UnixNano()) % time.Hour
		if _, _, src = e.counts(t); !src.LastSweep.Equal(lastSweep) {
			sweeps = append(sweeps, into)
		} else {
			checks = append(checks, into)
		}
	}
	in := func(into, start time.Duration) bool {
		d := (into - start%time.Hour + time.Hour) % time.Hour
		return d < slotWindow
	}
	if len(checks) < 4 || len(checks) > 5 {
		t.Errorf("%d hourly checks in five hours, want 4-5: %v", len(checks), checks)
	}
	for _, c := range checks {
		if !in(c, slot) {
			t.Errorf("hourly check at %v past the hour, outside the node's window at %v", c, slot)
		}
	}
	if len(sweeps) != 1 || !in(sweeps[0], slot+sweepShift) {
		t.Errorf("sweeps at %v past the hour, want one in the window at %v", sweeps, (slot+sweepShift)%time.Hour)
	}
}

// TestSpreadChecksLateWindow: a node whose passes miss its window (the
// timer stopped) still checks 90 minutes after the last; without Spread
// the check is an hour after the last, as before.
func TestSpreadChecksLateWindow(t *testing.T) {
	w := &Warmer{Spread: true}
	src := &section.EC2{InstanceID: "i-0123456789abcdef0"}
	slot := hourSlot(src.InstanceID)
	src.LastDescribe = time.Unix(0, 0).Add(slot + 10*time.Minute)
	for _, tc := range []struct {
		after  time.Duration
		spread bool
		want   bool
	}{
		{61 * time.Minute, true, false}, // past the window
		{89 * time.Minute, true, false},
		{90 * time.Minute, true, true},
		{50 * time.Minute, true, true},  // the next window
		{61 * time.Minute, false, true}, // not spreading: an hour
		{59 * time.Minute, false, false},
	} {
		now := src.LastDescribe.Add(tc.after)
		w.Now, w.Spread = func() time.Time { return now }, tc.spread
		if got := w.hourlyDue(src); got != tc.want {
			t.Errorf("%v after the last check (spread %v): due %v, want %v", tc.after, tc.spread, got, tc.want)
		}
	}
}

// TestHourSlotsSpreadAFleet: a thousand instances' windows fall evenly
// over the hour: no minute holds more than a few times its share.
func TestHourSlotsSpreadAFleet(t *testing.T) {
	per := map[time.Duration]int{}
	for i := range 1000 {
		per[hourSlot(fmt.Sprintf("i-%017x", 0x0a0000+i*7919))/time.Minute]++
	}
	for m, n := range per {
		if n > 4*1000/60 {
			t.Errorf("minute %d of the hour holds %d of 1000 nodes' windows", m, n)
		}
	}
	if len(per) < 55 {
		t.Errorf("windows in %d minutes of the hour, want nearly all 60", len(per))
	}
}

// deletedWithin runs timer passes until the fake has no ENI id, and
// reports how long after the first pass that was (false: not in max).
func (e *env) deletedWithin(t *testing.T, id string, max time.Duration) (time.Duration, bool) {
	t.Helper()
	start := e.now
	for e.now.Sub(start) < max {
		e.passes(t, 1)
		if _, ok := e.fake.ENI(id); !ok {
			return e.now.Sub(start), true
		}
	}
	return 0, false
}

// TestSpreadRetriesYoungLeakAtOnce: the window spreads only the boot's
// first sweep. A leak still young then is looked at again sweepEvery
// later, not in the next hour's window (a retry every sweepEvery, as long
// as the window, would always miss it).
func TestSpreadRetriesYoungLeakAtOnce(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 1})
	e.w.Spread = true
	me := e.fake.Info().InstanceID
	e.now = time.Unix(0, 0).Add(100*time.Hour + hourSlot(me) + sweepShift + 10*time.Second)
	young := e.now.Add(-4 * time.Minute).UTC().Format(time.RFC3339)
	en, err := e.fake.SeedENI(ec2fake.ENISpec{Detached: true, Tags: map[string]string{TagInstanceID: me, TagCreatedAt: young}})
	if err != nil {
		t.Fatal(err)
	}
	e.warm(t) // the boot's sweep, in the window: the leak is a minute too young
	if _, ok := e.fake.ENI(en.ID); !ok {
		t.Fatal("setup: the young leak was deleted by the first sweep")
	}
	if d, ok := e.deletedWithin(t, en.ID, 2*time.Hour); !ok || d > sweepEvery+time.Minute {
		t.Errorf("young leak deleted %v (ok=%v) after the first sweep, want within %v", d, ok, sweepEvery+time.Minute)
	}
}

// TestSpreadReclaimsDetachedENIAtOnce: an ENI eni-cni created and someone
// detached is deleted by the next pass's sweep, with Spread as without; it
// does not wait for the node's window.
func TestSpreadReclaimsDetachedENIAtOnce(t *testing.T) {
	for _, spread := range []bool{false, true} {
		t.Run(fmt.Sprintf("spread=%v", spread), func(t *testing.T) {
			e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 7})
			e.w.Spread = spread
			me := e.fake.Info().InstanceID
			// Boot just after the node's sweep window, so that it is an
			// hour away at the detach.
			e.now = time.Unix(0, 0).Add(100*time.Hour + hourSlot(me) + sweepShift + slotWindow + time.Minute)
			e.warm(t)
			e.passes(t, 12) // the ENIs are older than leakAge
			_, _, src := e.counts(t)
			if len(src.ENIs) < 2 {
				t.Fatalf("setup: %d ENIs, want a second one", len(src.ENIs))
			}
			second := src.ENIs[1].ID
			if err := e.fake.DetachENI(second); err != nil {
				t.Fatal(err)
			}
			if d, ok := e.deletedWithin(t, second, 2*time.Hour); !ok || d > 2*time.Minute {
				t.Errorf("detached %s deleted %v (ok=%v) after the detach, want within 2m", second, d, ok)
			}
		})
	}
}
