package integration

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// ec2SubnetCIDR6 is the IPv6 block of the fake's subnet in the IPv6 and
// dual-stack tests.
const ec2SubnetCIDR6 = "2600:1f18:abcd:1200::/64"

// newEC2Node6 is newEC2Node on a subnet with an IPv6 block, the primary
// ENI's link up and the node's IPv6 address on lo.
func newEC2Node6(t *testing.T) *ec2Node {
	t.Helper()
	en := newEC2Node(t, ec2fake.Config{Subnets: []ec2fake.SubnetConfig{{CIDR: ec2SubnetCIDR, IPv6CIDR: ec2SubnetCIDR6}}})
	en.primaryLink(t)
	lo, err := en.h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := en.h.AddrAdd(lo, &netlink.Addr{IPNet: netlink.NewIPNet(nodeAddr6.AsSlice()), Flags: unix.IFA_F_NODAD}); err != nil {
		t.Fatalf("add %s to node lo: %v", nodeAddr6, err)
	}
	return en
}

// TestEC2IPv6Pod: a network of IPv6 on the ec2 pool, through the binary
// and the fake EC2 world over its wire protocol. warm delegates one /80
// to the primary ENI (one AssignIpv6Addresses call), ADD gives the pod an
// address of it, node and pod ping each other over IPv6, and a second
// warm asks EC2 for nothing.
func TestEC2IPv6Pod(t *testing.T) {
	en := newEC2Node6(t)
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
	// No retry: the first packet after ADD must arrive (netsetup waits for
	// the host veth's queue and the pod's local route before ADD returns).
	if err := flows(t, en.node, p, ips); err != nil {
		t.Error(err)
	}
	if n := en.fake.Calls()["AssignIpv6Addresses"]; n != 1 {
		t.Errorf("%d AssignIpv6Addresses calls, want 1", n)
	}
	nw.del(t, p, "")
	en.assertNoPods(t)
}

// TestEC2IPv6DryPool: ADDs on a network of IPv6 whose node has no prefix
// yet wait for the warm pass one of them starts, which delegates the /80
// with one AssignIpv6Addresses call, and all get distinct addresses of it.
func TestEC2IPv6DryPool(t *testing.T) {
	en := newDryNode(t, ec2fake.Config{Subnets: []ec2fake.SubnetConfig{{CIDR: ec2SubnetCIDR, IPv6CIDR: ec2SubnetCIDR6}}})
	nw := newDryNetwork(t, en, nil)
	nw.setConf(t, func(c map[string]any) { c["ipFamilies"] = []string{"ipv6"} })
	pods := newPods(t, 6)
	outs := nw.addAll(t, pods)
	nw.waitWarmIdle(t)
	e, _ := en.fake.ENI(en.fake.PrimaryENI().ID)
	if len(e.IPv6Prefixes) != 1 {
		t.Fatalf("primary ENI IPv6 prefixes %v, want one", e.IPv6Prefixes)
	}
	prefix := netip.MustParsePrefix(e.IPv6Prefixes[0])
	seen := map[netip.Addr]bool{}
	for i, o := range outs {
		var res struct {
			IPs []struct{ Address string } `json:"ips"`
		}
		if o.exit != 0 || json.Unmarshal(o.stdout, &res) != nil || len(res.IPs) != 1 {
			t.Errorf("ADD %s: %s", pods[i].name, o)
			continue
		}
		ip := netip.MustParsePrefix(res.IPs[0].Address).Addr()
		if !prefix.Contains(ip) || seen[ip] {
			t.Errorf("ADD %s got %s: want a distinct address of %s", pods[i].name, ip, prefix)
		}
		seen[ip] = true
	}
	if calls := en.fake.Calls(); calls["AssignIpv6Addresses"] != 1 || calls["AssignPrivateIpAddresses"]+calls["CreateNetworkInterface"] != 0 {
		t.Errorf("EC2 calls %s, want one AssignIpv6Addresses and no IPv4", formatCalls(calls))
	}
	for _, p := range pods {
		nw.del(t, p, p.path())
	}
	en.assertNoPods(t)
}
