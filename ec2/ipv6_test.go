package ec2

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2sdk "github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

const subnet6 = "2600:1f18:abcd:1200::/64"

// newEnv6 is a node of a network of IPv6 in a subnet with an IPv6 /64
// (none when block is empty).
func newEnv6(t *testing.T, block string) *env {
	t.Helper()
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large", Subnets: []ec2fake.SubnetConfig{{CIDR: "10.0.0.0/20", IPv6CIDR: block}}},
		section.WarmConfig{WarmIPTarget: 5, IPv6: true, ReadyWhenFilled: true})
	e.mgr.Families, e.mgr.Pool = []alloc.Family{alloc.IPv6}, alloc.StoredPool{IPv6: true}
	return e
}

// One AssignIpv6Addresses call delegates a /80 to the primary ENI, and
// pods get its addresses (never its first), for as many pods as a node
// runs, with no further call.
func TestWarmIPv6PrefixThenPods(t *testing.T) {
	e := newEnv6(t, subnet6)
	e.warm(t)
	_, _, src := e.counts(t)
	primary, _ := src.PrimaryENI()
	if len(primary.IPv6Prefixes) != 1 || primary.IPv6Prefixes[0].Prefix.Bits() != 80 || primary.IPv6Prefixes[0].Origin != section.OriginAssigned {
		t.Fatalf("primary ENI IPv6 prefixes %+v, want one /80 assigned", primary.IPv6Prefixes)
	}
	pfx := primary.IPv6Prefixes[0].Prefix
	if got := e.fake.PrimaryENI().IPv6Prefixes; len(got) != 1 || got[0] != pfx.String() {
		t.Fatalf("EC2 has %v, the store %s", got, pfx)
	}
	pods := e.addPods(t, 250)
	seen := map[netip.Addr]bool{}
	for _, a := range pods {
		if !pfx.Contains(a.IP) || a.IP == pfx.Addr() || a.IP6.IsValid() || a.ENI != primary.ID || seen[a.IP] {
			t.Fatalf("pod address %s (ip6 %s) on %s: want a distinct address of %s but its first, on %s", a.IP, a.IP6, a.ENI, pfx, primary.ID)
		}
		seen[a.IP] = true
	}
	e.warm(t) // the timer after the last pod: nothing to ask for
	calls := e.fake.Calls()
	t.Logf("IPv6: %d pods with %d EC2 calls %v", len(pods), totalCalls(calls), calls)
	if calls["AssignIpv6Addresses"] != 1 || calls["AssignPrivateIpAddresses"]+calls["CreateNetworkInterface"]+calls["UnassignPrivateIpAddresses"] != 0 {
		t.Errorf("calls %v: want one AssignIpv6Addresses and no IPv4 call", calls)
	}
	c, st, src := e.counts(t)
	fc, _ := c.Families.Of(alloc.IPv6)
	if fc.Allocated != 250 || fc.Free < 1<<40 || fc.Outside != 0 {
		t.Errorf("IPv6 counts %+v", fc)
	}
	if src.Growth == nil || src.Growth.Result != section.PassDone || src.FilledBoot != "b" || len(src.Addrs) != 0 {
		t.Errorf("growth %+v filled %q addrs %v", src.Growth, src.FilledBoot, src.Addrs)
	}
	if !st.EC2.HasIPv6() {
		t.Error("the section does not say it holds IPv6")
	}
}

// A subnet without an IPv6 block: the pass fails with a reason that says
// so, recorded as its outcome; nothing is recorded as assigned and the
// store is left clean for the next pass.
func TestWarmIPv6SubnetWithoutBlock(t *testing.T) {
	e := newEnv6(t, "")
	err := e.w.Run(context.Background())
	if !errors.Is(err, ErrNoIPv6Subnet) || !strings.Contains(err.Error(), "InvalidParameterValue") {
		t.Fatalf("warm: %v, want the subnet's missing IPv6 block named", err)
	}
	_, _, src := e.counts(t)
	if src.Growth == nil || src.Growth.Result != section.PassFailed || !strings.Contains(src.Growth.Message, "no IPv6 CIDR block") {
		t.Errorf("outcome %+v", src.Growth)
	}
	if src.Dirty || src.HasIPv6() || src.FilledBoot != "" {
		t.Errorf("dirty %v, IPv6 %v, filled %q: want a clean store without a prefix", src.Dirty, src.HasIPv6(), src.FilledBoot)
	}
	if n := e.fake.Calls()["AssignIpv6Addresses"]; n != 1 {
		t.Errorf("%d AssignIpv6Addresses calls", n)
	}
}

