package netsetup

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// TestSetupRefusesRouteOfAnotherVeth: a second Setup for an address that
// another live veth already has fails with ErrRouteTaken naming that veth,
// and leaves the first pod's route and rule exactly as they were (Setup
// used to RouteReplace, silently moving the live pod's /32).
func TestSetupRefusesRouteOfAnotherVeth(t *testing.T) {
	node, podA, podB := newNS(t), newNS(t), newNS(t)
	ip := netip.MustParseAddr("10.0.9.9")
	a := Pod{Netns: podA.Path(), IfName: "eth0", HostVeth: HostVethName("eni", "a", "eth0"), IP: ip, MTU: 1500}
	b := Pod{Netns: podB.Path(), IfName: "eth0", HostVeth: HostVethName("eni", "b", "eth0"), IP: ip, MTU: 1500}
	err := node.Do(func(ns.NetNS) error {
		if _, err := Setup(a); err != nil {
			t.Fatalf("Setup a: %v", err)
		}
		_, err := Setup(b)
		if !errors.Is(err, ErrRouteTaken) || !strings.Contains(err.Error(), a.HostVeth) || !strings.Contains(err.Error(), "veth") {
			t.Fatalf("Setup b on a's address: %v, want ErrRouteTaken naming %s", err, a.HostVeth)
		}
		if _, err := Check(a); err != nil {
			t.Errorf("a's wiring after the refused Setup: %v", err)
		}
		if _, err := netlink.LinkByName(b.HostVeth); err == nil {
			t.Errorf("the refused Setup left its veth %s", b.HostVeth)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = podB.Do(func(ns.NetNS) error {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			t.Error("the refused pod still has eth0")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDeleteVethsOnlyVeths: a name that is not a veth (a recorded host veth
// edited to "eth0", say) is refused, and the link stays.
func TestDeleteVethsOnlyVeths(t *testing.T) {
	node := newNS(t)
	err := node.Do(func(ns.NetNS) error {
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}}); err != nil {
			t.Fatal(err)
		}
		err := DeleteVeths("eth0", "enigone00000000")
		if err == nil || !strings.Contains(err.Error(), "not a veth") {
			t.Errorf("DeleteVeths(eth0): %v, want a refusal", err)
		}
		if _, err := netlink.LinkByName("eth0"); err != nil {
			t.Errorf("eth0 was deleted: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
