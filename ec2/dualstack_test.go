package ec2

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// newEnvDual is a dual-stack node (t3.medium: 3 ENIs x 5 secondary
// addresses, 15 for pods) in a subnet with an IPv6 /64.
func newEnvDual(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium", Subnets: []ec2fake.SubnetConfig{{CIDR: "10.0.0.0/20", IPv6CIDR: subnet6}}},
		section.WarmConfig{WarmIPTarget: 3, IPv6: true, DualStack: true, ReadyWhenFilled: true})
	e.mgr.Families, e.mgr.Pool = []alloc.Family{alloc.IPv4, alloc.IPv6}, alloc.StoredPool{IPv6: true}
	return e
}

// allocate is one ADD's allocation on e.
func (e *env) allocate(cid string) (alloc.Allocation, error) {
	a, _, err := e.mgr.Allocate(context.Background(), alloc.Request{Key: alloc.Key{Network: "pods", ContainerID: cid, IfName: "eth0"}})
	return a, err
}

// fillDual starts pods on e, a warm pass whenever the pool runs dry,
// until a pass adds nothing: the node is full.
func (e *env) fillDual(t *testing.T) []alloc.Allocation {
	t.Helper()
	var pods []alloc.Allocation
	for i := range 100 {
		a, err := e.allocate(fmt.Sprintf("pod%d", i))
		if err != nil {
			e.now = e.now.Add(time.Minute)
			e.warm(t)
			if a, err = e.allocate(fmt.Sprintf("pod%d", i)); err != nil {
				return pods
			}
		}
		pods = append(pods, a)
	}
	t.Fatal("the node never filled")
	return nil
}

// A dual-stack node fills both families: one AssignIpv6Addresses for the
// /80 on the primary ENI for the node's life, IPv4 addresses as without
// IPv6; each pod gets a distinct address of each, its ENI that of its
// IPv4 address. The IPv4 side is the one that runs out, at the figure
// max-pods gives; the ADD past it takes nothing, of either family.
func TestWarmDualStackFillsBothFamilies(t *testing.T) {
	e := newEnvDual(t)
	e.warm(t)
	c, _, src := e.counts(t)
	primary, _ := src.PrimaryENI()
	if len(primary.IPv6Prefixes) != 1 {
		t.Fatalf("primary ENI IPv6 prefixes %+v, want the /80", primary.IPv6Prefixes)
	}
	pfx := primary.IPv6Prefixes[0].Prefix
	if c4 := provider.Sized(c); c4.Total != 3 || c4.Free != 3 {
		t.Errorf("IPv4 counts after the first pass %+v, want warmIPTarget's 3", c4)
	}
	if err := provider.PoolReady(e.peek(t), c, e.w.Cfg, "b"); err != nil {
		t.Errorf("filled dual-stack pool not ready: %v", err)
	}

	pods := e.fillDual(t)
	_, _, src = e.counts(t)
	owner := map[netip.Addr]string{}
	for _, p := range src.Addrs {
		owner[p.IP] = p.ENI
	}
	seen := map[netip.Addr]bool{}
	for _, a := range pods {
		if !a.IP.Is4() || !src.IsUsableFor(a.IP, nil, false) || !pfx.Contains(a.IP6) || a.IP6 == pfx.Addr() || seen[a.IP] || seen[a.IP6] {
			t.Fatalf("pod %s: %s and %s, want distinct addresses of the pool and of %s", a.ContainerID, a.IP, a.IP6, pfx)
		}
		if owner[a.IP] != a.ENI {
			t.Errorf("pod %s on ENI %q, its IPv4 address %s is on %q", a.ContainerID, a.ENI, a.IP, owner[a.IP])
		}
		seen[a.IP], seen[a.IP6] = true, true
	}
	if want := section.PodAddressesOf(*src.Limits, e.w.Cfg); len(pods) != want || want != 15 {
		t.Errorf("%d pods on a full node, max-pods counts %d pod addresses, want 15", len(pods), want)
	}
	if got := section.MaxPodsOf(*src.Limits, e.w.Cfg); got != 17 {
		t.Errorf("max-pods %d, want the IPv4 figure 17", got)
	}
	if !src.AtHardLimitOf(e.w.Cfg) {
		t.Error("a full dual-stack node is not at its hard limit")
	}

	before, _, _ := e.counts(t)
	_, err := e.allocate("one-too-many")
	var ex *alloc.ExhaustedError
	if !errors.As(err, &ex) || ex.Family != "ipv4" {
		t.Fatalf("ADD past the IPv4 limit: %v, want the IPv4 side exhausted", err)
	}
	after, st, _ := e.counts(t)
	if after != before && (*after.Families.IPv4 != *before.Families.IPv4 || *after.Families.IPv6 != *before.Families.IPv6) {
		t.Errorf("counts changed by a failed ADD: %+v -> %+v", before.Families, after.Families)
	}
	if st.Find(alloc.Key{Network: "pods", ContainerID: "one-too-many", IfName: "eth0"}) >= 0 {
		t.Error("the failed ADD left an allocation")
	}
	c6, _ := after.Families.Of(alloc.IPv6)
	if c6.Allocated != 15 {
		t.Errorf("IPv6 counts %+v, want 15 allocated", c6)
	}
	if calls := e.fake.Calls(); calls["AssignIpv6Addresses"] != 1 {
		t.Errorf("calls %v, want one AssignIpv6Addresses for the node's life", calls)
	}
}

