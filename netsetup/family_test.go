package netsetup

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// nodeAddrs are addresses of the test's node namespace (on lo) that pods
// ping to show that replies find their way back through the host veth.
var (
	nodeAddr4 = netip.MustParseAddr("10.255.0.1")
	nodeAddr6 = netip.MustParseAddr("fd00:ffff::1")
)

func newPodNS(t *testing.T) ns.NetNS {
	t.Helper()
	pod, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pod.Close(); testutils.UnmountNS(pod) })
	return pod
}

func addNodeAddrs(t *testing.T) {
	t.Helper()
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	for _, ip := range []netip.Addr{nodeAddr4, nodeAddr6} {
		if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: hostNet(ip), Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatal(err)
		}
	}
}

// pingBothWays pings each pod address from the node and the node's
// address of its family from the pod, using that pod address as source.
func pingBothWays(node, pod ns.NetNS, ips []netip.Addr) error {
	for _, ip := range ips {
		from := nodeAddr4
		if ip.Is6() {
			from = nodeAddr6
		}
		if err := node.Do(func(ns.NetNS) error { return testutils.Ping(from.String(), ip.String(), 2) }); err != nil {
			return err
		}
		if err := pod.Do(func(ns.NetNS) error { return testutils.Ping(ip.String(), from.String(), 2) }); err != nil {
			return err
		}
	}
	return nil
}

// TestSetupFamilies wires pods of IPv6 only and of both families and
// shows packets flow both ways at once (no duplicate address detection to
// wait for), CHECK passes, a broken route breaks both ping and CHECK, and
// Teardown by name leaves nothing.
func TestSetupFamilies(t *testing.T) {
	for _, tt := range []struct {
		name    string
		ip, ip6 netip.Addr
	}{
		{"ipv6", netip.MustParseAddr("fd00:5::7"), netip.Addr{}},
		{"dual", netip.MustParseAddr("10.0.5.7"), netip.MustParseAddr("fd00:5::8")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			node, pod := newNS(t), newPodNS(t)
			p := Pod{Netns: pod.Path(), IfName: "eth0", HostVeth: HostVethName("eni", tt.name, "eth0"), IP: tt.ip, IP6: tt.ip6, MTU: 9001}
			_ = node.Do(func(ns.NetNS) error {
				addNodeAddrs(t)
				l, err := Setup(p)
				if err != nil {
					t.Fatalf("Setup: %v", err)
				}
				if !l.Default {
					t.Error("the first interface does not carry the default route")
				}
				if _, err := Check(p); err != nil {
					t.Errorf("Check after Setup: %v", err)
				}
				checkIPv6Settings(t, p)
				return nil
			})
			checkPodSide(t, pod, p)
			if err := pingBothWays(node, pod, p.addrs()); err != nil {
				t.Fatalf("ping: %v", err)
			}
			_ = node.Do(func(ns.NetNS) error {
				route := &netlink.Route{LinkIndex: mustLink(t, p.HostVeth).Attrs().Index, Dst: hostNet(p.addrs()[len(p.addrs())-1]), Scope: netlink.SCOPE_LINK}
				if err := netlink.RouteDel(route); err != nil {
					t.Fatal(err)
				}
				if _, err := Check(p); err == nil || !strings.Contains(err.Error(), "no host route") {
					t.Errorf("Check without the host route: %v", err)
				}
				return nil
			})
			if err := pingBothWays(node, pod, p.addrs()); err == nil {
				t.Error("ping went through without the host route")
			}
			_ = node.Do(func(ns.NetNS) error {
				if err := Teardown(p.HostVeth, p.addrs()...); err != nil {
					t.Fatalf("Teardown: %v", err)
				}
				if rules, _ := OurRules(); len(rules) != 0 {
					t.Errorf("rules left: %+v", rules)
				}
				if _, err := netlink.LinkByName(p.HostVeth); err == nil {
					t.Error("host veth left")
				}
				for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
					routes, _ := netlink.RouteList(nil, fam)
					for _, r := range routes {
						if a, ok := isHostNet(r.Dst); ok && (a == p.IP || a == p.IP6) {
							t.Errorf("route left: %v", r)
						}
					}
				}
				return nil
			})
		})
	}
}

func mustLink(t *testing.T, name string) netlink.Link {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// checkIPv6Settings: the host veth owns fe80::1, skips duplicate address
// detection, and the node forwards IPv6.
func checkIPv6Settings(t *testing.T, p Pod) {
	t.Helper()
	if b, _ := os.ReadFile("/proc/sys/net/ipv6/conf/" + p.HostVeth + "/accept_dad"); strings.TrimSpace(string(b)) != "0" {
		t.Errorf("accept_dad on %s is %q", p.HostVeth, b)
	}
	if b, _ := os.ReadFile("/proc/sys/net/ipv6/conf/all/forwarding"); strings.TrimSpace(string(b)) != "1" {
		t.Errorf("ipv6 forwarding is %q", b)
	}
	rules, _ := OurRules()
	for _, ip := range p.addrs() {
		found := false
		for _, r := range rules {
			found = found || (r.IP == ip && r.Priority == RulePriorityToPod && !r.From)
		}
		if !found {
			t.Errorf("no rule to %s lookup main in %+v", ip, rules)
		}
	}
}

// checkPodSide: the pod's IPv6 address is usable at once (not tentative),
// its default route is via fe80::1, pinned to the host veth's MAC.
func checkPodSide(t *testing.T, pod ns.NetNS, p Pod) {
	t.Helper()
	_ = pod.Do(func(ns.NetNS) error {
		link := mustLink(t, p.IfName)
		addrs, _ := netlink.AddrList(link, unix.AF_INET6)
		var global *netlink.Addr
		for i := range addrs {
			if a, _ := addrOf(addrs[i].IP); a == p.addrs()[len(p.addrs())-1] {
				global = &addrs[i]
			}
		}
		if global == nil || global.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
			t.Errorf("pod's IPv6 address %+v", global)
		}
		routes, _ := netlink.RouteList(link, unix.AF_INET6)
		def := false
		for _, r := range routes {
			def = def || (isDefaultRoute(r) && isGateway(r, GatewayIP6()))
		}
		if !def {
			t.Errorf("no default via %s in %v", GatewayIP6(), routes)
		}
		neighs, _ := netlink.NeighList(link.Attrs().Index, unix.AF_INET6)
		pinned := false
		for _, n := range neighs {
			pinned = pinned || (n.IP.Equal(net.ParseIP("fe80::1")) && n.State == netlink.NUD_PERMANENT)
		}
		if !pinned {
			t.Errorf("fe80::1 not pinned: %v", neighs)
		}
		return nil
	})
}

