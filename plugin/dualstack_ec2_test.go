package plugin

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/metrics"
	"github.com/eni-cni/eni-cni/netsetup"
)

// newDualNode is a dry node of a dual-stack network on the ec2 pool in a
// subnet with an IPv6 /64, its families listed as families.
func newDualNode(t *testing.T, instanceType, families, extra string) *dryNode {
	t.Helper()
	n := newDryNodeOf(t, ec2fake.Config{InstanceType: instanceType, Subnets: []ec2fake.SubnetConfig{{CIDR: "10.0.0.0/20", IPv6CIDR: "2600:1f18:abcd:1200::/64"}}}, extra)
	n.conf = strings.Replace(n.conf, `"pool"`, `"ipFamilies":`+families+`,"pool"`, 1)
	return n
}

// ADDs at once on a fresh dual-stack node wait for the one pass they
// start, which delegates the /80 and assigns IPv4 addresses; each gets
// one address of each family, in the configured order, and its DEL frees
// both together.
func TestDryPoolDualStack(t *testing.T) {
	n := newDualNode(t, "t3.large", `["ipv6","ipv4"]`, "")
	cids := []string{"a", "b", "c", "d"}
	for cid, err := range n.addAll(cids...) {
		if err != nil {
			t.Errorf("ADD %s: %v", cid, err)
		}
	}
	n.wg.Wait()
	st := n.state()
	if len(st.Allocations) != 4 || len(st.Demands) != 0 {
		t.Fatalf("allocations %+v, demands %+v", st.Allocations, st.Demands)
	}
	primary, _ := st.EC2.PrimaryENI()
	if len(primary.IPv6Prefixes) != 1 {
		t.Fatalf("primary ENI prefixes %+v", primary.IPv6Prefixes)
	}
	pfx := primary.IPv6Prefixes[0].Prefix
	for _, a := range st.Allocations {
		if !a.IP.Is4() || !pfx.Contains(a.IP6) || a.ENI != primary.ID {
			t.Errorf("%s holds %s and %s on %s, want an IPv4 address and one of %s", a.ContainerID, a.IP, a.IP6, a.ENI, pfx)
		}
	}
	if c := n.fake.Calls(); c["AssignIpv6Addresses"] != 1 || c["AssignPrivateIpAddresses"] < 1 {
		t.Errorf("EC2 calls %v", c)
	}

	p, _ := n.plugin()
	res, err := p.add(context.Background(), att("a")) // the repeated ADD: its result
	if err != nil {
		t.Fatal(err)
	}
	if len(res.IPs) != 2 || !res.IPs[0].Address.IP.To16().Equal(res.IPs[0].Address.IP) || res.IPs[0].Address.IP.To4() != nil || res.IPs[1].Address.IP.To4() == nil {
		t.Errorf("result IPs %v, want IPv6 then IPv4 as ipFamilies lists them", resultIPs(res))
	}
	a := st.Allocations[st.Find(att("a").Key)]
	if err := p.del(context.Background(), att("a").Key, ""); err != nil {
		t.Fatal(err)
	}
	st = n.state()
	cooling := map[netip.Addr]bool{}
	for _, c := range st.Cooling {
		cooling[c.IP] = true
	}
	if st.Find(att("a").Key) >= 0 || !cooling[a.IP] || !cooling[a.IP6] {
		t.Errorf("after DEL: allocation left %v, cooling %v, want %s and %s cooling", st.Find(att("a").Key) >= 0, st.Cooling, a.IP, a.IP6)
	}
}

// A dual-stack node whose every ENI is full of IPv4 addresses: ADD fails
// at once as on an IPv4 node (node is full, kubelet's maxPods the IPv4
// figure), though the /80 has room, and takes nothing of either family.
func TestDryPoolDualStackNodeFull(t *testing.T) {
	n := newDualNode(t, "t3.small", `["ipv4","ipv6"]`, `,"warmIPTarget":50`) // 3 ENIs x 3 secondaries
	if err := n.pass(); err != nil {
		t.Fatal(err)
	}
	p, _ := n.plugin()
	for i := range 9 {
		if _, _, err := p.Mgr.Allocate(context.Background(), alloc.Request{Key: alloc.Key{Network: "pods", ContainerID: fmt.Sprintf("full%d", i), IfName: "eth0"}}); err != nil {
			t.Fatal(err)
		}
	}
	before := n.state()
	_, err := p.add(context.Background(), att("one-too-many"))
	ce := toCNIError(err)
	if ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, "node is full") || !strings.Contains(ce.Msg, "maxPods to 11") {
		t.Errorf("error %d %q, want 11: node is full, maxPods to 11", ce.Code, ce.Msg)
	}
	after := n.state()
	if len(after.Allocations) != 9 || after.LastIP6 != before.LastIP6 || len(after.Demands) != 0 || n.starts.Load() != 0 {
		t.Errorf("%d allocations, last IPv6 %s (was %s), demands %+v, %d warm starts: want nothing taken nor started",
			len(after.Allocations), after.LastIP6, before.LastIP6, after.Demands, n.starts.Load())
	}
}

