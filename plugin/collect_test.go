package plugin

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/netsetup"
)

// fakeHost is an in-memory node for the sweep.
type fakeHost struct {
	veths  []string
	rules  []gc.HostRule
	routes []gc.HostRoute
}

func (h *fakeHost) Veths() ([]string, error)        { return slices.Clone(h.veths), nil }
func (h *fakeHost) Rules() ([]gc.HostRule, error)   { return slices.Clone(h.rules), nil }
func (h *fakeHost) Routes() ([]gc.HostRoute, error) { return slices.Clone(h.routes), nil }
func (h *fakeHost) DeleteVeth(names ...string) error {
	h.veths = slices.DeleteFunc(h.veths, func(v string) bool { return slices.Contains(names, v) })
	return nil
}
func (h *fakeHost) DeleteRule(r gc.HostRule) error {
	h.rules = slices.DeleteFunc(h.rules, func(x gc.HostRule) bool { return x == r })
	return nil
}
func (h *fakeHost) DeleteRoute(r gc.HostRoute) error {
	h.routes = slices.DeleteFunc(h.routes, func(x gc.HostRoute) bool { return x == r })
	return nil
}

// gcFixture: three pods allocated an hour ago ("alive", "dead", "dead2")
// and one a second ago ("newborn"), wired in the fake host, plus a leftover
// veth and rules of a pod long gone.
func gcFixture(t *testing.T) (*Plugin, *fakeWire, *allocfake.Store, *fakeHost) {
	t.Helper()
	p, w, s := newTestPlugin(t, "10.99.0.0/24")
	ctx := context.Background()
	host := &fakeHost{}
	for _, cid := range []string{"alive", "dead", "dead2", "newborn"} {
		res, err := p.add(ctx, att(cid))
		if err != nil {
			t.Fatal(err)
		}
		ip := netip.MustParseAddr(res.IPs[0].Address.IP.String())
		host.veths = append(host.veths, res.Interfaces[0].Name)
		host.rules = append(host.rules, gc.HostRule{IP: ip, Priority: 512, Table: 254})
		host.routes = append(host.routes, gc.HostRoute{IP: ip, Veth: res.Interfaces[0].Name})
	}
	err := p.Mgr.Update(ctx, func(st *alloc.State) (bool, error) {
		for i := range st.Allocations {
			if st.Allocations[i].ContainerID != "newborn" {
				age(&st.Allocations[i], time.Hour)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stale := netsetup.HostVethName("eni", "gone", "eth0")
	otherNet := netsetup.HostVethName("eni", "other-network-pod", "eth0")
	host.veths = append(host.veths, stale, otherNet)
	host.routes = append(host.routes,
		gc.HostRoute{IP: netip.MustParseAddr("10.99.0.200"), Veth: stale},
		gc.HostRoute{IP: netip.MustParseAddr("172.16.0.9"), Veth: otherNet})
	host.rules = append(host.rules,
		gc.HostRule{IP: netip.MustParseAddr("10.99.0.200"), Priority: 512, Table: 254},
		gc.HostRule{IP: netip.MustParseAddr("172.16.0.9"), Priority: 512, Table: 254}) // another network's
	return p, w, s, host
}

// age makes a look allocated d earlier, on both clocks.
func age(a *alloc.Allocation, d time.Duration) {
	a.AllocatedAt = a.AllocatedAt.Add(-d)
	a.AllocatedBoot -= d
}

func TestCollectFreesDeadKeepsAliveAndYoung(t *testing.T) {
	p, w, s, host := gcFixture(t)
	live := gc.FromSandboxes([]gc.Sandbox{{ID: "alive", Ready: true}})
	c, err := p.Collect(context.Background(), live, gc.Options{Grace: 10 * time.Minute, RefuseEmpty: true}, false, host)
	if err != nil {
		t.Fatal(err)
	}
	var freed []string
	for _, d := range c.Freed {
		freed = append(freed, d.ContainerID)
	}
	if strings.Join(freed, ",") != "dead,dead2" {
		t.Errorf("freed %v, want dead and dead2", freed)
	}
	st, _ := s.Load()
	var left []string
	for _, a := range st.Allocations {
		left = append(left, a.ContainerID)
	}
	slices.Sort(left)
	if strings.Join(left, ",") != "alive,newborn" || len(st.Cooling) != 2 {
		t.Errorf("store keeps %v, %d cooling", left, len(st.Cooling))
	}
	if _, ok := w.wired[netsetup.HostVethName("eni", "dead", "eth0")]; ok {
		t.Error("dead attachment not torn down")
	}
	if slices.Contains(host.veths, netsetup.HostVethName("eni", "gone", "eth0")) {
		t.Error("leftover veth not swept")
	}
	for _, r := range host.rules {
		if r.IP.String() == "10.99.0.200" {
			t.Error("leftover rule not swept")
		}
	}
	if !slices.ContainsFunc(host.rules, func(r gc.HostRule) bool { return r.IP.String() == "172.16.0.9" }) {
		t.Error("swept a rule outside this network's pool")
	}
	if !slices.Contains(host.veths, netsetup.HostVethName("eni", "other-network-pod", "eth0")) {
		t.Error("swept the veth of another network's live pod")
	}
	var out bytes.Buffer
	if err := c.Report(&out, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"freed 10.99.0.2", "default/web-dead", "sandbox not listed", "leftover veth", "gc: freed 2, kept 1 young, 1 alive"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestCollectRefusesEmptyListingAndDryRun(t *testing.T) {
	p, w, s, host := gcFixture(t)
	before := s.Bytes()
	wiredBefore := len(w.wired)
	hostBefore := len(host.veths) + len(host.rules)
	_, err := p.Collect(context.Background(), gc.FromSandboxes(nil), gc.Options{Grace: 10 * time.Minute, RefuseEmpty: true}, false, host)
	if !errors.Is(err, gc.ErrEmptyListing) {
		t.Fatalf("err = %v, want ErrEmptyListing", err)
	}
	live := gc.FromSandboxes([]gc.Sandbox{{ID: "alive"}})
	c, err := p.Collect(context.Background(), live, gc.Options{Grace: 10 * time.Minute, RefuseEmpty: true}, true, host)
	if err != nil || len(c.Freed) != 2 || c.Leftovers.Len() != 2 {
		t.Fatalf("dry run: %v, %d to free, %d leftovers", err, len(c.Freed), c.Leftovers.Len())
	}
	var out bytes.Buffer
	c.Report(&out, true)
	if !strings.Contains(out.String(), "would free") || !strings.Contains(out.String(), "would remove leftover veth") {
		t.Errorf("dry-run report:\n%s", out.String())
	}
	if !bytes.Equal(s.Bytes(), before) || len(w.wired) != wiredBefore || len(host.veths)+len(host.rules) != hostBefore {
		t.Error("refused or dry run changed something")
	}
}

func TestCollectTeardownFailureKeepsAddress(t *testing.T) {
	p, w, s, host := gcFixture(t)
	w.unrouteErr = errors.New("busy")
	c, err := p.Collect(context.Background(), gc.FromSandboxes([]gc.Sandbox{{ID: "alive"}}), gc.Options{Grace: time.Minute, RefuseEmpty: true}, false, host)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Freed) != 0 || len(c.Errors) != 2 {
		t.Errorf("freed %d, errors %v", len(c.Freed), c.Errors)
	}
	if err := c.Report(&bytes.Buffer{}, false); err == nil || !strings.Contains(err.Error(), "2 errors") {
		t.Errorf("report error %v", err)
	}
	st, _ := s.Load()
	if len(st.Allocations) != 4 {
		t.Error("address released although teardown failed")
	}
}

// TestCollectGraceOnBootClock: gc judges the grace on the boot clock. A wall
// clock stepped forward by more than the grace does not make a pod being
// created look old; one stepped back does not keep a dead pod's address.
func TestCollectGraceOnBootClock(t *testing.T) {
	for _, tc := range []struct {
		name      string
		age, step time.Duration
		wantFreed bool
	}{
		{"young, wall stepped forward a day", 5 * time.Second, 24 * time.Hour, false},
		{"old, wall stepped back a day", 20 * time.Minute, -24 * time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, _ := newTestPlugin(t, "10.99.0.0/24")
			wall, boot := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), 5*time.Hour
			p.Mgr.Now = func() time.Time { return wall }
			p.Mgr.Boot = func() time.Duration { return boot }
			ctx := context.Background()
			if _, err := p.add(ctx, att("pod")); err != nil {
				t.Fatal(err)
			}
			wall, boot = wall.Add(tc.age+tc.step), boot+tc.age
			c, err := p.Collect(ctx, gc.FromSandboxes([]gc.Sandbox{{ID: "other"}}), gc.Options{Grace: 10 * time.Minute, RefuseEmpty: true, Force: true}, false, &fakeHost{})
			if err != nil {
				t.Fatal(err)
			}
			if freed := len(c.Freed) == 1; freed != tc.wantFreed {
				t.Errorf("freed %v, young %v; want freed=%v", c.Freed, c.Plan.Young, tc.wantFreed)
			}
		})
	}
}
