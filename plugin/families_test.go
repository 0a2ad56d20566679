package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/metrics"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
)

// familyWire is fakeWire that also remembers each veth's IPv6 address.
type familyWire struct {
	*fakeWire
	ip6 map[string]netip.Addr
}

func (f *familyWire) Setup(p netsetup.Pod) (netsetup.Links, error) {
	l, err := f.fakeWire.Setup(p)
	if err == nil {
		f.ip6[p.HostVeth] = p.IP6
	}
	return l, err
}

func (f *familyWire) Check(p netsetup.Pod) (netsetup.Links, error) {
	if f.ip6[p.HostVeth] != p.IP6 {
		return netsetup.Links{}, fmt.Errorf("%w: no host route %s", netsetup.ErrHostMismatch, p.IP6)
	}
	return f.fakeWire.Check(p)
}

func (f *familyWire) Unroute(atts []netsetup.Attachment) error {
	if err := f.fakeWire.Unroute(atts); err != nil {
		return err
	}
	for _, a := range atts {
		if a.IP.Is6() && f.ip6[a.HostVeth] == a.IP {
			delete(f.ip6, a.HostVeth)
		}
	}
	return nil
}

func (f *familyWire) PodRoutes(prefix string) ([]netsetup.PodRoute, error) {
	out, _ := f.fakeWire.PodRoutes(prefix)
	for veth, ip := range f.ip6 {
		if ip.IsValid() {
			out = append(out, netsetup.PodRoute{IP: ip, Veth: veth})
		}
	}
	return out, nil
}

