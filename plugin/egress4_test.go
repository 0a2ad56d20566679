package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
)

// egressWire is familyWire that can give IPv6-only pods IPv4 egress: it
// remembers each veth's egress address and the masquerade's state.
type egressWire struct {
	*familyWire
	hasIPv4   bool
	probes    int
	ensured   []bool // once, per call
	ensureErr error
	masq      bool
	egress    map[string]netip.Addr
	unrouted4 []netip.Addr
}

func (e *egressWire) NodeHasIPv4Route() (bool, error) { e.probes++; return e.hasIPv4, nil }
func (e *egressWire) EnsureEgress4(_, _ string, once bool) error {
	e.ensured = append(e.ensured, once)
	if e.ensureErr != nil {
		return e.ensureErr
	}
	e.masq = true
	return nil
}

func (e *egressWire) CheckEgress4() error {
	if !e.masq {
		return netsetup.ErrHostMismatch
	}
	return nil
}

func (e *egressWire) Setup(p netsetup.Pod) (netsetup.Links, error) {
	l, err := e.familyWire.Setup(p)
	if err == nil {
		e.egress[p.HostVeth] = p.Egress4
	}
	return l, err
}

func (e *egressWire) Check(p netsetup.Pod) (netsetup.Links, error) {
	if e.egress[p.HostVeth] != p.Egress4 {
		return netsetup.Links{}, netsetup.ErrHostMismatch
	}
	return e.familyWire.Check(p)
}

func (e *egressWire) Unroute(atts []netsetup.Attachment) error {
	for _, a := range atts {
		if alloc.Egress4Range().Contains(a.IP) {
			e.unrouted4 = append(e.unrouted4, a.IP)
			delete(e.egress, a.HostVeth)
		}
	}
	return e.familyWire.Unroute(atts)
}

