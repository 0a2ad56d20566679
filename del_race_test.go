package main

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/netsetup"
)

// TestDelNeverUnroutesAReusedAddress: a DEL has looked up its attachment
// and is then held up (a loaded node, a stopped process) for longer than
// the cooldown before it unroutes. Meanwhile the same attachment is
// released by someone else (the runtime's repeated DEL, or gc), the
// cooldown passes and a new pod's ADD is given the address and wired.
// When the stalled DEL goes on it must not delete the new pod's rules
// (found by address alone, as the kernel's are): a DEL removes an
// allocation's wiring only while the allocation still holds the address.
func TestDelNeverUnroutesAReusedAddress(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		release func(t *testing.T, p *plugin) error // the other release of "dead"
	}{
		{"repeated DEL", func(t *testing.T, p *plugin) error { return p.del(ctx, att("dead").Key) }},
		{"gc", func(t *testing.T, p *plugin) error {
			live := gc.FromSandboxes([]gc.Sandbox{{ID: "alive", Ready: true}})
			_, err := p.collect(ctx, live, gc.Options{Grace: 10 * time.Minute, RefuseEmpty: true}, false, &fakeHost{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, fw, s := newTestPlugin(t, "10.99.0.0/30") // two addresses: .1 and .2
			w := &ruleWire{fakeWire: fw, rules: map[netip.Addr]string{}}
			p.wire = w
			var mu sync.Mutex
			boot := 10 * time.Hour
			p.mgr.Boot = func() time.Duration { mu.Lock(); defer mu.Unlock(); return boot }
			p.mgr.LockTimeout = time.Minute
			for _, cid := range []string{"alive", "dead"} {
				if _, err := p.add(ctx, att(cid)); err != nil {
					t.Fatal(err)
				}
			}
			// Old enough for gc to free "dead" (it is not in the listing).
			if err := p.mgr.Update(ctx, func(st *alloc.State) (bool, error) {
				for i := range st.Allocations {
					age(&st.Allocations[i], time.Hour)
				}
				return true, nil
			}); err != nil {
				t.Fatal(err)
			}
			deadIP := allocationOf(t, s, "dead").IP

			// The DEL is stalled just before its unroute; the runtime and
			// gc go on. If the DEL holds the state lock there, they wait
			// for it instead (in the background, collected after the DEL).
			var racerErr error
			racerDone := make(chan struct{})
			racer := func() {
				defer close(racerDone)
				if racerErr = tc.release(t, p); racerErr != nil {
					return
				}
				mu.Lock()
				boot += p.mgr.Cooldown + time.Second
				mu.Unlock()
				_, racerErr = p.add(ctx, att("new"))
			}
			w.beforeUnroute = func() {
				try, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				if err := s.Lock(try); err != nil {
					go racer() // the DEL holds the lock
					return
				}
				if err := s.Unlock(); err != nil {
					t.Error(err)
				}
				racer()
			}
			if err := p.del(ctx, att("dead").Key); err != nil {
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
				t.Errorf("the rules of %s (new pod, veth %s) were deleted by the stalled DEL of the dead pod (rules now: %s)", a.IP, a.HostVeth, rules)
			}
			if _, err := w.Check(netsetup.Pod{HostVeth: a.HostVeth, IP: a.IP}); err != nil {
				t.Errorf("the new pod's wiring is gone: %v", err)
			}
			if st, err := s.Load(); err != nil || len(st.Allocations) != 2 {
				t.Errorf("want 2 allocations (alive, new), got %v (%v)", st, err)
			}
		})
	}
}

func fmtRules(m map[netip.Addr]string) string {
	s := ""
	for ip, veth := range m {
		s += ip.String() + "->" + veth + " "
	}
	return s
}
