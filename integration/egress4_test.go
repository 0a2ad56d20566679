package integration

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/eni-cni/eni-cni/gc/crifake"
)

// The IPv4 "internet" of the egress tests: a namespace behind the node's
// uplink, with an address of its own on lo and no route back to the pods'
// link-local egress range, so a reply comes back only to the node's
// masqueraded address.
var (
	uplinkNode     = netip.MustParsePrefix("198.51.100.1/24")
	uplinkInternet = netip.MustParsePrefix("198.51.100.2/24")
	internetHost   = netip.MustParseAddr("203.0.113.7")
)

// withInternet gives the node an uplink to a namespace playing the IPv4
// internet and, when route is set, its IPv4 default route through it.
func withInternet(t *testing.T, n *node) *netNS {
	t.Helper()
	inet := newNetNS(t)
	ih := openHandle(t, inet.path())
	t.Cleanup(ih.Close)
	up := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0", Namespace: netlink.NsFd(int(n.ns.Fd()))}, PeerName: "dn0", PeerNamespace: netlink.NsFd(int(inet.ns.Fd()))}
	if err := n.h.LinkAdd(up); err != nil {
		t.Fatalf("uplink: %v", err)
	}
	for _, side := range []struct {
		h    *netlink.Handle
		name string
		addr netip.Prefix
	}{{n.h, "up0", uplinkNode}, {ih, "dn0", uplinkInternet}} {
		l, err := side.h.LinkByName(side.name)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := netlink.ParseAddr(side.addr.String())
		if err := side.h.AddrAdd(l, a); err != nil {
			t.Fatal(err)
		}
		if err := side.h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	lo, _ := ih.LinkByName("lo")
	_ = ih.LinkSetUp(lo)
	if err := ih.AddrAdd(lo, &netlink.Addr{IPNet: netlink.NewIPNet(internetHost.AsSlice())}); err != nil {
		t.Fatal(err)
	}
	return inet
}

func addDefaultVia(t *testing.T, n *node) {
	t.Helper()
	l, _ := n.h.LinkByName("up0")
	if err := n.h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: uplinkInternet.Addr().AsSlice()}); err != nil {
		t.Fatalf("node default route: %v", err)
	}
}

// egressOf is the egress address the state records for each container.
func (nw *network) egressOf(t *testing.T) map[string]netip.Addr {
	t.Helper()
	var st struct {
		Allocations []struct {
			ContainerID string     `json:"containerID"`
			Egress4     netip.Addr `json:"egress4"`
		} `json:"allocations"`
	}
	if err := json.Unmarshal(nw.stateBytes(t), &st); err != nil {
		t.Fatal(err)
	}
	out := map[string]netip.Addr{}
	for _, a := range st.Allocations {
		if a.Egress4.IsValid() {
			out[a.ContainerID] = a.Egress4
		}
	}
	return out
}

// reachesInternet pings the internet's address from the pod (its IPv4
// source is its egress address, the only IPv4 address it has).
func reachesInternet(t *testing.T, p *pod) error {
	t.Helper()
	return ping(t.Context(), p.path(), internetHost)
}