func newEgressPlugin(t *testing.T, extra string) (*Plugin, *egressWire, *allocfake.Store) {
	t.Helper()
	cfg, err := netconf.Parse([]byte(`{"cniVersion":"1.0.0","name":"pods","ipFamilies":["ipv6"],` + extra + `"pool":{"source":"static","ranges":["fd00:99::/120"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := allocfake.NewStore()
	w := &egressWire{familyWire: &familyWire{fakeWire: newFakeWire(), ip6: map[string]netip.Addr{}}, hasIPv4: true, egress: map[string]netip.Addr{}}
	mgr := &alloc.Manager{Store: s, Pool: cfg.Pool, Families: cfg.Families, BootID: "b", Cooldown: cfg.Cooldown, LockTimeout: time.Second}
	return newPluginWith(cfg, mgr, w, staticProvider{cfg.Pool}), w, s
}

// ADD gives an IPv6-only pod an egress address, wired and masqueraded
// but not in the result (kubelet takes the result's addresses as the
// pod's IPs); CHECK checks it and the masquerade; DEL without a netns
// unroutes and frees it with the IPv6 address.
func TestEgress4Verbs(t *testing.T) {
	p, w, s := newEgressPlugin(t, "")
	ctx := context.Background()
	res, err := p.add(ctx, att("c1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resultIPs(res); !slices.Equal(got, []string{"fd00:99::1/128 gw fe80::1", "::/0 via fe80::1"}) {
		t.Errorf("result %q lists more than the pod's IPv6 address", got)
	}
	st, _ := s.Load()
	a := st.Allocations[0]
	if a.Egress4 != netip.MustParseAddr("169.254.172.1") || w.egress[a.HostVeth] != a.Egress4 {
		t.Fatalf("allocation %+v, wired egress %s", a, w.egress[a.HostVeth])
	}
	if !slices.Equal(w.ensured, []bool{true}) || w.probes != 1 {
		t.Errorf("masquerade ensured %v after %d probes, want once per boot", w.ensured, w.probes)
	}
	if again, err := p.add(ctx, att("c1")); err != nil || len(again.IPs) != 1 {
		t.Errorf("repeated ADD: %v %v", again, err)
	}
	if err := p.check(ctx, att("c1"), res); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	w.masq = false
	if err := p.check(ctx, att("c1"), res); !errors.Is(err, netsetup.ErrHostMismatch) {
		t.Errorf("CHECK without the masquerade: %v", err)
	}
	w.masq = true
	delete(w.egress, a.HostVeth)
	if err := p.check(ctx, att("c1"), res); err == nil {
		t.Error("CHECK passed without the egress wiring")
	}
	w.egress[a.HostVeth] = a.Egress4
	if err := p.del(ctx, att("c1").Key, ""); err != nil {
		t.Fatal(err)
	}
	st, _ = s.Load()
	if len(st.Allocations) != 0 || !slices.Equal(w.unrouted4, []netip.Addr{a.Egress4}) {
		t.Errorf("after DEL: allocations %+v, egress unrouted %v", st.Allocations, w.unrouted4)
	}
	if !slices.ContainsFunc(st.Cooling, func(c alloc.Cooling) bool { return c.IP == a.Egress4 }) {
		t.Errorf("egress address not cooling: %+v", st.Cooling)
	}
}

// No egress where it is off, or where the node has no IPv4 address to
// masquerade to; a masquerade that cannot be set up fails the ADD and
// leaves nothing allocated.
func TestEgress4OffAndFailing(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		extra   string
		hasIPv4 bool
	}{{`"ipv4Egress":false,`, true}, {``, false}} {
		p, w, s := newEgressPlugin(t, tt.extra)
		w.hasIPv4 = tt.hasIPv4
		if _, err := p.add(ctx, att("c1")); err != nil {
			t.Fatal(err)
		}
		st, _ := s.Load()
		if st.Allocations[0].Egress4.IsValid() || len(w.ensured) != 0 {
			t.Errorf("%s node IPv4 %v: egress %s, ensured %v", tt.extra, tt.hasIPv4, st.Allocations[0].Egress4, w.ensured)
		}
	}
	p, w, s := newEgressPlugin(t, `"ipv4Egress":true,`)
	w.hasIPv4, w.ensureErr = false, errors.New("no iptables")
	if _, err := p.add(ctx, att("c1")); err == nil || w.probes != 0 {
		t.Fatalf("ADD with a failing masquerade: %v (%d probes: true needs none)", err, w.probes)
	}
	if st, _ := s.Load(); len(st.Allocations) != 0 || len(st.Cooling) != 0 {
		t.Errorf("failed ADD left %+v", st)
	}
}

// gc frees the egress address with its pod, unrouting both.
func TestEgress4Collected(t *testing.T) {
	as := []alloc.Allocation{{Key: att("c1").Key, IP: netip.MustParseAddr("fd00:99::1"), Egress4: netip.MustParseAddr("169.254.172.1"), HostVeth: "enix"}}
	got := attachmentsOf(as)
	if len(got) != 2 || got[1].IP != as[0].Egress4 {
		t.Errorf("gc unroutes %+v", got)
	}
	// A `to` rule of an egress address no veth routes is swept; one a
	// veth routes (another network's store may hold it) is not.
	p, _, _ := newEgressPlugin(t, "")
	snap := gc.HostSnapshot{
		Rules:  []gc.HostRule{{IP: netip.MustParseAddr("169.254.172.7")}, {IP: netip.MustParseAddr("169.254.172.8")}},
		Routes: []gc.HostRoute{{IP: netip.MustParseAddr("169.254.172.8"), Veth: "other"}},
	}
	if got := p.ours(alloc.NewState("b"), snap).Rules; len(got) != 1 || got[0].IP != netip.MustParseAddr("169.254.172.7") {
		t.Errorf("swept rules %+v", got)
	}
}

// repair records the egress address a veth routes beside its pod's IPv6
// address with that pod, and holds one no pod explains.
func TestEgress4Repaired(t *testing.T) {
	veth := netsetup.HostVethName("eni", "c1", "eth0")
	in := repairInput{
		Network: "pods", Prefix: "eni", Base: alloc.NewState("b"),
		InPool: func(ip netip.Addr) bool { return ip.Is6() },
		Veths: []netsetup.VethView{
			{Name: veth, IPs: []netip.Addr{netip.MustParseAddr("169.254.172.3"), netip.MustParseAddr("fd00:99::3")}, PeerIfName: "eth0"},
			{Name: "enistray0000000", IPs: []netip.Addr{netip.MustParseAddr("169.254.172.4")}},
		},
		Sandboxes: []gc.Sandbox{{ID: "c1"}},
		Now:       time.Now(),
	}
	plan := planRepair(in)
	if len(plan.Add) != 1 || plan.Add[0].IP != netip.MustParseAddr("fd00:99::3") || plan.Add[0].Egress4 != netip.MustParseAddr("169.254.172.3") {
		t.Fatalf("repair adds %+v", plan.Add)
	}
	if len(plan.Held) != 1 || plan.Held[0].IP != netip.MustParseAddr("169.254.172.4") {
		t.Errorf("held %+v", plan.Held)
	}
	b, _ := json.Marshal(plan.Add[0])
	if _, err := alloc.DecodeState([]byte(`{"version":3,"bootID":"b","allocations":[` + string(b) + `],"cooling":[]}`)); err != nil {
		t.Errorf("repaired allocation is not valid: %v", err)
	}
}

// gc puts the masquerade back every run while a pod holds an egress
// address (a flushed nat table would otherwise wait for a repair), and
// leaves iptables alone on a node whose pods hold none.
func TestEgress4KeptByGC(t *testing.T) {
	ctx := context.Background()
	p, w, _ := newEgressPlugin(t, "")
	if _, err := p.add(ctx, att("c1")); err != nil {
		t.Fatal(err)
	}
	w.masq = false // the nat table flushed behind the plugin's back
	live := gc.FromSandboxes([]gc.Sandbox{{ID: "c1"}})
	if _, err := p.Collect(ctx, live, gc.Options{Grace: time.Minute}, false, &fakeHost{}); err != nil {
		t.Fatal(err)
	}
	if !w.masq || !slices.Equal(w.ensured, []bool{true, false}) {
		t.Errorf("after gc: masquerade %v, ensured %v", w.masq, w.ensured)
	}
	if _, err := p.Collect(ctx, live, gc.Options{Grace: time.Minute}, true, &fakeHost{}); err != nil || len(w.ensured) != 2 {
		t.Errorf("a dry run touched iptables: %v, ensured %v", err, w.ensured)
	}

	q, v, _ := newEgressPlugin(t, `"ipv4Egress":false,`)
	if _, err := q.add(ctx, att("c2")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Collect(ctx, gc.FromSandboxes([]gc.Sandbox{{ID: "c2"}}), gc.Options{Grace: time.Minute}, false, &fakeHost{}); err != nil || len(v.ensured) != 0 {
		t.Errorf("gc without egress pods: %v, ensured %v", err, v.ensured)
	}
}