func newFamilyPlugin(t *testing.T, families string, ranges ...string) (*Plugin, *familyWire, *allocfake.Store) {
	t.Helper()
	rs, _ := json.Marshal(ranges)
	cfg, err := netconf.Parse([]byte(`{"cniVersion":"1.0.0","name":"pods","ipFamilies":` + families + `,"pool":{"source":"static","ranges":` + string(rs) + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := allocfake.NewStore()
	w := &familyWire{fakeWire: newFakeWire(), ip6: map[string]netip.Addr{}}
	mgr := &alloc.Manager{Store: s, Pool: cfg.Pool, Families: cfg.Families, BootID: "b", Cooldown: cfg.Cooldown, LockTimeout: time.Second}
	return newPluginWith(cfg, mgr, w, staticProvider{cfg.Pool}), w, s
}

func resultIPs(r *current.Result) []string {
	var out []string
	for _, c := range r.IPs {
		out = append(out, c.Address.String()+" gw "+c.Gateway.String())
	}
	for _, rt := range r.Routes {
		out = append(out, rt.Dst.String()+" via "+rt.GW.String())
	}
	return out
}

// The result lists the addresses in the order of ipFamilies (IPv4 first
// by default, which containerd takes as the pod's primary IP), each with
// its family's gateway and default route.
func TestAddResultFamilies(t *testing.T) {
	for _, tt := range []struct {
		families string
		want     []string
	}{
		{`["ipv4","ipv6"]`, []string{"10.99.0.1/32 gw 169.254.1.1", "fd00:99::1/128 gw fe80::1", "0.0.0.0/0 via 169.254.1.1", "::/0 via fe80::1"}},
		{`["ipv6","ipv4"]`, []string{"fd00:99::1/128 gw fe80::1", "10.99.0.1/32 gw 169.254.1.1", "::/0 via fe80::1", "0.0.0.0/0 via 169.254.1.1"}},
		{`["ipv6"]`, []string{"fd00:99::1/128 gw fe80::1", "::/0 via fe80::1"}},
	} {
		ranges := []string{"fd00:99::/120"}
		if strings.Contains(tt.families, "ipv4") {
			ranges = append(ranges, "10.99.0.0/24")
		}
		p, _, s := newFamilyPlugin(t, tt.families, ranges...)
		res, err := p.add(context.Background(), att("c1"))
		if err != nil {
			t.Fatal(err)
		}
		if got := resultIPs(res); !slices.Equal(got, tt.want) {
			t.Errorf("%s: result %q, want %q", tt.families, got, tt.want)
		}
		for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
			if _, err := res.GetAsVersion(v); err != nil {
				t.Errorf("%s: convert to %s: %v", tt.families, v, err)
			}
		}
		st, _ := s.Load()
		if len(st.Allocations) != 1 || (strings.Contains(tt.families, "ipv4") && !st.Allocations[0].IP6.IsValid()) {
			t.Errorf("%s: allocations %+v", tt.families, st.Allocations)
		}
	}
}

// Dual stack through ADD, repeated ADD, CHECK and DEL without a netns:
// both addresses together every time.
func TestDualStackVerbs(t *testing.T) {
	p, w, s := newFamilyPlugin(t, `["ipv4","ipv6"]`, "10.99.0.0/24", "fd00:99::/120")
	ctx := context.Background()
	res, err := p.add(ctx, att("c1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.add(ctx, att("c1"))
	if err != nil || !slices.Equal(resultIPs(again), resultIPs(res)) || len(w.torn) != 0 {
		t.Fatalf("repeated ADD: %v %v (torn %v)", again, err, w.torn)
	}
	if err := p.check(ctx, att("c1"), res); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	only4 := *res
	only4.IPs = res.IPs[:1]
	if err := p.check(ctx, att("c1"), &only4); err == nil || !strings.Contains(err.Error(), "no address fd00:99::1/128") {
		t.Errorf("CHECK of a prevResult without the IPv6 address: %v", err)
	}
	veth := netsetup.HostVethName("eni", "c1", "eth0")
	delete(w.ip6, veth) // the IPv6 route is gone
	if err := p.check(ctx, att("c1"), res); err == nil {
		t.Error("CHECK passed without the IPv6 wiring")
	}
	if _, err := p.add(ctx, att("c1")); err != nil || w.ip6[veth] != netip.MustParseAddr("fd00:99::1") {
		t.Errorf("repeated ADD did not repair the IPv6 wiring: %v %v", err, w.ip6)
	}
	if err := p.del(ctx, att("c1").Key, ""); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Load()
	var cooling []string
	for _, c := range st.Cooling {
		cooling = append(cooling, c.IP.String())
	}
	if len(st.Allocations) != 0 || !slices.Equal(cooling, []string{"10.99.0.1", "fd00:99::1"}) || len(w.wired) != 0 || len(w.ip6) != 0 {
		t.Errorf("after DEL: %+v cooling %v wired %v %v", st.Allocations, cooling, w.wired, w.ip6)
	}
}

// A lost state is noticed from IPv6 routes too.
func TestStateLostSeesIPv6Routes(t *testing.T) {
	p, w, s := newFamilyPlugin(t, `["ipv6"]`, "fd00:99::/120")
	w.ip6["enideadbeef0000"] = netip.MustParseAddr("fd00:99::5")
	if _, err := p.add(context.Background(), att("c1")); err == nil || !strings.Contains(err.Error(), "fd00:99::5 dev enideadbeef0000") {
		t.Errorf("ADD on a lost state: %v", err)
	}
	if st, _ := s.Load(); len(st.Allocations) != 0 {
		t.Errorf("allocated on a lost state: %+v", st.Allocations)
	}
}

// A dual-stack pool with no IPv6 address left fails ADD with code 11,
// naming the family, and takes no IPv4 address.
func TestDualStackExhaustedFamily(t *testing.T) {
	p, _, s := newFamilyPlugin(t, `["ipv4","ipv6"]`, "10.99.0.0/24", "fd00:99::1-fd00:99::1")
	ctx := context.Background()
	if _, err := p.add(ctx, att("c1")); err != nil {
		t.Fatal(err)
	}
	_, err := p.add(ctx, att("c2"))
	if ce := toCNIError(err); ce.Code != 11 || !strings.Contains(ce.Msg, "no free ipv6 address") {
		t.Errorf("code %d %q", ce.Code, ce.Msg)
	}
	if st, _ := s.Load(); len(st.Allocations) != 1 {
		t.Errorf("allocations %+v", st.Allocations)
	}
}

// Repair rebuilds a dual-stack pod's one allocation from the two routes
// through its veth, whichever family the node lists first.
func TestRepairDualStackVeth(t *testing.T) {
	veth := netsetup.HostVethName("eni", "sb1", "eth0")
	for _, ips := range [][]netip.Addr{
		{netip.MustParseAddr("10.99.0.7"), netip.MustParseAddr("fd00:99::7")},
		{netip.MustParseAddr("fd00:99::7"), netip.MustParseAddr("10.99.0.7")},
	} {
		plan := planRepair(repairInput{
			Network: "pods", Prefix: "eni", Base: alloc.NewState("b"),
			Veths:     []netsetup.VethView{{Name: veth, IPs: ips, PeerIfName: "eth0"}},
			Sandboxes: []gc.Sandbox{{ID: "sb1", PodNamespace: "ns", PodName: "web"}},
			Now:       time.Now(),
		})
		if len(plan.Add) != 1 || len(plan.Conflicts) != 0 || len(plan.Held) != 0 {
			t.Fatalf("plan %+v", plan)
		}
		if a := plan.Add[0]; a.IP != netip.MustParseAddr("10.99.0.7") || a.IP6 != netip.MustParseAddr("fd00:99::7") || a.HostVeth != veth {
			t.Errorf("rebuilt %+v", a)
		}
	}
}

// The pool metrics of a dual-stack network are per family, and a /64 of
// IPv6 is counted, not walked.
func TestPoolMetricsByFamily(t *testing.T) {
	p, _, s := newFamilyPlugin(t, `["ipv4","ipv6"]`, "10.99.0.0/30", "fd00:99::/64")
	ctx := context.Background()
	if _, err := p.add(ctx, att("c1")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.add(ctx, att("c2")); err != nil {
		t.Fatal(err)
	}
	if err := p.del(ctx, att("c2").Key, ""); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Load()
	var b strings.Builder
	if err := metrics.Write(&b, poolFamilies(metrics.Label{Name: "network", Value: "pods"}, st, p.Cfg.Pool, time.Now())); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`eni_cni_pool_size{network="pods",eni="none",family="ipv4"} 2`,
		`eni_cni_pool_size{network="pods",eni="none",family="ipv6"} 9.223372036854776e+18`,
		`eni_cni_pool_addresses{network="pods",eni="none",family="ipv4",state="allocated"} 1`,
		`eni_cni_pool_addresses{network="pods",eni="none",family="ipv6",state="cooling"} 1`,
		`eni_cni_pool_addresses{network="pods",eni="none",family="ipv4",state="free"} 0`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, b.String())
		}
	}
}
