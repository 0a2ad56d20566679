package alloc_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
)

// addDemand records a demand of cid lasting d, as a waiting ADD does.
func addDemand(t *testing.T, m *Manager, c *clock, cid string, d time.Duration) {
	t.Helper()
	err := m.Update(context.Background(), func(st *State) (bool, error) {
		st.Demands = append(st.Demands, Demand{Key: key(cid), Since: c.Now(), Until: c.Now().Add(d)})
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func demands(t *testing.T, s *allocfake.Store) []Demand {
	t.Helper()
	st, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	return st.Demands
}

func TestDemandFulfilledByAllocation(t *testing.T) {
	m, s, c := newManager(t, "10.0.0.1-10.0.0.2")
	ctx := context.Background()
	addDemand(t, m, c, "a", 25*time.Second)
	addDemand(t, m, c, "b", 25*time.Second)
	st, _ := s.Load()
	if n := st.Waiting(c.Now()); n != 2 {
		t.Fatalf("Waiting = %d, want 2", n)
	}
	if _, _, err := m.Allocate(ctx, req("a")); err != nil {
		t.Fatal(err)
	}
	if d := demands(t, s); len(d) != 1 || d[0].ContainerID != "b" {
		t.Fatalf("demands after a's allocation: %+v, want only b's", d)
	}
	// A repeated ADD of an attachment that has its address also ends a
	// demand left for it.
	addDemand(t, m, c, "a", 25*time.Second)
	if _, existed, err := m.Allocate(ctx, req("a")); err != nil || !existed {
		t.Fatalf("repeated ADD: existed %v, %v", existed, err)
	}
	if d := demands(t, s); len(d) != 1 || d[0].ContainerID != "b" {
		t.Fatalf("demands after a's repeated ADD: %+v, want only b's", d)
	}
}

func TestExpiredDemandDroppedByNextSaveOnly(t *testing.T) {
	m, s, c := newManager(t, "10.0.0.1-10.0.0.5")
	ctx := context.Background()
	addDemand(t, m, c, "killed", 25*time.Second)
	saves := s.Saves
	c.Advance(26 * time.Second)
	// A read does not rewrite the file for an expired demand...
	if _, _, err := m.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Saves != saves || len(demands(t, s)) != 1 {
		t.Fatalf("a read saved (%d -> %d saves) or dropped the demand: %+v", saves, s.Saves, demands(t, s))
	}
	st, _ := s.Load()
	if n := st.Waiting(c.Now()); n != 0 {
		t.Errorf("an expired demand still counts as waiting (%d)", n)
	}
	// ...the next save leaves it out.
	if _, _, err := m.Allocate(ctx, req("other")); err != nil {
		t.Fatal(err)
	}
	if d := demands(t, s); len(d) != 0 {
		t.Errorf("expired demand survived a save: %+v", d)
	}
	if bytes.Contains(s.Bytes(), []byte(`"demands"`)) {
		t.Errorf("an empty demand list is written: %s", s.Bytes())
	}
}

func TestNewBootDropsDemands(t *testing.T) {
	m, s, c := newManager(t, "10.0.0.1-10.0.0.5")
	addDemand(t, m, c, "a", time.Hour)
	m2 := &Manager{Store: s, Pool: m.Pool, BootID: "boot-2", Now: c.Now}
	st, _, err := m2.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Demands) != 0 {
		t.Errorf("demands of the previous boot seen: %+v", st.Demands)
	}
	if _, _, err := m2.Allocate(context.Background(), req("b")); err != nil {
		t.Fatal(err)
	}
	if d := demands(t, s); len(d) != 0 {
		t.Errorf("demands of the previous boot kept: %+v", d)
	}
}

func TestDemandWithEmptyKeyIsCorrupt(t *testing.T) {
	_, err := DecodeState([]byte(`{"version":1,"bootID":"b","allocations":[],"cooling":[],"demands":[{"network":"pods","containerID":"","ifname":"eth0"}]}`))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "demand 0") {
		t.Errorf("demand without container ID: %v, want ErrCorrupt naming it", err)
	}
}

func TestUndoWakesWaiters(t *testing.T) {
	m, _, _ := newManager(t, "10.0.0.1-10.0.0.5")
	ctx := context.Background()
	a, _, err := m.Allocate(ctx, req("failed-add"))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := m.Watch()
	defer w.Close()
	if err := m.Undo(ctx, key("failed-add"), a.IP); err != nil {
		t.Fatal(err)
	}
	if woken, _ := w.Wait(ctx, time.Second); !woken {
		t.Error("an address freed without cooldown did not wake waiters")
	}
	if _, _, err := m.Release(ctx, key("nothing"), a.IP); err != nil {
		t.Fatal(err)
	}
	if woken, _ := w.Wait(ctx, 50*time.Millisecond); woken {
		t.Error("a release that freed nothing woke waiters")
	}
}

// TestDiskWatcher: the inotify watcher wakes on Wake (also one that came
// before Wait), times out otherwise, and ignores state saves.
func TestDiskWatcher(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	m := newDiskManager(t, dir, "10.0.0.0/24")
	ctx := context.Background()
	w, err := m.Watch()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := time.Now()
	if woken, err := w.Wait(ctx, 100*time.Millisecond); err != nil || woken {
		t.Fatalf("Wait without a wake-up: %v %v", woken, err)
	}
	if d := time.Since(start); d < 90*time.Millisecond {
		t.Errorf("Wait returned after %s, before its 100ms", d)
	}
	// Saves of the state file are not wake-ups.
	for i := range 3 {
		if _, _, err := m.Allocate(ctx, req(string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	if woken, _ := w.Wait(ctx, 50*time.Millisecond); woken {
		t.Error("a state save woke the watcher")
	}
	if err := m.Wake(); err != nil {
		t.Fatal(err)
	}
	if woken, err := w.Wait(ctx, 5*time.Second); err != nil || !woken {
		t.Fatalf("Wait after Wake: %v %v", woken, err)
	}
	if woken, _ := w.Wait(ctx, 50*time.Millisecond); woken {
		t.Error("one wake-up delivered twice")
	}
	// A wake-up from another process (another store on the directory).
	other := newDiskManager(t, dir, "10.0.0.0/24")
	done := make(chan bool, 1)
	go func() {
		woken, _ := w.Wait(ctx, 5*time.Second)
		done <- woken
	}()
	time.Sleep(20 * time.Millisecond)
	if err := other.Wake(); err != nil {
		t.Fatal(err)
	}
	if !<-done {
		t.Error("a blocked Wait was not woken by another store's Wake")
	}
	if fi, err := os.Stat(filepath.Join(dir, WakeFileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("wake file: %v %v", fi, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := w.Wait(cctx, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context: %v", err)
	}
}

// TestRemove: DEL's one hold of the lock. unwire sees the allocation with
// the lock held (no ADD can take its address meanwhile); its success
// releases the address into cooldown in one save; its failure keeps the
// allocation and saves nothing; an unknown key calls no unwire, saves
// nothing without a demand and cancels one (waking its waiter).
func TestRemove(t *testing.T) {
	m, s, c := newManager(t, "10.0.0.1-10.0.0.5")
	ctx := context.Background()
	a, _, err := m.Allocate(ctx, req("held"))
	if err != nil {
		t.Fatal(err)
	}
	lockedDuringUnwire := func() bool {
		try, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		if s.Lock(try) != nil {
			return true
		}
		_ = s.Unlock()
		return false
	}

	saves := s.Saves
	boom := errors.New("netlink says no")
	_, found, err := m.Remove(ctx, key("held"), func(Allocation) error { return boom })
	if !errors.Is(err, boom) || !found {
		t.Fatalf("failed unwire: found %v, err %v; want found and the unwire error", found, err)
	}
	if st, _ := s.Load(); st.Find(key("held")) < 0 || s.Saves != saves {
		t.Errorf("a failed unwire released the address or saved (%d saves)", s.Saves-saves)
	}

	var seen Allocation
	var locked bool
	got, found, err := m.Remove(ctx, key("held"), func(x Allocation) error {
		seen, locked = x, lockedDuringUnwire()
		return nil
	})
	if err != nil || !found || got.IP != a.IP || seen.IP != a.IP || seen.HostVeth != "eniheld" {
		t.Fatalf("Remove: %+v %v %v (unwire saw %+v)", got, found, err, seen)
	}
	if !locked {
		t.Error("unwire ran without the state lock")
	}
	st, _ := s.Load()
	if st.Find(key("held")) >= 0 || len(st.Cooling) != 1 || st.Cooling[0].IP != a.IP || s.Saves != saves+1 {
		t.Errorf("after Remove: allocations %+v cooling %+v, %d saves (want 1)", st.Allocations, st.Cooling, s.Saves-saves)
	}

	called := false
	saves = s.Saves
	if _, found, err := m.Remove(ctx, key("held"), func(Allocation) error { called = true; return nil }); err != nil || found || called {
		t.Errorf("second Remove: found %v, unwire called %v, %v", found, called, err)
	}
	if s.Saves != saves {
		t.Error("Remove of an unknown key without a demand saved the state")
	}

	addDemand(t, m, c, "waiting", 25*time.Second)
	w, err := m.Watch()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, found, err := m.Remove(ctx, key("waiting"), func(Allocation) error { called = true; return nil }); err != nil || found || called {
		t.Fatalf("Remove of a waiting attachment: found %v, unwire called %v, %v", found, called, err)
	}
	if d := demands(t, s); len(d) != 0 {
		t.Errorf("demand left after Remove: %+v", d)
	}
	if woken, err := w.Wait(ctx, time.Second); err != nil || !woken {
		t.Errorf("Remove did not wake the waiter: %v %v", woken, err)
	}
}

// failUnwire is the unwire of a Remove that must find nothing.
func failUnwire(t *testing.T) func(Allocation) error {
	return func(a Allocation) error {
		t.Errorf("unwire called for %+v", a)
		return errors.New("unexpected unwire")
	}
}

// TestOldestWaiting: the oldest ADD still waiting is the earliest Since of
// the demands in force whose ADD has no address yet: not one that got
// its address, one whose wait is over, or one stamped after now (a clock
// stepped back).
func TestOldestWaiting(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	st := &State{
		Allocations: []Allocation{{Key: key("served")}},
		Demands: []Demand{
			{Key: key("served"), Since: now.Add(-100 * time.Second), Until: now.Add(10 * time.Second)},
			{Key: key("over"), Since: now.Add(-170 * time.Second), Until: now.Add(-60 * time.Second)},
			{Key: key("future"), Since: now.Add(time.Minute), Until: now.Add(2 * time.Minute)},
			{Key: key("young"), Since: now.Add(-5 * time.Second), Until: now.Add(105 * time.Second)},
			{Key: key("old"), Since: now.Add(-40 * time.Second), Until: now.Add(70 * time.Second)},
		},
	}
	if got := st.OldestWaiting(now); !got.Equal(now.Add(-40 * time.Second)) {
		t.Errorf("oldest waiting since %v, want 40 s before now", now.Sub(got))
	}
	if got := (&State{}).OldestWaiting(now); !got.IsZero() {
		t.Errorf("no demand: oldest waiting %v, want zero", got)
	}
}