// peek is the state as STATUS reads it.
func (e *env) peek(t *testing.T) *alloc.State {
	t.Helper()
	st, _, err := e.mgr.Peek()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// The /80 gone behind eni-cni's back on a dual-stack node: the pass
// replaces it as on an IPv6-only node, and the IPv4 side is left as it
// was (no address dropped, no pod outside the pool for its IPv4).
func TestWarmDualStackPrefixGoneIPv4Stays(t *testing.T) {
	e := newEnvDual(t)
	e.warm(t)
	pods := e.addPods(t, 2)
	_, _, src := e.counts(t)
	addrs4 := src.Addrs
	primary, _ := src.PrimaryENI()
	old := primary.IPv6Prefixes[0].Prefix
	if err := e.fake.UnassignIPv6Prefix(primary.ID, old.String()); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(2 * section.IMDSGrace)
	e.out.Reset()
	e.warm(t)
	if out := e.out.String(); !strings.Contains(out, fmt.Sprintf("IPv6 prefix %s is no longer delegated", old)) || !strings.Contains(out, pods[0].IP6.String()) {
		t.Errorf("warm said:\n%s", out)
	}
	c, _, src := e.counts(t)
	primary, _ = src.PrimaryENI()
	if len(primary.IPv6Prefixes) != 1 || primary.IPv6Prefixes[0].Prefix == old {
		t.Fatalf("prefixes %+v: want a new one instead of %s", primary.IPv6Prefixes, old)
	}
	c4, _ := c.Families.Of(alloc.IPv4)
	c6, _ := c.Families.Of(alloc.IPv6)
	for _, p := range addrs4 {
		if !src.IsUsableFor(p.IP, nil, false) {
			t.Errorf("IPv4 address %s left the pool with the /80", p.IP)
		}
	}
	if c4.Allocated != 2 || c4.Outside != 0 || c6.Outside != 2 || c6.Allocated != 0 {
		t.Errorf("IPv4 %+v, IPv6 %+v: want the 2 pods' IPv4 in the pool, their IPv6 outside", c4, c6)
	}
	next := e.addPods(t, 1)[0]
	if !next.IP.Is4() || !primary.IPv6Prefixes[0].Prefix.Contains(next.IP6) {
		t.Errorf("next pod got %s and %s, want IPv4 and an address of the new prefix", next.IP, next.IP6)
	}
	if calls := e.fake.Calls(); calls["AssignIpv6Addresses"] != 2 || calls["UnassignPrivateIpAddresses"] != 0 {
		t.Errorf("calls %v", calls)
	}
}

// Without its /80 (a subnet without IPv6) a dual-stack pass fails before
// any IPv4 call, STATUS says why, and an ADD takes nothing: its IPv6
// half would be missing.
func TestWarmDualStackWithoutIPv6TakesNothing(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"},
		section.WarmConfig{WarmIPTarget: 3, IPv6: true, DualStack: true, ReadyWhenFilled: true})
	e.mgr.Families, e.mgr.Pool = []alloc.Family{alloc.IPv6, alloc.IPv4}, alloc.StoredPool{IPv6: true}
	if err := e.w.Run(context.Background()); !errors.Is(err, ErrNoIPv6Subnet) {
		t.Fatalf("warm: %v, want the subnet's missing IPv6 block", err)
	}
	// Addresses a launch template assigned: IPv4 alone serves no pod.
	e.tamper(t, func(src *section.EC2) {
		src.AddAddrs(src.ENIs[0].ID, section.OriginFound, []netip.Addr{netip.MustParseAddr("10.0.0.200")}, e.now)
	})
	c, _, _ := e.counts(t)
	err := provider.PoolReady(e.peek(t), c, e.w.Cfg, "b")
	if !errors.Is(err, provider.ErrPoolNotReady) || !strings.Contains(err.Error(), "no IPv6 prefix") {
		t.Errorf("STATUS: %v, want not ready for want of the IPv6 prefix", err)
	}
	_, err = e.allocate("half")
	var ex *alloc.ExhaustedError
	if !errors.As(err, &ex) || ex.Family != "ipv6" {
		t.Fatalf("ADD: %v, want the IPv6 side exhausted", err)
	}
	after, st, _ := e.counts(t)
	if len(st.Allocations) != 0 || st.LastIP.IsValid() || after.Families.IPv4.Free != 1 {
		t.Errorf("allocations %+v, last %s, IPv4 %+v: want nothing taken", st.Allocations, st.LastIP, after.Families.IPv4)
	}
	if calls := e.fake.Calls(); calls["AssignPrivateIpAddresses"]+calls["CreateNetworkInterface"] != 0 {
		t.Errorf("calls %v: an IPv4 call from a pass that could not get the /80", calls)
	}
}
