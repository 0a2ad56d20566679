package alloc_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	. "github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
)

// lossProbe stands in for the plugin's stateLost: it records what it was
// asked and refuses when the network has live pods the store does not know.
type lossProbe struct {
	livePods bool
	asked    int
	missing  []bool
}

func (p *lossProbe) check(st *State) error {
	p.asked++
	p.missing = append(p.missing, st.Missing())
	if p.livePods {
		return ErrStateLost
	}
	return nil
}

// sharedManagers are two networks' managers on one store, as two conflists
// with the same stateDir make them: "pods" has no pods on the node, "blue"
// has live pods whose records were lost with the file.
func sharedManagers(t *testing.T) (pods, blue *Manager, bp *lossProbe, s *allocfake.Store) {
	t.Helper()
	s = allocfake.NewStore()
	c := newClock()
	pp, bp := &lossProbe{}, &lossProbe{livePods: true}
	pods = &Manager{Store: s, Pool: mustRanges(t, "10.0.0.0/24"), BootID: "boot-1", Cooldown: 30 * time.Second, Now: c.Now,
		Network: "pods", OnMissing: pp.check}
	blue = &Manager{Store: s, Pool: mustRanges(t, "10.9.0.0/24"), BootID: "boot-1", Cooldown: 30 * time.Second, Now: c.Now,
		Network: "blue", OnMissing: bp.check}
	return pods, blue, bp, s
}

func blueKey(cid string) Key { return Key{Network: "blue", ContainerID: cid, IfName: "eth0"} }

// assertBlueRefused: every path of blue that reads the store asks whether
// its state was lost, and refuses; nothing is saved.
func assertBlueRefused(t *testing.T, blue *Manager, bp *lossProbe, s *allocfake.Store) {
	t.Helper()
	ctx := context.Background()
	saves, asked := s.Saves, bp.asked
	if _, _, err := blue.Allocate(ctx, Request{Key: blueKey("new"), HostVeth: "enixnew"}); !errors.Is(err, ErrStateLost) {
		t.Errorf("blue Allocate: %v, want ErrStateLost (its live pods' addresses would be handed out)", err)
	}
	if _, _, err := blue.Get(ctx, blueKey("c1")); !errors.Is(err, ErrStateLost) {
		t.Errorf("blue Get: %v, want ErrStateLost", err)
	}
	if _, _, err := blue.Peek(); !errors.Is(err, ErrStateLost) {
		t.Errorf("blue Peek: %v, want ErrStateLost", err)
	}
	if _, _, err := blue.Snapshot(ctx); !errors.Is(err, ErrStateLost) {
		t.Errorf("blue Snapshot (gc's read): %v, want ErrStateLost", err)
	}
	if s.Saves != saves {
		t.Errorf("a refused call of blue saved the store (%d saves)", s.Saves-saves)
	}
	// Peek asks twice: its unlocked read's refusal is confirmed under the
	// lock (an ADD between that read and the route listing is no loss).
	if bp.asked-asked != 5 {
		t.Errorf("blue's loss check asked %d times, want 5", bp.asked-asked)
	}
}

