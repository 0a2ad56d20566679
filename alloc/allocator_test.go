package alloc_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// clock is a settable time source for cooldown tests.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time          { return c.t }
func (c *clock) Advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }
func key(cid string) Key                 { return Key{Network: "pods", ContainerID: cid, IfName: "eth0"} }
func req(cid string) Request             { return Request{Key: key(cid), HostVeth: "eni" + cid} }
func mustRanges(t *testing.T, s ...string) Ranges {
	t.Helper()
	rs, err := ParseRanges(s)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func newManager(t *testing.T, pool string) (*Manager, *allocfake.Store, *clock) {
	t.Helper()
	c := newClock()
	s := allocfake.NewStore()
	return &Manager{Store: s, Pool: mustRanges(t, pool), BootID: "boot-1", Cooldown: 30 * time.Second, Now: c.Now}, s, c
}

func TestAllocateUniqueAndIdempotent(t *testing.T) {
	m, _, _ := newManager(t, "10.0.0.1-10.0.0.5")
	ctx := context.Background()
	seen := map[netip.Addr]string{}
	for i := range 5 {
		cid := fmt.Sprintf("c%d", i)
		r := req(cid)
		r.PodNamespace, r.PodName, r.PodUID, r.Netns = "ns", "pod"+cid, "uid-"+cid, "/run/netns/"+cid
		a, existed, err := m.Allocate(ctx, r)
		if err != nil || existed {
			t.Fatalf("Allocate %s: %v existed=%v", cid, err, existed)
		}
		if other, dup := seen[a.IP]; dup {
			t.Fatalf("%s given to %s and %s", a.IP, other, cid)
		}
		seen[a.IP] = cid
		if a.PodName != "pod"+cid || a.PodUID != "uid-"+cid || a.Netns != "/run/netns/"+cid || a.HostVeth != "eni"+cid || a.AllocatedAt.IsZero() {
			t.Errorf("metadata not recorded: %+v", a)
		}
	}
	again, existed, err := m.Allocate(ctx, req("c2"))
	if err != nil || !existed {
		t.Fatalf("repeated Allocate: %v existed=%v", err, existed)
	}
	if seen[again.IP] != "c2" {
		t.Errorf("repeated ADD got %s, which belongs to %s", again.IP, seen[again.IP])
	}
}

func TestAllocateExhaustedReportsCounts(t *testing.T) {
	m, s, clk := newManager(t, "10.0.0.1-10.0.0.3")
	ctx := context.Background()
	for _, cid := range []string{"a", "b", "c"} {
		if _, _, err := m.Allocate(ctx, req(cid)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := m.Release(ctx, key("a"), netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	before := s.Bytes()
	_, _, err := m.Allocate(ctx, req("d"))
	if !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("err = %v, want ErrPoolExhausted", err)
	}
	for _, want := range []string{"2 allocated", "1 cooling", `network "pods"`, "d/eth0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if string(s.Bytes()) != string(before) {
		t.Error("a failed allocation changed the store")
	}
	clk.Advance(31 * time.Second)
	a, _, err := m.Allocate(ctx, req("d"))
	if err != nil || a.IP.String() != "10.0.0.1" {
		t.Fatalf("after cooldown: %v %v, want 10.0.0.1", a.IP, err)
	}
}

func TestCooldownDelaysReuse(t *testing.T) {
	m, _, clk := newManager(t, "10.0.0.1-10.0.0.2")
	ctx := context.Background()
	a, _, _ := m.Allocate(ctx, req("a"))
	if _, found, err := m.Release(ctx, key("a"), a.IP); err != nil || !found {
		t.Fatalf("Release: %v found=%v", err, found)
	}
	b, _, _ := m.Allocate(ctx, req("b"))
	if b.IP == a.IP {
		t.Fatalf("freed %s reused at once", a.IP)
	}
	_, c, _ := m.Snapshot(ctx)
	if c != (Counts{Total: 2, Free: 0, Cooling: 1, Allocated: 1}) {
		t.Errorf("counts = %+v", c)
	}
	clk.Advance(29 * time.Second)
	if _, _, err := m.Allocate(ctx, req("c")); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("still cooling, got %v", err)
	}
	clk.Advance(2 * time.Second)
	got, _, err := m.Allocate(ctx, req("c"))
	if err != nil || got.IP != a.IP {
		t.Fatalf("after cooldown got %v %v, want %s", got.IP, err, a.IP)
	}
	st, _, _ := m.Snapshot(ctx)
	if len(st.Cooling) != 0 {
		t.Errorf("expired cooling entries kept: %+v", st.Cooling)
	}
}

func TestRoundRobinAfterUndo(t *testing.T) {
	m, _, _ := newManager(t, "10.0.0.1-10.0.0.3")
	ctx := context.Background()
	a, _, _ := m.Allocate(ctx, req("a"))
	if err := m.Undo(ctx, key("a"), a.IP); err != nil {
		t.Fatal(err)
	}
	b, _, _ := m.Allocate(ctx, req("b"))
	if b.IP.String() != "10.0.0.2" {
		t.Errorf("after undo of %s got %s, want the next address 10.0.0.2", a.IP, b.IP)
	}
	_, c, _ := m.Snapshot(ctx)
	if c.Cooling != 0 {
		t.Errorf("undo must not cool: %+v", c)
	}
	m.Allocate(ctx, req("c"))
	d, _, err := m.Allocate(ctx, req("d"))
	if err != nil || d.IP.String() != "10.0.0.1" {
		t.Errorf("wrap-around got %s %v, want 10.0.0.1", d.IP, err)
	}
}

func TestReleaseOnlyMatchingIP(t *testing.T) {
	m, _, _ := newManager(t, "10.0.0.1-10.0.0.3")
	ctx := context.Background()
	a, _, _ := m.Allocate(ctx, req("a"))
	_, found, err := m.Release(ctx, key("a"), netip.MustParseAddr("10.0.0.3"))
	if err != nil || found {
		t.Fatalf("release with another IP: found=%v err=%v", found, err)
	}
	if _, found, _ := m.Get(ctx, key("a")); !found {
		t.Fatal("allocation lost")
	}
	if _, found, _ := m.Release(ctx, key("a"), a.IP); !found {
		t.Fatal("release with the right IP did nothing")
	}
	if _, found, err := m.Release(ctx, key("a"), a.IP); err != nil || found {
		t.Fatalf("second release: found=%v err=%v", found, err)
	}
}

func TestNewBootDropsAllocationsNotPool(t *testing.T) {
	m, s, _ := newManager(t, "10.0.0.1-10.0.0.3")
	ctx := context.Background()
	m.Allocate(ctx, req("a"))
	m.Allocate(ctx, req("b"))
	m.Release(ctx, key("b"), netip.Addr{})
	err := m.Update(ctx, func(st *State) (bool, error) {
		st.EC2 = &section.EC2{Addrs: []section.Addr{{IP: netip.MustParseAddr("10.1.0.9"), ENI: "eni-1", Origin: section.OriginAssigned}}}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rebooted := &Manager{Store: s, Pool: m.Pool, BootID: "boot-2", Cooldown: m.Cooldown, Now: m.Now}
	st, c, err := rebooted.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Allocations) != 0 || len(st.Cooling) != 0 || st.BootID != "boot-2" {
		t.Errorf("after reboot: %d allocations, %d cooling, boot %q", len(st.Allocations), len(st.Cooling), st.BootID)
	}
	if st.EC2 == nil || len(st.EC2.Addrs) != 1 || c.Free != 3 {
		t.Errorf("pool must survive a reboot: %+v %+v", st.EC2, c)
	}
	// A read writes nothing (a look-up must never create or rewrite the
	// file); the new boot is saved with the next change.
	saves := s.Saves
	rebooted.Snapshot(ctx)
	if s.Saves != saves {
		t.Error("a read rewrote the store")
	}
	if _, _, err := rebooted.Allocate(ctx, req("c")); err != nil {
		t.Fatal(err)
	}
	saved, _ := s.Load()
	if saved.BootID != "boot-2" || len(saved.Allocations) != 1 || saved.Find(key("c")) < 0 {
		t.Errorf("new boot not saved with the next change: boot %q, %+v", saved.BootID, saved.Allocations)
	}
}

func TestFirstBootKeepsState(t *testing.T) {
	s := allocfake.NewStore()
	st := NewState("")
	st.Allocations = append(st.Allocations, Allocation{Key: key("a"), IP: netip.MustParseAddr("10.0.0.1")})
	s.Save(st)
	m := &Manager{Store: s, Pool: mustRanges(t, "10.0.0.0/24"), BootID: "boot-1"}
	got, _, err := m.Snapshot(context.Background())
	if err != nil || len(got.Allocations) != 1 {
		t.Fatalf("a state without boot ID must adopt the boot, not drop: %v %+v", err, got)
	}
}

func TestLockTimeout(t *testing.T) {
	m, s, _ := newManager(t, "10.0.0.0/24")
	m.LockTimeout = 20 * time.Millisecond
	if err := s.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Unlock()
	_, _, err := m.Allocate(context.Background(), req("a"))
	if !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("err = %v, want ErrLockTimeout", err)
	}
}

func TestSaveFailureKeepsOldState(t *testing.T) {
	m, s, _ := newManager(t, "10.0.0.0/24")
	ctx := context.Background()
	m.Allocate(ctx, req("a"))
	before := s.Bytes()
	s.SaveFn = func(*State) error { return errors.New("disk full") }
	if _, _, err := m.Allocate(ctx, req("b")); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err = %v", err)
	}
	if string(s.Bytes()) != string(before) {
		t.Error("store changed despite failed save")
	}
	// The lock must have been released.
	s.SaveFn = nil
	if _, _, err := m.Allocate(ctx, req("b")); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentAllocateFakeStore(t *testing.T) {
	m, _, _ := newManager(t, "10.0.0.1-10.0.0.40")
	m.LockTimeout = 5 * time.Second
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[netip.Addr]string{}
	var exhausted int
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cid := fmt.Sprintf("c%d", i)
			a, _, err := m.Allocate(context.Background(), req(cid))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrPoolExhausted):
				exhausted++
			case err != nil:
				t.Errorf("%s: %v", cid, err)
			default:
				if other, dup := got[a.IP]; dup {
					t.Errorf("%s given to %s and %s", a.IP, other, cid)
				}
				got[a.IP] = cid
			}
		}()
	}
	wg.Wait()
	if len(got) != 40 || exhausted != 10 {
		t.Errorf("%d allocated, %d exhausted; want 40 and 10", len(got), exhausted)
	}
}