// TestSecondDualStackInterface: a second dual-stack interface of a pod
// (Multus' net1) gets its gateway routes of both families in a table of
// its own with `from` rules for both addresses, so replies to its
// addresses leave by it; the first keeps the default routes in main;
// CHECK passes for both, and DEL of net1 removes its pod-side rules.
func TestSecondDualStackInterface(t *testing.T) {
	node, pod := newNS(t), newPodNS(t)
	eth0 := Pod{Netns: pod.Path(), IfName: "eth0", HostVeth: HostVethName("eni", "m", "eth0"),
		IP: netip.MustParseAddr("10.0.6.1"), IP6: netip.MustParseAddr("fd00:6::1"), MTU: 1500}
	net1 := Pod{Netns: pod.Path(), IfName: "net1", HostVeth: HostVethName("eni", "m", "net1"),
		IP: netip.MustParseAddr("10.0.7.1"), IP6: netip.MustParseAddr("fd00:7::1"), MTU: 1500}
	_ = node.Do(func(ns.NetNS) error {
		addNodeAddrs(t)
		for _, p := range []Pod{eth0, net1} {
			if _, err := Setup(p); err != nil {
				t.Fatalf("Setup %s: %v", p.IfName, err)
			}
		}
		for _, p := range []Pod{eth0, net1} {
			if l, err := Check(p); err != nil || l.Default != (p.IfName == "eth0") {
				t.Errorf("Check %s: default %v, %v", p.IfName, l.Default, err)
			}
		}
		return nil
	})
	table := podTable(ifIndex(t, pod.Path(), "net1"))
	_ = pod.Do(func(ns.NetNS) error {
		for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
			rules, _ := netlink.RuleList(fam)
			n := 0
			for _, r := range rules {
				if r.Priority == PodRulePriority && r.Table == table {
					n++
				}
			}
			if n != 1 {
				t.Errorf("family %d: %d rules to table %d, want net1's one", fam, n, table)
			}
		}
		return nil
	})
	if err := pingBothWays(node, pod, net1.addrs()); err != nil {
		t.Errorf("through net1: %v", err)
	}
	if err := pingBothWays(node, pod, eth0.addrs()); err != nil {
		t.Errorf("through eth0: %v", err)
	}
	_ = node.Do(func(ns.NetNS) error {
		atts := []Attachment{{HostVeth: net1.HostVeth, IP: net1.IP, Netns: pod.Path(), IfName: "net1"}, {HostVeth: net1.HostVeth, IP: net1.IP6, Netns: pod.Path(), IfName: "net1"}}
		if err := Unroute(atts); err != nil {
			t.Fatal(err)
		}
		return DeleteVeths(net1.HostVeth)
	})
	_ = pod.Do(func(ns.NetNS) error {
		for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
			rules, _ := netlink.RuleList(fam)
			for _, r := range rules {
				if r.Priority == PodRulePriority {
					t.Errorf("pod rule left after DEL of net1: %v", r)
				}
			}
		}
		return nil
	})
}

// TestFirstPacketAfterSetup: the first packet for an IPv6 pod, sent the
// moment Setup returns, arrives, with no retry, many times in a row while
// another namespace churns links (contending for the RTNL lock the
// kernel's link-watch work needs). Before Setup waited, the host veth
// could still drop what it sent (its queue not yet given by link-watch)
// and the pod could still lack the local route of its address (added by
// the address work queue): up to 1 first ping in 10 lost under load.
func TestFirstPacketAfterSetup(t *testing.T) {
	node, pod, churn := newNS(t), newPodNS(t), newPodNS(t)
	_ = node.Do(func(ns.NetNS) error { addNodeAddrs(t); return nil })
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = churn.Do(func(ns.NetNS) error {
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "churn0"}, PeerName: "churn1"}
				if netlink.LinkAdd(v) == nil {
					_ = netlink.LinkSetUp(v)
					_ = netlink.LinkDel(v)
				}
			}
		})
	}()
	t.Cleanup(func() { close(stop); <-done })
	ip := netip.MustParseAddr("fd00:5::7")
	for i := range 100 {
		p := Pod{Netns: pod.Path(), IfName: "eth0", HostVeth: HostVethName("eni", "first", "eth0"), IP: ip, MTU: 9001}
		err := node.Do(func(ns.NetNS) error {
			if _, err := Setup(p); err != nil {
				t.Fatalf("Setup: %v", err)
			}
			err := testutils.Ping(nodeAddr6.String(), ip.String(), 1)
			if terr := Teardown(p.HostVeth, ip); terr != nil {
				t.Fatalf("Teardown: %v", terr)
			}
			return err
		})
		if err != nil {
			t.Fatalf("round %d: the first ping after Setup was lost: %v", i, err)
		}
	}
}
