package netsetup

import (
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// TestENIAddressIsTheLinksSource: a secondary ENI's link carries the ENI's
// own address, so the kernel's choice of source for traffic leaving by it
// (what MASQUERADE takes: kube-proxy's for a pod on this ENI dialing a
// NodePort whose endpoint is on another node) is an address the ENI may
// send from. Without it the kernel lends the primary ENI's, and the VPC's
// source/destination check drops every packet (the endpoint-Service
// conformance specs, seen in the cluster suite). The address adds no route
// to main, and a lost one is put back and reported.
func TestENIAddressIsTheLinksSource(t *testing.T) {
	node := newNS(t)
	e := ENILink{MAC: "02:00:0a:62:00:14", MTU: 9001, Table: 2, SubnetCIDR: netip.MustParsePrefix("10.98.0.0/20"),
		Gateway: netip.MustParseAddr("10.98.0.1"), Address: netip.MustParseAddr("10.98.0.20")}
	err := node.Do(func(ns.NetNS) error {
		veth(t, "ens5", "")
		veth(t, "ens6", e.MAC)
		ens5, _ := netlink.LinkByName("ens5")
		if err := netlink.AddrAdd(ens5, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 98, 0, 10), Mask: net.CIDRMask(20, 32)}}); err != nil {
			t.Fatal(err)
		}
		main := routes(t, "main")
		if err := EnsureENI(e); err != nil {
			t.Fatal(err)
		}
		if src := sourceVia(t, "ens6"); src != "10.98.0.20" {
			t.Errorf("source of traffic leaving by ens6: %s, want the ENI's own 10.98.0.20", src)
		}
		if got := routes(t, "main"); got != main {
			t.Errorf("main table changed:\n%s\nwas\n%s", got, main)
		}
		if got, err := ReassertENI(e); err != nil || got != "" {
			t.Errorf("second ReassertENI: %q, %v", got, err)
		}
		ip(t, "addr", "del", "10.98.0.20/20", "dev", "ens6")
		if got, err := ReassertENI(e); err != nil || !strings.Contains(got, "address 10.98.0.20") {
			t.Errorf("ReassertENI after the address was lost: %q, %v", got, err)
		}
		if src := sourceVia(t, "ens6"); src != "10.98.0.20" {
			t.Errorf("source after the repair: %s", src)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func veth(t *testing.T, name, mac string) {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = name
	if mac != "" {
		la.HardwareAddr, _ = net.ParseMAC(mac)
	}
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: name + "p"}); err != nil {
		t.Fatal(err)
	}
	ip(t, "link", "set", name, "up")
	ip(t, "link", "set", name+"p", "up")
}

func ip(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
	return string(out)
}

func routes(t *testing.T, table string) string { return ip(t, "-4", "route", "show", "table", table) }

// sourceVia is the source the kernel picks for a packet to the subnet's
// router sent out of link: inet_select_addr on the link, as MASQUERADE's.
func sourceVia(t *testing.T, link string) string {
	f := strings.Fields(ip(t, "-4", "-o", "route", "get", "10.98.0.1", "oif", link))
	for i := range len(f) - 1 {
		if f[i] == "src" {
			return f[i+1]
		}
	}
	return ""
}