// TestSharedStoreLostForOneNetwork: two networks share a store whose file
// was lost. Once one network saves a fresh file, the other's loss is still
// detected: the file does not record it, so it is asked as for a missing
// file. Both orders: the network without pods saving first, and only
// looking up (which must not save) first.
func TestSharedStoreLostForOneNetwork(t *testing.T) {
	ctx := context.Background()
	t.Run("other network saves first", func(t *testing.T) {
		pods, blue, bp, s := sharedManagers(t)
		if _, _, err := pods.Allocate(ctx, req("a")); err != nil {
			t.Fatalf("pods Allocate on a new node: %v", err)
		}
		if s.Saves != 1 {
			t.Fatalf("saves = %d, want 1", s.Saves)
		}
		assertBlueRefused(t, blue, bp, s)
		if slices.Contains(bp.missing, true) {
			t.Errorf("blue was told the file is missing: %v", bp.missing)
		}
	})
	t.Run("other network only looks up first", func(t *testing.T) {
		pods, blue, bp, s := sharedManagers(t)
		if _, found, err := pods.Remove(ctx, key("unknown"), failUnwire(t)); err != nil || found {
			t.Fatalf("pods DEL look-up: %v %v", found, err)
		}
		if _, found, err := pods.Get(ctx, key("unknown")); err != nil || found {
			t.Fatalf("pods CHECK look-up: %v %v", found, err)
		}
		if _, _, err := pods.Peek(); err != nil {
			t.Fatal(err)
		}
		if s.Saves != 0 || s.Bytes() != nil {
			t.Fatalf("look-ups of an unknown key created the state file (%d saves): %s", s.Saves, s.Bytes())
		}
		assertBlueRefused(t, blue, bp, s)
		// And then pods saves: blue stays refused.
		if _, _, err := pods.Allocate(ctx, req("a")); err != nil {
			t.Fatal(err)
		}
		assertBlueRefused(t, blue, bp, s)
	})
	t.Run("blue recorded once it saved", func(t *testing.T) {
		pods, blue, bp, s := sharedManagers(t)
		pods.Allocate(ctx, req("a"))
		bp.livePods = false // a node where blue has no pods yet
		if _, _, err := blue.Allocate(ctx, Request{Key: blueKey("b1"), HostVeth: "enixb1"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := blue.Release(ctx, blueKey("b1"), netip.Addr{}); err != nil {
			t.Fatal(err)
		}
		asked := bp.asked
		bp.livePods = true // had the store lost blue now, it would have to be asked
		if _, _, err := blue.Allocate(ctx, Request{Key: blueKey("b2"), HostVeth: "enixb2"}); err != nil {
			t.Fatalf("blue, recorded in the store: %v", err)
		}
		if bp.asked != asked {
			t.Error("a network the store records was asked again (the check costs netlink dumps on every call)")
		}
		st, _ := s.Load()
		if !slices.Equal(st.Networks, []string{"blue", "pods"}) {
			t.Errorf("networks recorded: %v", st.Networks)
		}
	})
}

// TestLookupsDoNotSave: DEL and CHECK of an unknown key, list and a
// refused gc read write nothing, neither on a missing file nor after a
// reboot (the new boot is saved with the next real change).
func TestLookupsDoNotSave(t *testing.T) {
	ctx := context.Background()
	m, s, _ := newManager(t, "10.0.0.0/24")
	m.Network = "pods"
	m.Remove(ctx, key("x"), failUnwire(t))
	m.Get(ctx, key("x"))
	m.Snapshot(ctx)
	m.Peek()
	if s.Saves != 0 {
		t.Fatalf("look-ups on a missing file saved %d times", s.Saves)
	}
	m.Allocate(ctx, req("a"))
	rebooted := &Manager{Store: s, Pool: m.Pool, BootID: "boot-2", Now: m.Now, Network: "pods"}
	saves := s.Saves
	if _, found, _ := rebooted.Get(ctx, key("a")); found {
		t.Error("an allocation of the previous boot was found")
	}
	rebooted.Remove(ctx, key("x"), failUnwire(t))
	if s.Saves != saves {
		t.Errorf("look-ups after a reboot saved %d times", s.Saves-saves)
	}
	if _, _, err := rebooted.Allocate(ctx, req("b")); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Load()
	if st.BootID != "boot-2" || st.Find(key("a")) >= 0 || st.Find(key("b")) < 0 {
		t.Errorf("after the first change of the new boot: boot %q, allocations %+v", st.BootID, st.Allocations)
	}
}

// TestPreNetworksStoreNotLost: a store written before the networks record
// existed is not declared lost on upgrade: the networks of its allocations
// and the network that writes it are recorded by the first save.
func TestPreNetworksStoreNotLost(t *testing.T) {
	ctx := context.Background()
	s := allocfake.NewStore()
	s.SetBytes([]byte(`{"version":2,"bootID":"boot-1","allocations":[{"network":"blue","containerID":"b1","ifname":"eth0","ip":"10.9.0.1","hostVeth":"enixb1","allocatedAt":"2026-01-02T03:04:05Z"}],"cooling":[],"lastIP":"10.9.0.1"}` + "\n"))
	probe := &lossProbe{livePods: true}
	blue := &Manager{Store: s, Pool: mustRanges(t, "10.9.0.0/24"), BootID: "boot-1", Network: "blue", OnMissing: probe.check}
	pods := &Manager{Store: s, Pool: mustRanges(t, "10.0.0.0/24"), BootID: "boot-1", Network: "pods", OnMissing: probe.check}
	if _, found, err := blue.Get(ctx, blueKey("b1")); err != nil || !found {
		t.Fatalf("blue on an older store: %v %v", found, err)
	}
	// pods had no allocations: an older file cannot say whether pods wrote
	// it, and it is not declared lost for that alone.
	if _, _, err := pods.Allocate(ctx, req("a")); err != nil {
		t.Fatalf("pods on an older store: %v", err)
	}
	if probe.asked != 0 {
		t.Errorf("the loss check ran %d times on an older, readable store", probe.asked)
	}
	st, _ := s.Load()
	if !slices.Equal(st.Networks, []string{"blue", "pods"}) {
		t.Errorf("first save recorded %v, want blue (its allocation) and pods (the writer)", st.Networks)
	}
	if _, _, err := blue.Allocate(ctx, Request{Key: blueKey("b2"), HostVeth: "enixb2"}); err != nil || probe.asked != 0 {
		t.Errorf("blue after the first save: %v (asked %d)", err, probe.asked)
	}
}

// TestNetworksRecordValidated: the record is data like the rest.
func TestNetworksRecordValidated(t *testing.T) {
	if _, err := DecodeState([]byte(`{"version":2,"bootID":"b","allocations":[],"cooling":[],"networks":[""]}`)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("empty network name: %v, want ErrCorrupt", err)
	}
	if _, err := DecodeState([]byte(`{"version":2,"bootID":"b","allocations":[],"cooling":[],"networks":"pods"}`)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("networks not a list: %v, want ErrCorrupt", err)
	}
}

// TestCooldownIsTheReleasingNetworks: two networks share a stateDir and a
// pool, one with a 300 s cooldown and one with 5 s. An address the 300 s
// network frees stays out of use for 300 s, even for the 5 s network
// (which used to prune the entry as "longer than a cooldown" and take the
// address 30 ms later); one the 5 s network frees is back after 5 s.
func TestCooldownIsTheReleasingNetworks(t *testing.T) {
	s := allocfake.NewStore()
	c := newClock()
	pool := mustRanges(t, "10.0.0.1-10.0.0.2")
	slow := &Manager{Store: s, Pool: pool, BootID: "boot-1", Cooldown: 300 * time.Second, Now: c.Now, Network: "slow"}
	fast := &Manager{Store: s, Pool: pool, BootID: "boot-1", Cooldown: 5 * time.Second, Now: c.Now, Network: "fast"}
	ctx := context.Background()
	k := Key{Network: "slow", ContainerID: "a", IfName: "eth0"}
	a, _, err := slow.Allocate(ctx, Request{Key: k, HostVeth: "enia"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := slow.Release(ctx, k, a.IP); err != nil {
		t.Fatal(err)
	}
	c.Advance(30 * time.Millisecond)
	fk := func(cid string) Request {
		return Request{Key: Key{Network: "fast", ContainerID: cid, IfName: "eth0"}, HostVeth: "eni" + cid}
	}
	b, _, err := fast.Allocate(ctx, fk("b"))
	if err != nil {
		t.Fatal(err)
	}
	if b.IP == a.IP {
		t.Fatalf("the 5 s network took %s 30 ms after the 300 s network freed it", a.IP)
	}
	if _, _, err := fast.Allocate(ctx, fk("c")); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("third address: %v, want ErrPoolExhausted (%s cools for 300 s)", err, a.IP)
	}
	if _, _, err := fast.Release(ctx, Key{Network: "fast", ContainerID: "b", IfName: "eth0"}, b.IP); err != nil {
		t.Fatal(err)
	}
	c.Advance(6 * time.Second)
	got, _, err := fast.Allocate(ctx, fk("d"))
	if err != nil || got.IP != b.IP {
		t.Fatalf("after 6 s: %v %v, want %s (cooled for the 5 s network's cooldown)", got.IP, err, b.IP)
	}
	c.Advance(300 * time.Second)
	if got, _, err := slow.Allocate(ctx, Request{Key: Key{Network: "slow", ContainerID: "e", IfName: "eth0"}, HostVeth: "enie"}); err != nil || got.IP != a.IP {
		t.Fatalf("after 300 s: %v %v, want %s", got.IP, err, a.IP)
	}
}
