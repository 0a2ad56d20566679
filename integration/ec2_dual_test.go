package integration

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestEC2DualStackPod: a dual-stack network on the ec2 pool, through the
// binary and the fake EC2 world. warm delegates the /80 to the primary ENI
// and assigns IPv4 secondary addresses; ADD gives the pod one of each, in
// the configured order (IPv6 first here); node and pod ping each other in
// both families; CHECK passes; DEL frees both and leaves nothing on the
// node.
func TestEC2DualStackPod(t *testing.T) {
	en := newEC2Node6(t)
	nw := newEC2Network(t, en, "1.1.0", nil, map[string]any{"ipFamilies": []string{"ipv6", "ipv4"}})
	nw.mustWarm(t)
	primary, _ := en.fake.ENI(en.fake.PrimaryENI().ID)
	if len(primary.IPv6Prefixes) != 1 || len(primary.SecondaryIPs) == 0 {
		t.Fatalf("after warm the primary ENI has IPv6 prefixes %v and secondary addresses %v; want one /80 and some", primary.IPv6Prefixes, primary.SecondaryIPs)
	}
	prefix := netip.MustParsePrefix(primary.IPv6Prefixes[0])
	p := newPod(t, "pod-dual")
	res, _ := nw.add(t, p)
	ips := resultAddrs(t, res)
	if len(ips) != 2 || !prefix.Contains(ips[0]) || ips[0] == prefix.Addr() || !ips[1].Is4() || !slices.Contains(primary.SecondaryIPs, ips[1].String()) {
		t.Fatalf("ADD gave %v, want an address of %s then one of the secondary addresses %v", ips, prefix, primary.SecondaryIPs)
	}
	assertFamiliesWired(t, en.node, ips, hostVethOf(t, res))
	err := flows(t, en.node, p, ips)
	for try := 0; err != nil && try < 3; try++ {
		t.Logf("try %d: %v", try+1, err)
		time.Sleep(500 * time.Millisecond)
		err = flows(t, en.node, p, ips)
	}
	if err != nil {
		t.Error(err)
	}
	prev, raw := nw.add(t, p) // the repeated ADD: the same result
	if got := resultAddrs(t, prev); !slices.Equal(got, ips) {
		t.Errorf("repeated ADD gave %v, want %v", got, ips)
	}
	if out := nw.check(t, p, raw); out.exit != 0 {
		t.Errorf("CHECK: %s", out)
	}
	if calls := en.fake.Calls(); calls["AssignIpv6Addresses"] != 1 || calls["AssignPrivateIpAddresses"] < 1 {
		t.Errorf("EC2 calls %s, want one AssignIpv6Addresses and IPv4 addresses", formatCalls(calls))
	}
	nw.del(t, p, "")
	en.assertNoPods(t)
	for _, ip := range ips {
		if _, ok := en.node.hostRoutes(t)[ip]; ok {
			t.Errorf("after DEL the node still routes %s", ip)
		}
	}
}

// TestEC2DualStackPodOnSecondaryENI: a dual-stack pod whose IPv4 address
// is on an ENI warm created gets that ENI's `from` rule for it alone: its
// IPv6 address, of the primary ENI's /80, is routed by the main table, and
// the node reaches it in both families.
func TestEC2DualStackPodOnSecondaryENI(t *testing.T) {
	en := newEC2Node6(t)
	nw := newEC2Network(t, en, "1.1.0", map[string]any{"warmIPTarget": 7}, map[string]any{"ipFamilies": []string{"ipv4", "ipv6"}})
	// The primary ENI's slots, then a created ENI for the rest, whose link
	// "the hypervisor" adds.
	if o, made := en.warmAttaching(t, nw); o.exit != 0 || len(made) != 1 {
		t.Fatalf("warm: %s, links made %v; want one new ENI", o, made)
	}
	primary := en.fake.PrimaryENI()
	var onSecondary *ec2Pod
	var ips []netip.Addr
	for _, p := range newPods(t, 7) {
		res, out := nw.add(t, p)
		if ips = resultAddrs(t, res); len(ips) != 2 || !ips[0].Is4() || !ips[1].Is6() {
			t.Fatalf("ADD %s gave %v, want IPv4 then IPv6", p.name, ips)
		}
		a := ec2Pod{attached: attached{pod: p, res: res, ip: ips[0], veth: hostVethOf(t, res)}, out: out, eni: en.eniOf()[ips[0]]}
		if a.eni.ID != primary.ID {
			onSecondary = &a
			break
		}
	}
	if onSecondary == nil || onSecondary.eni.ID == "" {
		t.Fatalf("no pod got an address of a created ENI (ENIs %+v)", en.fake.ENIs())
	}
	assertSecondaryPod(t, en.node, *onSecondary)
	rules, err := en.h.RuleList(netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Priority == rulePrioFromPod && r.Src != nil && r.Src.IP.Equal(ips[1].AsSlice()) {
			t.Errorf("IPv6 address %s has rule %s, want none: the /80 is the primary ENI's", ips[1], r)
		}
	}
	err = flows(t, en.node, onSecondary.pod, ips)
	for try := 0; err != nil && try < 3; try++ {
		t.Logf("try %d: %v", try+1, err)
		time.Sleep(500 * time.Millisecond)
		err = flows(t, en.node, onSecondary.pod, ips)
	}
	if err != nil {
		t.Error(err)
	}
}
