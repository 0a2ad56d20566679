package integration

import (
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// TestEC2IPv6Pod: a network of IPv6 on the ec2 pool, through the binary
// and the fake EC2 world over its wire protocol. warm delegates one /80
// to the primary ENI (one AssignIpv6Addresses call), ADD gives the pod an
// address of it, node and pod ping each other over IPv6, and a second
// warm asks EC2 for nothing.
func TestEC2IPv6Pod(t *testing.T) {
	en := newEC2Node(t, ec2fake.Config{Subnets: []ec2fake.SubnetConfig{{CIDR: ec2SubnetCIDR, IPv6CIDR: "2600:1f18:abcd:1200::/64"}}})
	en.primaryLink(t)
	lo, err := en.h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := en.h.AddrAdd(lo, &netlink.Addr{IPNet: netlink.NewIPNet(nodeAddr6.AsSlice()), Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatalf("add %s to node lo: %v", nodeAddr6, err)
	}
	nw := newEC2Network(t, en, "1.1.0", nil, map[string]any{"ipFamilies": []string{"ipv6"}})
	nw.mustWarm(t)
	primary, _ := en.fake.ENI(en.fake.PrimaryENI().ID)
	if len(primary.IPv6Prefixes) != 1 || len(primary.SecondaryIPs)+len(primary.Prefixes) != 0 {
		t.Fatalf("after warm the primary ENI has IPv6 prefixes %v, IPv4 %v %v; want one /80 and no IPv4 for pods", primary.IPv6Prefixes, primary.SecondaryIPs, primary.Prefixes)
	}
	prefix := netip.MustParsePrefix(primary.IPv6Prefixes[0])
	before := en.fake.Calls()
	nw.mustWarm(t)
	if d := callsDelta(before, en.fake.Calls()); len(d) != 0 {
		t.Errorf("a second warm made EC2 calls %s", formatCalls(d))
	}
	p := newPod(t, "pod-v6")
	res, _ := nw.add(t, p)
	ips := resultAddrs(t, res)
	if len(ips) != 1 || !prefix.Contains(ips[0]) || ips[0] == prefix.Addr() {
		t.Fatalf("ADD gave %v, want one address of %s (not its first)", ips, prefix)
	}
	if err := flows(t, en.node, p, ips); err != nil {
		t.Error(err)
	}
	if n := en.fake.Calls()["AssignIpv6Addresses"]; n != 1 {
		t.Errorf("%d AssignIpv6Addresses calls, want 1", n)
	}
	nw.del(t, p, "")
	en.assertNoPods(t)
}
