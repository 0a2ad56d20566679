package plugin

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/netsetup"
)

// ruleWire is fakeWire plus the kernel's rules, which (unlike routes) are
// found by address alone: netsetup.Unroute deletes every rule of ours for
// an address, whichever veth the address is routed to now. beforeUnroute,
// if set, runs once, at the start of the first Unroute.
type ruleWire struct {
	*fakeWire
	rmu           sync.Mutex
	rules         map[netip.Addr]string // address -> host veth whose Setup made its rules
	beforeUnroute func()
}

func (w *ruleWire) Setup(p netsetup.Pod) (netsetup.Links, error) {
	l, err := w.fakeWire.Setup(p)
	if err == nil {
		w.rmu.Lock()
		w.rules[p.IP] = p.HostVeth
		w.rmu.Unlock()
	}
	return l, err
}

func (w *ruleWire) Unroute(atts []netsetup.Attachment) error {
	w.rmu.Lock()
	hook := w.beforeUnroute
	w.beforeUnroute = nil
	w.rmu.Unlock()
	if hook != nil {
		hook()
	}
	if err := w.fakeWire.Unroute(atts); err != nil {
		return err
	}
	w.rmu.Lock()
	defer w.rmu.Unlock()
	for _, a := range atts {
		delete(w.rules, a.IP)
	}
	return nil
}

// TestCollectNeverUnroutesAReusedAddress: gc plans to free a dead
// attachment and is then held up (a loaded node, a stopped process) for
// longer than the cooldown. Meanwhile the runtime's DEL of that sandbox
// releases the address, the cooldown passes and a new pod's ADD is given
// the address and wired. When gc goes on it must not delete the new pod's
// rules (found by address): an allocation's wiring is never removed once
// the address belongs to someone else.
func TestCollectNeverUnroutesAReusedAddress(t *testing.T) {
	ctx := context.Background()
	stageReuseRace(t, "gc's teardown of the dead pod",
		func(p *Plugin) error { return p.del(ctx, att("dead").Key, "") },
		func(p *Plugin) error {
			live := gc.FromSandboxes([]gc.Sandbox{{ID: "alive", Ready: true}})
			_, err := p.Collect(ctx, live, gc.Options{Grace: 10 * time.Minute, RefuseEmpty: true}, false, &fakeHost{})
			return err
		})
}

// stageReuseRace stages the race of an address given to a new pod while
// the one who frees its old attachment is stalled: pods "alive" and "dead"
// on a pool of two addresses, both old; stalled (gc, a DEL) is held just
// before its first unroute while release frees "dead" another way (nil:
// stalled itself has), the cooldown passes and "new" is added — in the
// background if stalled holds the state lock there. Then the new pod must
// have the dead pod's address and its rules and wiring must be intact.
func stageReuseRace(t *testing.T, stalledName string, release, stalled func(p *Plugin) error) {
	t.Helper()
	ctx := context.Background()
	p, fw, s := newTestPlugin(t, "10.99.0.0/30") // two addresses: .1 and .2
	w := &ruleWire{fakeWire: fw, rules: map[netip.Addr]string{}}
	p.wire = w
	var mu sync.Mutex
	boot := 10 * time.Hour
	p.Mgr.Boot = func() time.Duration { mu.Lock(); defer mu.Unlock(); return boot }
	p.Mgr.LockTimeout = time.Minute
	for _, cid := range []string{"alive", "dead"} {
		if _, err := p.add(ctx, att(cid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Mgr.Update(ctx, func(st *alloc.State) (bool, error) {
		for i := range st.Allocations {
			age(&st.Allocations[i], time.Hour)
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	deadIP := allocationOf(t, s, "dead").IP

	var racerErr error
	racerDone := make(chan struct{})
	racer := func() {
		defer close(racerDone)
		if racerErr = release(p); racerErr != nil {
			return
		}
		mu.Lock()
		boot += p.Mgr.Cooldown + time.Second
		mu.Unlock()
		_, racerErr = p.add(ctx, att("new"))
	}
	w.beforeUnroute = func() {
		try, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := s.Lock(try); err != nil {
			go racer() // the stalled one holds the lock
			return
		}
		if err := s.Unlock(); err != nil {
			t.Error(err)
		}
		racer()
	}
	if err := stalled(p); err != nil {
		t.Fatal(err)
	}
	<-racerDone
	if racerErr != nil {
		t.Fatal(racerErr)
	}
	a := allocationOf(t, s, "new")
	if a.IP != deadIP {
		t.Fatalf("the new pod got %s, not the dead pod's %s: the race was not staged", a.IP, deadIP)
	}
	w.rmu.Lock()
	got, rules := w.rules[a.IP], fmtRules(w.rules)
	w.rmu.Unlock()
	if got != a.HostVeth {
		t.Errorf("the rules of %s (new pod, veth %s) were deleted by %s (rules now: %s)", a.IP, a.HostVeth, stalledName, rules)
	}
	if _, err := w.Check(netsetup.Pod{HostVeth: a.HostVeth, IP: a.IP}); err != nil {
		t.Errorf("the new pod's wiring is gone: %v", err)
	}
	if st, err := s.Load(); err != nil || len(st.Allocations) != 2 {
		t.Errorf("want 2 allocations (alive, new), got %v (%v)", st, err)
	}
}

func allocationOf(t *testing.T, s *allocfake.Store, cid string) alloc.Allocation {
	t.Helper()
	st, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range st.Allocations {
		if a.ContainerID == cid {
			return a
		}
	}
	t.Fatalf("no allocation of %s in %+v", cid, st.Allocations)
	return alloc.Allocation{}
}