// The pool metrics of a dual-stack ec2 pool are per ENI and family, the
// /80 counted, not walked (2^48 addresses: the walk never ended).
func TestPoolMetricsEC2DualStack(t *testing.T) {
	n := newDualNode(t, "t3.large", `["ipv4","ipv6"]`, `,"warmIPTarget":3`)
	if err := n.pass(); err != nil {
		t.Fatal(err)
	}
	p, _ := n.plugin()
	for i := range 2 {
		if _, _, err := p.Mgr.Allocate(context.Background(), alloc.Request{Key: alloc.Key{Network: "pods", ContainerID: fmt.Sprintf("m%d", i), IfName: "eth0"}}); err != nil {
			t.Fatal(err)
		}
	}
	st := n.state()
	primary, _ := st.EC2.PrimaryENI()
	var b strings.Builder
	if err := metrics.Write(&b, poolFamilies(metrics.Label{Name: "network", Value: "pods"}, st, p.Cfg.Pool, time.Now())); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`eni_cni_pool_size{network="pods",eni="` + primary.ID + `",family="ipv4"} 3`,
		`eni_cni_pool_size{network="pods",eni="` + primary.ID + `",family="ipv6"} 2.81474976710655e+14`,
		`eni_cni_pool_addresses{network="pods",eni="` + primary.ID + `",family="ipv4",state="allocated"} 2`,
		`eni_cni_pool_addresses{network="pods",eni="` + primary.ID + `",family="ipv6",state="allocated"} 2`,
		`eni_cni_pool_addresses{network="pods",eni="` + primary.ID + `",family="ipv4",state="free"} 1`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, b.String())
		}
	}
}

// Repair rebuilds a dual-stack ec2 pod's allocation on the ENI of its
// IPv4 address (whose table it uses), whichever family the node lists
// first; its IPv6 address is of the primary ENI's /80.
func TestRepairDualStackEC2ENI(t *testing.T) {
	ip4, ip6 := netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("2600:1f18:abcd:1200:1::5")
	base := alloc.NewState("b")
	base.EC2 = &section.EC2{
		ENIs: []section.ENI{
			{ID: "eni-1", IPv6Prefixes: []section.IPv6Prefix{{Prefix: netip.MustParsePrefix("2600:1f18:abcd:1200:1::/80")}}},
			{ID: "eni-2"},
		},
		Addrs: []section.Addr{{IP: ip4, ENI: "eni-2"}},
	}
	veth := netsetup.HostVethName("eni", "sb1", "eth0")
	for _, ips := range [][]netip.Addr{{ip4, ip6}, {ip6, ip4}} {
		plan := planRepair(repairInput{
			Network: "pods", Prefix: "eni", Base: base,
			Veths:     []netsetup.VethView{{Name: veth, IPs: ips, PeerIfName: "eth0"}},
			Sandboxes: []gc.Sandbox{{ID: "sb1", PodNamespace: "ns", PodName: "web"}},
			Now:       time.Now(),
			ENIOf:     func(ip netip.Addr) string { return eniOf(base, ip) },
		})
		if len(plan.Add) != 1 || plan.Add[0].IP != ip4 || plan.Add[0].IP6 != ip6 || plan.Add[0].ENI != "eni-2" {
			t.Errorf("veth %v: plan %+v, want %s and %s on eni-2", ips, plan.Add, ip4, ip6)
		}
	}
	if got := eniOf(base, ip6); got != "eni-1" {
		t.Errorf("ENI of %s: %q, want the /80's eni-1", ip6, got)
	}
}