func TestReleaseAll(t *testing.T) {
	m, s, _ := newManager(t, "10.0.0.1-10.0.0.5")
	ctx := context.Background()
	a, _, _ := m.Allocate(ctx, req("a"))
	b, _, _ := m.Allocate(ctx, req("b"))
	m.Allocate(ctx, req("c"))
	saves := s.Saves
	got, err := m.ReleaseAll(ctx, []Held{{key("a"), a.IP}, {key("b"), netip.MustParseAddr("10.0.0.9")}, {key("zz"), b.IP}})
	if err != nil || len(got) != 1 || got[0].IP != a.IP {
		t.Fatalf("released %+v, %v; want only a", got, err)
	}
	if s.Saves != saves+1 {
		t.Errorf("%d saves, want one", s.Saves-saves)
	}
	_, c, _ := m.Snapshot(ctx)
	if c.Allocated != 2 || c.Cooling != 1 {
		t.Errorf("counts %+v", c)
	}
}

// TestSavePrunesTombstonesAndStampsVersion: every save drops expired
// tombstones and writes the current schema version; a read saves nothing.
func TestSavePrunesTombstonesAndStampsVersion(t *testing.T) {
	s := allocfake.NewStore()
	now := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	m := &Manager{Store: s, Pool: StoredPool{}, BootID: "b", Now: func() time.Time { return now }}
	ctx := context.Background()
	err := m.Update(ctx, func(st *State) (bool, error) {
		st.Version = 1 // as if loaded from an older file
		st.EC2 = &section.EC2{Tombstones: []section.Tombstone{
			{IP: netip.MustParseAddr("10.0.0.1"), Until: now.Add(-time.Second)},
			{IP: netip.MustParseAddr("10.0.0.2"), Until: now.Add(time.Minute)},
		}}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != SchemaVersion || len(st.EC2.Tombstones) != 1 || st.EC2.Tombstones[0].IP.String() != "10.0.0.2" {
		t.Errorf("saved version %d, tombstones %+v", st.Version, st.EC2.Tombstones)
	}
	saves := s.Saves
	now = now.Add(time.Hour)
	if _, _, err := m.Snapshot(ctx); err != nil || s.Saves != saves {
		t.Errorf("a read saved (%v): expired tombstones alone are no reason to write", err)
	}
}