// A prefix EC2 no longer delegates (unassigned behind eni-cni's back) is
// dropped once IMDS and then EC2 show it gone: its free addresses leave
// the pool, the pods holding some are reported and kept outside it, and
// the same pass asks for a new /80.
func TestWarmIPv6PrefixGone(t *testing.T) {
	e := newEnv6(t, subnet6)
	e.warm(t)
	pods := e.addPods(t, 2)
	_, _, src := e.counts(t)
	primary, _ := src.PrimaryENI()
	old := primary.IPv6Prefixes[0].Prefix
	if err := e.fake.UnassignIPv6Prefix(primary.ID, old.String()); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(2 * section.IMDSGrace)
	e.out.Reset()
	e.warm(t)
	out := e.out.String()
	if !strings.Contains(out, fmt.Sprintf("IPv6 prefix %s is no longer delegated", old)) || !strings.Contains(out, pods[0].IP.String()) {
		t.Errorf("warm said:\n%s", out)
	}
	c, _, src := e.counts(t)
	primary, _ = src.PrimaryENI()
	if len(primary.IPv6Prefixes) != 1 || primary.IPv6Prefixes[0].Prefix == old {
		t.Fatalf("prefixes %+v: want a new one instead of %s", primary.IPv6Prefixes, old)
	}
	fc, _ := c.Families.Of(alloc.IPv6)
	if fc.Outside != 2 || fc.Allocated != 0 {
		t.Errorf("counts %+v: want the 2 pods of the old prefix outside the pool", fc)
	}
	next := e.addPods(t, 1)[0]
	if !primary.IPv6Prefixes[0].Prefix.Contains(next.IP) {
		t.Errorf("next pod got %s, not of the new prefix", next.IP)
	}
	if n := e.fake.Calls()["AssignIpv6Addresses"]; n != 2 {
		t.Errorf("%d AssignIpv6Addresses calls, want 2", n)
	}
}

// A node of IPv4 whose primary ENI someone gave an IPv6 /80: the store
// does not take it in and the pool stays the IPv4 addresses, so neither
// counts nor trim nor an ADD ever see it.
func TestWarmIPv4IgnoresIPv6Prefix(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large", Subnets: []ec2fake.SubnetConfig{{CIDR: "10.0.0.0/20", IPv6CIDR: subnet6}}},
		section.WarmConfig{WarmIPTarget: 5})
	primary := e.fake.PrimaryENI()
	api := e.w.API
	if _, err := api.AssignIpv6Addresses(context.Background(), &ec2sdk.AssignIpv6AddressesInput{NetworkInterfaceId: &primary.ID, Ipv6PrefixCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	e.warm(t)
	c, _, src := e.counts(t)
	if src.HasIPv6() || c.Total != 5 || c.Free != 5 {
		t.Errorf("IPv6 in the store %v, counts %+v: want the 5 IPv4 addresses only", src.HasIPv6(), c)
	}
	for _, a := range e.addPods(t, 5) {
		if !a.IP.Is4() {
			t.Errorf("pod got %s", a.IP)
		}
	}
}

// A store lost on a node whose primary ENI holds the /80 (the state file
// deleted, a fresh disk): the first pass, started by an ADD waiting on the
// dry pool, takes the /80 EC2 lists back instead of asking for a second
// one, which nothing would ever give back (one more /80 each time).
func TestWarmIPv6LostStoreTakesThePrefixBack(t *testing.T) {
	e := newEnv6(t, subnet6)
	e.warm(t)
	had := e.fake.PrimaryENI().IPv6Prefixes
	e.st = allocfake.NewStore()
	e.mgr.Store = e.st
	e.demand(t, 1, time.Minute)
	e.warm(t)
	_, _, src := e.counts(t)
	primary, _ := src.PrimaryENI()
	if n := e.fake.Calls()["AssignIpv6Addresses"]; n != 1 || len(primary.IPv6Prefixes) != 1 || primary.IPv6Prefixes[0].Prefix.String() != had[0] {
		t.Errorf("%d AssignIpv6Addresses calls, EC2 has %v, the store %+v: want the one /80 %v taken back",
			n, e.fake.PrimaryENI().IPv6Prefixes, primary.IPv6Prefixes, had)
	}
}

// replyAs6 is an EC2 whose AssignIpv6Addresses reply names prefix
// instead of the /80 it delegated.
type replyAs6 struct {
	API
	prefix string
}

func (r replyAs6) AssignIpv6Addresses(ctx context.Context, in *ec2sdk.AssignIpv6AddressesInput, o ...func(*ec2sdk.Options)) (*ec2sdk.AssignIpv6AddressesOutput, error) {
	out, err := r.API.AssignIpv6Addresses(ctx, in, o...)
	if err == nil {
		out.AssignedIpv6Prefixes = []string{r.prefix}
	}
	return out, err
}

// A reply naming anything but an IPv6 /80 is not recorded: a mapped IPv4
// prefix or a /128 saved made a state file its next load refuses (every
// ADD failing until a repair), a ::/0 or /64 a pool of addresses EC2
// routes nowhere. The pass fails saying so and leaves the store loadable.
func TestWarmIPv6ReplyNotA80(t *testing.T) {
	for _, reply := range []string{"::ffff:10.0.0.0/104", "2600:1f18:abcd:1200::/128", "::/0", "2600:1f18:abcd:1200::/64", "10.0.0.0/28"} {
		e := newEnv6(t, subnet6)
		e.w.API = replyAs6{e.w.API, reply}
		if err := e.w.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no IPv6 /80") {
			t.Errorf("%s: warm: %v, want the reply refused", reply, err)
		}
		st, _, err := e.mgr.Snapshot(context.Background())
		if err != nil {
			t.Fatalf("%s: load: %v", reply, err)
		}
		if src := sectionOf(st); src.HasIPv6() || !src.Dirty {
			t.Errorf("%s: the store has IPv6 %v, dirty %v: want no prefix, and EC2 read on the next pass", reply, src.HasIPv6(), src.Dirty)
		}
	}
}
