package netsetup

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// An IPv6-only pod with an egress address has it on its one interface
// with an IPv4 default via 169.254.1.1, the node routes it back through
// the host veth; packets flow both ways in both families, CHECK passes and
// fails without the egress host route, and Teardown of the wired
// addresses leaves nothing. The ENI table's `from` rule is never made for
// the egress address: it leaves by the node's own route, masqueraded.
func TestSetupEgress4(t *testing.T) {
	node, pod := newNS(t), newPodNS(t)
	p := Pod{Netns: pod.Path(), IfName: "eth0", HostVeth: HostVethName("eni", "egress", "eth0"),
		IP: netip.MustParseAddr("fd00:5::9"), Egress4: netip.MustParseAddr("169.254.172.9"), MTU: 9001, Table: 3}
	_ = node.Do(func(ns.NetNS) error {
		addNodeAddrs(t)
		if _, err := Setup(p); err != nil {
			t.Fatalf("Setup: %v", err)
		}
		if _, err := Check(p); err != nil {
			t.Errorf("Check after Setup: %v", err)
		}
		rules, _ := OurRules()
		for _, r := range rules {
			if r.IP == p.Egress4 && r.From {
				t.Errorf("a from rule for the egress address: %+v", r)
			}
		}
		return nil
	})
	_ = pod.Do(func(ns.NetNS) error {
		routes, _ := netlink.RouteList(mustLink(t, "eth0"), unix.AF_INET)
		def := false
		for _, r := range routes {
			def = def || (isDefaultRoute(r) && isGateway(r, GatewayIP()))
		}
		if !def {
			t.Errorf("no IPv4 default via %s: %v", GatewayIP(), routes)
		}
		return nil
	})
	if err := pingBothWays(node, pod, []netip.Addr{p.IP, p.Egress4}); err != nil {
		t.Fatalf("ping: %v", err)
	}
	_ = node.Do(func(ns.NetNS) error {
		route := &netlink.Route{LinkIndex: mustLink(t, p.HostVeth).Attrs().Index, Dst: hostNet(p.Egress4), Scope: netlink.SCOPE_LINK}
		if err := netlink.RouteDel(route); err != nil {
			t.Fatal(err)
		}
		if _, err := Check(p); err == nil || !strings.Contains(err.Error(), "no host route 169.254.172.9") {
			t.Errorf("Check without the egress host route: %v", err)
		}
		if err := Teardown(p.HostVeth, p.addrs()...); err != nil {
			t.Fatalf("Teardown: %v", err)
		}
		if rules, _ := OurRules(); len(rules) != 0 {
			t.Errorf("rules left: %+v", rules)
		}
		return nil
	})
}
