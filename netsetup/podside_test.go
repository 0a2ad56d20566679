package netsetup

import (
	"net/netip"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// podNS is a throwaway pod namespace (the caller has skipped without root).
func podNS(t *testing.T) string {
	t.Helper()
	pod, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pod.Close(); testutils.UnmountNS(pod) })
	return pod.Path()
}

// podState returns the pod's main-table defaults (by ifindex) and its
// rules at PodRulePriority (by source).
func podState(t *testing.T, path string) (defaults []int, rules []string) {
	t.Helper()
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		routes, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: mainTable}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if isDefaultRoute(r) {
				defaults = append(defaults, r.LinkIndex)
			}
		}
		rs, err := netlink.RuleList(unix.AF_INET)
		for _, r := range rs {
			if r.Priority == PodRulePriority && r.Src != nil {
				rules = append(rules, r.Src.String())
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return defaults, rules
}

func ifIndex(t *testing.T, path, name string) int {
	t.Helper()
	var idx int
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		l, err := netlink.LinkByName(name)
		if err == nil {
			idx = l.Attrs().Index
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// TestDefaultAlwaysMovesTheCarrierAside: a second interface told to take
// the default route (defaultRoute: true) used to replace eth0's gateway
// and default routes in main, leaving eth0 without any (CHECK failed),
// and the pod with no route at all once net1 went. eth0 now gets its own
// table and rule first; net1's DEL hands main's routes back to it.
func TestDefaultAlwaysMovesTheCarrierAside(t *testing.T) {
	node := newNS(t)
	pod := podNS(t)
	eth0 := Pod{Netns: pod, IfName: "eth0", HostVeth: HostVethName("eni", "d1", "eth0"), IP: netip.MustParseAddr("10.0.6.2"), MTU: 1500}
	net1 := Pod{Netns: pod, IfName: "net1", HostVeth: HostVethName("eni", "d1", "net1"), IP: netip.MustParseAddr("10.0.7.2"), MTU: 1500, Default: DefaultAlways}
	err := node.Do(func(ns.NetNS) error {
		if l, err := Setup(eth0); err != nil || !l.Default {
			t.Fatalf("Setup eth0: %v, carries the default %t", err, l.Default)
		}
		if l, err := Setup(net1); err != nil || !l.Default {
			t.Fatalf("Setup net1: %v, carries the default %t", err, l.Default)
		}
		for _, p := range []Pod{eth0, net1} {
			if _, err := Check(p); err != nil {
				t.Errorf("Check %s after net1 took the default: %v", p.IfName, err)
			}
		}
		defs, rules := podState(t, pod)
		if len(defs) != 1 || defs[0] != ifIndex(t, pod, "net1") || len(rules) != 1 || rules[0] != "10.0.6.2/32" {
			t.Errorf("pod defaults %v (net1 is %d), rules from %v; want net1's only, and eth0's rule", defs, ifIndex(t, pod, "net1"), rules)
		}
		if _, err := Setup(net1); err != nil { // a repeated ADD
			t.Fatalf("Setup net1 again: %v", err)
		}
		del := Attachment{HostVeth: net1.HostVeth, IP: net1.IP, Netns: pod, IfName: "net1"}
		if err := Unroute([]Attachment{del}); err != nil {
			t.Fatalf("Unroute net1: %v", err)
		}
		if err := DeleteVeths(net1.HostVeth); err != nil {
			t.Fatal(err)
		}
		defs, _ = podState(t, pod)
		if len(defs) != 1 || defs[0] != ifIndex(t, pod, "eth0") {
			t.Errorf("pod defaults after net1's DEL %v, want eth0's (%d)", defs, ifIndex(t, pod, "eth0"))
		}
		if l, err := Check(eth0); err != nil || !l.Default {
			t.Errorf("Check eth0 after net1's DEL: %v, carries the default %t", err, l.Default)
		}
		return Teardown(eth0.HostVeth, eth0.IP)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDelRemovesPodRule: the pod-side `from IP lookup 1000+ifindex` of an
// interface without the default route outlives its link; DEL removes it
// when the pod is there, so DEL and re-ADD do not pile them up, and a
// DEL whose netns is gone or not one still succeeds.
func TestDelRemovesPodRule(t *testing.T) {
	node := newNS(t)
	pod := podNS(t)
	eth0 := Pod{Netns: pod, IfName: "eth0", HostVeth: HostVethName("eni", "r1", "eth0"), IP: netip.MustParseAddr("10.0.8.2"), MTU: 1500}
	net1 := Pod{Netns: pod, IfName: "net1", HostVeth: HostVethName("eni", "r1", "net1"), IP: netip.MustParseAddr("10.0.9.2"), MTU: 1500}
	err := node.Do(func(ns.NetNS) error {
		if _, err := Setup(eth0); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if l, err := Setup(net1); err != nil || l.Default {
				t.Fatalf("Setup net1: %v, carries the default %t", err, l.Default)
			}
			del := Attachment{HostVeth: net1.HostVeth, IP: net1.IP, Netns: pod, IfName: "net1"}
			if err := Unroute([]Attachment{del}); err != nil {
				t.Fatalf("Unroute net1: %v", err)
			}
			if err := DeleteVeths(net1.HostVeth); err != nil {
				t.Fatal(err)
			}
		}
		if _, rules := podState(t, pod); len(rules) != 0 {
			t.Errorf("pod rules left after DEL of net1: %v", rules)
		}
		if _, err := Check(eth0); err != nil {
			t.Errorf("Check eth0: %v", err)
		}
		for _, netns := range []string{"/var/run/netns/eni-missing", "/proc/self/status", "/proc/self/ns/net"} {
			a := Attachment{HostVeth: eth0.HostVeth, IP: eth0.IP, Netns: netns, IfName: "eth0"}
			if err := Unroute([]Attachment{a}); err != nil {
				t.Errorf("Unroute with CNI_NETNS %s: %v", netns, err)
			}
		}
		return Teardown(eth0.HostVeth, eth0.IP)
	})
	if err != nil {
		t.Fatal(err)
	}
}
