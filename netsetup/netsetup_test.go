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

func TestHostVethName(t *testing.T) {
	a := HostVethName("eni", "3f2a", "eth0")
	if len(a) != 15 || !strings.HasPrefix(a, "eni") || !IsOurVeth("eni", a) {
		t.Errorf("%q", a)
	}
	if a == HostVethName("eni", "3f2a", "eth1") || a != HostVethName("eni", "3f2a", "eth0") {
		t.Error("name must be a function of (containerID, ifname)")
	}
	for _, n := range []string{"eni0", "enifoo", "eniZZZZZZZZZZZZ", "ens5", HostVethName("pod", "x", "eth0")} {
		if IsOurVeth("eni", n) {
			t.Errorf("IsOurVeth(%q)", n)
		}
	}
}

// TestSetupFromRulesAndTeardown wires a pod on a "secondary ENI" table with
// SNAT-limited from rules in throwaway namespaces, then tears it down by
// name after the pod's namespace is gone.
func TestSetupFromRulesAndTeardown(t *testing.T) {
	node := newNS(t)
	pod, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pod.Close(); testutils.UnmountNS(pod) })
	podPath := pod.Path()
	ip := netip.MustParseAddr("10.0.5.7")
	p := Pod{Netns: podPath, IfName: "eth0", HostVeth: HostVethName("eni", "t1", "eth0"), IP: ip, MTU: 9001, Table: 3,
		FromDsts: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("100.64.0.0/16")}}
	err = node.Do(func(ns.NetNS) error {
		if _, err := Setup(p); err != nil {
			t.Fatalf("Setup: %v", err)
		}
		rules, _ := OurRules()
		var from []string
		for _, r := range rules {
			if r.From {
				from = append(from, r.Dst.String())
				if r.Table != 3 || r.Priority != RulePriorityFromPod {
					t.Errorf("from rule %+v", r)
				}
			}
		}
		if strings.Join(from, ",") != "10.0.0.0/16,100.64.0.0/16" && strings.Join(from, ",") != "100.64.0.0/16,10.0.0.0/16" {
			t.Errorf("from rules to %v, want the two VPC CIDRs", from)
		}
		if _, err := Check(p); err != nil {
			t.Errorf("Check after Setup: %v", err)
		}
		pod.Close()
		testutils.UnmountNS(pod) // the pod is gone; DEL has only names
		if err := Teardown(p.HostVeth, ip); err != nil {
			t.Fatalf("Teardown: %v", err)
		}
		rules, _ = OurRules()
		if len(rules) != 0 {
			t.Errorf("rules left: %+v", rules)
		}
		if _, err := netlink.LinkByName(p.HostVeth); err == nil {
			t.Error("host veth left")
		}
		routes, _ := netlink.RouteList(nil, unix.AF_INET)
		for _, r := range routes {
			if r.Dst != nil && r.Dst.IP.Equal(ip.AsSlice()) {
				t.Errorf("route left: %v", r)
			}
		}
		return Teardown(p.HostVeth, ip) // twice is fine
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDeleteVethsBatch deletes several veths in one kernel request (a
// link group) and skips names that are already gone; links outside the
// batch stay.
func TestDeleteVethsBatch(t *testing.T) {
	node := newNS(t)
	err := node.Do(func(ns.NetNS) error {
		var names []string
		for _, n := range []string{"a", "b", "c", "keep"} {
			name := HostVethName("eni", n, "eth0")
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "p" + n}); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		}
		if err := DeleteVeths(names[0], names[1], "enimissing00000", names[2]); err != nil {
			t.Fatalf("DeleteVeths: %v", err)
		}
		for _, n := range names[:3] {
			if _, err := netlink.LinkByName(n); err == nil {
				t.Errorf("%s still there", n)
			}
		}
		if _, err := netlink.LinkByName(names[3]); err != nil {
			t.Errorf("a veth outside the batch was deleted: %v", err)
		}
		if _, err := netlink.LinkByName("pkeep"); err != nil {
			t.Errorf("the kept veth's peer went: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// newNS is a throwaway network namespace for a privileged test; the test is
// skipped when not root.
func newNS(t *testing.T) ns.NetNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces")
	}
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(); testutils.UnmountNS(n) })
	return n
}

// TestReassertSkipsPodsBeingDeleted: warm re-asserts pod rules from a list
// of allocations read before a DEL that has since removed the pod's route
// and rules; putting the rules back would leave them behind the DEL
// (seen in the kubelet suite: `to 10.76.0.7 lookup main` after teardown).
func TestReassertSkipsPodsBeingDeleted(t *testing.T) {
	node := newNS(t)
	err := node.Do(func(ns.NetNS) error {
		name := HostVethName("eni", "live", "eth0")
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "plive"}); err != nil {
			t.Fatal(err)
		}
		link, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
		live, gone := netip.MustParseAddr("10.77.0.2"), netip.MustParseAddr("10.77.0.3")
		dst := &net.IPNet{IP: live.AsSlice(), Mask: net.CIDRMask(32, 32)}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}); err != nil {
			t.Fatal(err)
		}
		repaired, err := ReassertPodRules([]PodRules{{IP: live}, {IP: gone}})
		if err != nil {
			t.Fatalf("ReassertPodRules: %v", err)
		}
		if len(repaired) != 1 {
			t.Errorf("repaired %v, want only the routed pod's rule", repaired)
		}
		rules, err := OurRules()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			if r.IP == gone {
				t.Errorf("rule of %s (no route: its DEL is under way) put back: %+v", gone, r)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