// TestEgress4 gives IPv6-only pods IPv4 egress through the node: a pod
// pings an IPv4 address outside its namespace and the reply comes back
// (the internet has no route to the link-local range: only the masquerade
// brings it back). The egress address is not in the result, CHECK fails
// without its route or without the masquerade, a repeated ADD and repair
// restore them, gc, repair after a lost state and DEL with an empty netns
// cover it; a node without an IPv4 default route gives no egress address.
func TestEgress4(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatal("iptables not installed")
	}
	n := newFamilyNode(t)
	withInternet(t, n)
	nw := newFamilyNetwork(t, n, familyCase{"ipv6", []string{"ipv6"}, []string{"fd00:99:50::/125"}})
	pods := newPods(t, 4)

	// No IPv4 way out: no egress address, the IPv6 path as before.
	nw.add(t, pods[3])
	if e := nw.egressOf(t); len(e) != 0 {
		t.Errorf("egress without an IPv4 default route: %v", e)
	}
	nw.del(t, pods[3], pods[3].path())

	addDefaultVia(t, n)
	res, raw := nw.add(t, pods[0])
	ips := resultAddrs(t, res)
	if len(ips) != 1 || !ips[0].Is6() {
		t.Fatalf("result lists %v, want the pod's IPv6 address alone", ips)
	}
	egress := nw.egressOf(t)[pods[0].containerID]
	if !netip.MustParsePrefix("169.254.172.0/22").Contains(egress) {
		t.Fatalf("egress address %s", egress)
	}
	veth := hostVethOf(t, res)
	assertFamiliesWired(t, n, []netip.Addr{ips[0], egress}, veth)
	if err := flows(t, n, pods[0], ips); err != nil {
		t.Fatal(err)
	}
	if err := reachesInternet(t, pods[0]); err != nil {
		t.Fatalf("pod to the IPv4 internet: %v", err)
	}
	nw.list(t)
	for _, args := range [][]string{{"list"}, {"list", "--json"}} {
		if o := nw.cli(t, args[0], args[1:]...); !strings.Contains(string(o.stdout), egress.String()) {
			t.Errorf("%v does not show the egress address: %s", args, o)
		}
	}
	if o := nw.check(t, pods[0], raw); o.exit != 0 {
		t.Errorf("CHECK: %s", o)
	}

	// The masquerade flushed: no reply, CHECK fails; repair restores it.
	if o, err := runIn(t.Context(), n.path(), nil, nil, "iptables", "-t", "nat", "-F", "ENI-CNI-EGRESS4"); err != nil || o.exit != 0 {
		t.Fatalf("flush: %v %s", err, o)
	}
	if err := reachesInternet(t, pods[0]); err == nil {
		t.Error("a reply came back without the masquerade")
	}
	if o := nw.check(t, pods[0], raw); o.exit == 0 || !strings.Contains(string(o.stdout), "masquerade") {
		t.Errorf("CHECK without the masquerade: %s", o)
	}
	cri := crifake.Start(t)
	cri.SetSandboxes(readySandboxes(pods[0])...)
	if o := nw.cli(t, "repair", "--cri-endpoint", cri.Endpoint()); o.exit != 0 {
		t.Fatalf("repair: %s", o)
	}
	if err := reachesInternet(t, pods[0]); err != nil {
		t.Errorf("after repair: %v", err)
	}

	// The egress host route gone: CHECK fails, a repeated ADD rewires.
	link, _ := n.h.LinkByName(veth)
	if err := n.h.RouteDel(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: netlink.NewIPNet(egress.AsSlice()), Scope: netlink.SCOPE_LINK}); err != nil {
		t.Fatal(err)
	}
	if o := nw.check(t, pods[0], raw); o.exit == 0 || !strings.Contains(string(o.stdout), "no host route "+egress.String()) {
		t.Errorf("CHECK without the egress host route: %s", o)
	}
	if err := reachesInternet(t, pods[0]); err == nil {
		t.Error("a reply came back without the egress host route")
	}
	nw.add(t, pods[0])
	if err := reachesInternet(t, pods[0]); err != nil {
		t.Errorf("after the repeated ADD: %v", err)
	}

	// gc frees a gone pod's egress address with its IPv6 one.
	gone := nw.addFamilies(t, pods[1])
	goneEgress := nw.egressOf(t)[pods[1].containerID]
	if err := reachesInternet(t, pods[1]); err != nil {
		t.Errorf("second pod: %v", err)
	}
	nw.backdate(t, 3600*time.Second, pods[0], pods[1])
	if o := nw.gcVerb(t, pods[0]); o.exit != 0 {
		t.Fatalf("GC: %s", o)
	}
	assertFamiliesGone(t, n, append(resultAddrs(t, gone.res), goneEgress), gone.veth)
	if _, cooling := nw.stateAddrs(t); !slices.Contains(cooling, goneEgress.String()) {
		t.Errorf("after GC: cooling %v lacks %s", cooling, goneEgress)
	}

	// Lost state: repair records the egress address with its pod.
	if err := os.Remove(nw.statePath()); err != nil {
		t.Fatal(err)
	}
	if o := nw.cli(t, "repair", "--cri-endpoint", cri.Endpoint()); o.exit != 0 {
		t.Fatalf("repair of a lost state: %s", o)
	}
	if got := nw.egressOf(t)[pods[0].containerID]; got != egress {
		t.Errorf("repair recorded egress %s, want %s", got, egress)
	}
	nw.add(t, pods[2])
	if e := nw.egressOf(t)[pods[2].containerID]; e == egress || !e.IsValid() {
		t.Errorf("a new pod after repair got egress %s (the live pod has %s)", e, egress)
	}
	if err := reachesInternet(t, pods[2]); err != nil {
		t.Errorf("pod added after repair: %v", err)
	}

	// DEL without a netns frees and unroutes both addresses.
	nw.del(t, pods[0], "")
	assertFamiliesGone(t, n, []netip.Addr{ips[0], egress}, veth)
	if _, cooling := nw.stateAddrs(t); !slices.Contains(cooling, egress.String()) {
		t.Errorf("after DEL: cooling %v lacks %s", cooling, egress)
	}
	if _, ok := nw.egressOf(t)[pods[0].containerID]; ok {
		t.Error("DEL left the egress allocation")
	}
}

// TestEgress4DelForgetsFlows: DEL forgets the conntrack entries of the
// pod's masqueraded flows. A peer that keeps sending (a UDP stream)
// refreshes its entry for ever, so a pod given the address after the
// cooldown was handed the old pod's replies (seen with a UDP sender one
// packet a second: the new pod answered each with port unreachable).
func TestEgress4DelForgetsFlows(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatal("iptables not installed")
	}
	n := newFamilyNode(t)
	withInternet(t, n)
	addDefaultVia(t, n)
	nw := newFamilyNetwork(t, n, familyCase{"ipv6", []string{"ipv6"}, []string{"fd00:99:50::/125"}})
	pods := newPods(t, 1)
	nw.add(t, pods[0])
	egress := nw.egressOf(t)[pods[0].containerID]
	if err := reachesInternet(t, pods[0]); err != nil {
		t.Fatalf("pod to the IPv4 internet: %v", err)
	}
	if flowsFrom(t, n, egress) == 0 {
		t.Fatalf("no conntrack entry from %s after a ping", egress)
	}
	nw.del(t, pods[0], pods[0].path())
	if c := flowsFrom(t, n, egress); c != 0 {
		t.Errorf("after DEL: %d conntrack entries from the freed egress address %s", c, egress)
	}
}

// flowsFrom counts the node's conntrack entries whose original source is ip.
func flowsFrom(t *testing.T, n *node, ip netip.Addr) int {
	t.Helper()
	flows, err := n.h.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
	if err != nil {
		t.Fatalf("list conntrack: %v", err)
	}
	c := 0
	for _, f := range flows {
		if a, ok := netip.AddrFromSlice(f.Forward.SrcIP); ok && a.Unmap() == ip {
			c++
		}
	}
	return c
}
