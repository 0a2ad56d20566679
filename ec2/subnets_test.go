package ec2

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

func subnetOf(id, vpc, zone, cidr string, free int32, tags ...string) types.Subnet {
	s := types.Subnet{SubnetId: aws.String(id), VpcId: aws.String(vpc), AvailabilityZone: aws.String(zone),
		CidrBlock: aws.String(cidr), AvailableIpAddressCount: aws.Int32(free)}
	for _, k := range tags {
		s.Tags = append(s.Tags, types.Tag{Key: aws.String(k), Value: aws.String("1")})
	}
	return s
}

func TestRankSubnets(t *testing.T) {
	role := section.SubnetRoleTag
	got := rankSubnets([]types.Subnet{
		subnetOf("subnet-b", "vpc-1", "us-east-1a", "100.64.1.0/24", 40, role),
		subnetOf("subnet-few", "vpc-1", "us-east-1a", "100.64.2.0/24", 3, role),
		subnetOf("subnet-most", "vpc-1", "us-east-1a", "100.64.3.0/24", 200, role),
		subnetOf("subnet-a", "vpc-1", "us-east-1a", "100.64.4.0/24", 40, role),     // ties subnet-b: by ID
		subnetOf("subnet-zone", "vpc-1", "us-east-1b", "100.64.5.0/24", 900, role), // another zone
		subnetOf("subnet-vpc", "vpc-2", "us-east-1a", "100.64.6.0/24", 900, role),  // another VPC
		subnetOf("subnet-untagged", "vpc-1", "us-east-1a", "100.64.7.0/24", 900, "other"),
		subnetOf("subnet-bad", "vpc-1", "us-east-1a", "not a cidr", 900, role),
	}, "vpc-1", "us-east-1a")
	var ids []string
	for _, s := range got {
		ids = append(ids, s.ID)
	}
	if want := "subnet-most subnet-a subnet-b subnet-few"; strings.Join(ids, " ") != want {
		t.Fatalf("ranked %v, want %s", ids, want)
	}
	if got[0].CIDR.String() != "100.64.3.0/24" || got[0].Free != 200 {
		t.Errorf("first: %+v", got[0])
	}
}

// subnetsEnv is a node in us-east-1a whose zone has two subnets tagged for
// pods (a small one with the most free addresses first), one tagged in
// another zone and one untagged; t3.medium: 3 ENIs of 5 secondaries.
func subnetsEnv(t *testing.T, wc section.WarmConfig) (*env, []ec2fake.SubnetConfig) {
	t.Helper()
	role := map[string]string{section.SubnetRoleTag: "1"}
	cfg := ec2fake.Config{
		InstanceType: "t3.medium", AvailabilityZone: "us-east-1a",
		VPCCIDRs: []string{"10.0.0.0/16", "100.64.0.0/16"},
		Subnets: []ec2fake.SubnetConfig{
			{CIDR: "10.0.0.0/24"},
			{CIDR: "100.64.0.0/27", Tags: role}, // 27 free: first
			{CIDR: "100.64.1.0/28", Tags: role}, // 11 free: second
			{CIDR: "100.64.2.0/24", AvailabilityZone: "us-east-1b", Tags: role},
			{CIDR: "100.64.3.0/24"},
		},
	}
	e := newEnv(t, cfg, wc)
	e.mgr.Pool = alloc.StoredPool{CreatedOnly: wc.CustomSubnets()}
	return e, e.fake.Info().Subnets
}

// Discovery puts pods' ENIs in the tagged subnet with most free
// addresses; when it fills up warm moves to the zone's next one, and when
// both are full the pass ends subnet-full. The primary ENI's addresses
// are never the pods'.
func TestWarmSubnetDiscoveryMovesOn(t *testing.T) {
	e, subnets := subnetsEnv(t, section.WarmConfig{WarmIPTarget: 3, SubnetDiscovery: true})
	first, second := subnets[1], subnets[2]
	e.warm(t)
	c, _, src := e.counts(t)
	if c.Free != 3 {
		t.Fatalf("free %d, want 3\n%s", c.Free, e.out)
	}
	primary, _ := src.PrimaryENI()
	for _, eni := range src.ENIs {
		if eni.ID == primary.ID {
			if eni.Secondary != 0 {
				t.Errorf("warm assigned %d addresses to the primary ENI", eni.Secondary)
			}
			continue
		}
		if eni.SubnetID != first.ID || !eni.Created || eni.SubnetCIDR.String() != first.CIDR {
			t.Errorf("ENI %s in %s (%s), want the subnet with most free addresses %s", eni.ID, eni.SubnetID, eni.SubnetCIDR, first.ID)
		}
	}
	calls := e.fake.Calls()["DescribeSubnets"]
	if calls != 1 {
		t.Errorf("DescribeSubnets calls %d, want 1 (discovery; its CIDR is not described again)", calls)
	}

	// Other nodes take the first subnet's addresses: the assign to the
	// ENI there fails, and warm moves to the second.
	fillSubnet(e.fake, first.ID)
	e.addPods(t, 3)
	e.warm(t)
	c, _, src = e.counts(t)
	if c.Free != 3 {
		t.Errorf("free %d after the move, want 3\n%s", c.Free, e.out)
	}
	if !src.SubnetFull(first.ID, e.now) {
		t.Errorf("%s not remembered full: %+v\n%s", first.ID, src.FullSubnets, e.out)
	}
	if !hasENIIn(src, second.ID) {
		t.Fatalf("no ENI in the second subnet %s\n%s", second.ID, e.out)
	}

	// Both full: the pass fails subnet-full, and says which.
	fillSubnet(e.fake, second.ID)
	e.addPods(t, 3)
	err := e.w.Run(context.Background())
	if !errors.Is(err, ErrSubnetsFull) || classify(false, err) != section.PassSubnetFull {
		t.Fatalf("warm with both subnets full: %v (%s)\n%s", err, classify(false, err), e.out)
	}
	if !strings.Contains(err.Error(), first.ID) || !strings.Contains(err.Error(), second.ID) {
		t.Errorf("error names not both subnets: %v", err)
	}
	before := e.fake.Calls()
	_ = e.w.Run(context.Background())
	after := e.fake.Calls()
	if n := after["CreateNetworkInterface"] + after["AssignPrivateIpAddresses"] - before["CreateNetworkInterface"] - before["AssignPrivateIpAddresses"]; n != 0 {
		t.Errorf("a pass right after asked EC2 %d times for addresses in full subnets", n)
	}
	// They are tried again once the memory has expired.
	e.now = e.now.Add(section.FullSubnetTTL + time.Second)
	before = e.fake.Calls()
	_ = e.w.Run(context.Background())
	if e.fake.Calls()["AssignPrivateIpAddresses"] == before["AssignPrivateIpAddresses"] {
		t.Errorf("full subnets not tried again after %s\n%s", section.FullSubnetTTL, e.out)
	}
}

// A subnet that discovery ranked first but that a Create finds full (other
// nodes took its addresses meanwhile) makes warm go on in the next one in
// the same pass.
func TestWarmSubnetCreateFullMovesOn(t *testing.T) {
	e, subnets := subnetsEnv(t, section.WarmConfig{WarmIPTarget: 3, SubnetDiscovery: true})
	e.fake.InjectFault("CreateNetworkInterface", ec2fake.Fault{Code: "InsufficientFreeAddressesInSubnet", Message: "full", Times: 1})
	e.warm(t)
	c, _, src := e.counts(t)
	if c.Free != 3 || !hasENIIn(src, subnets[2].ID) || !src.SubnetFull(subnets[1].ID, e.now) {
		t.Fatalf("free %d, ENIs %+v, full %+v\n%s", c.Free, src.ENIs, src.FullSubnets, e.out)
	}
}

// fillSubnet takes every free address of a subnet, as other nodes would.
func fillSubnet(fake *ec2fake.Server, subnet string) {
	for {
		if _, err := fake.SeedENI(ec2fake.ENISpec{SubnetID: subnet, Detached: true}); err != nil {
			return
		}
	}
}

func hasENIIn(src *section.EC2, subnet string) bool {
	for _, e := range src.ENIs {
		if e.SubnetID == subnet && e.Created {
			return true
		}
	}
	return false
}

// A zone map puts the ENIs in the node's zone's subnet with that zone's
// security groups; a node whose zone is not in the map gets none.
func TestWarmSubnetMap(t *testing.T) {
	e, subnets := subnetsEnv(t, section.WarmConfig{WarmIPTarget: 3})
	sg := e.fake.Info().SecurityGroupIDs[0]
	e.w.Cfg.Subnets = map[string]section.ZoneSubnet{
		"us-east-1a": {SubnetID: subnets[2].ID, SecurityGroupIDs: []string{sg}},
		"us-east-1b": {SubnetID: subnets[3].ID},
	}
	e.mgr.Pool = alloc.StoredPool{CreatedOnly: true}
	e.warm(t)
	_, _, src := e.counts(t)
	if !hasENIIn(src, subnets[2].ID) || len(src.ENIs) != 2 {
		t.Fatalf("ENIs %+v, want one in %s\n%s", src.ENIs, subnets[2].ID, e.out)
	}
	if n := e.fake.Calls()["DescribeSubnets"]; n != 1 {
		t.Errorf("DescribeSubnets %d, want 1 (the map's subnet's CIDR)", n)
	}

	e2, _ := subnetsEnv(t, section.WarmConfig{WarmIPTarget: 3, Subnets: map[string]section.ZoneSubnet{"us-east-1b": {SubnetID: subnets[3].ID}}})
	err := e2.w.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no pod subnet for this node's availability zone us-east-1a") {
		t.Fatalf("warm in a zone the map lacks: %v", err)
	}
}

// Without custom subnets nothing changes: the primary ENI fills first.
func TestWarmWithoutCustomSubnetsUsesPrimary(t *testing.T) {
	e, _ := subnetsEnv(t, section.WarmConfig{WarmIPTarget: 3})
	e.warm(t)
	_, _, src := e.counts(t)
	if p, _ := src.PrimaryENI(); p.Secondary != 3 || len(src.ENIs) != 1 {
		t.Fatalf("primary %d secondaries, %d ENIs; want 3 on the primary alone", p.Secondary, len(src.ENIs))
	}
	if n := e.fake.Calls()["DescribeSubnets"]; n != 0 {
		t.Errorf("DescribeSubnets %d, want none", n)
	}
}

// DiscoverSubnets follows NextToken.
func TestDiscoverSubnetsPages(t *testing.T) {
	api := &pagedSubnets{pages: [][]types.Subnet{
		{subnetOf("subnet-1", "vpc-1", "z", "100.64.1.0/24", 5, section.SubnetRoleTag)},
		{subnetOf("subnet-2", "vpc-1", "z", "100.64.2.0/24", 50, section.SubnetRoleTag)},
	}}
	got, err := DiscoverSubnets(context.Background(), api, "vpc-1", "z")
	if err != nil || len(got) != 2 || got[0].ID != "subnet-2" {
		t.Fatalf("discovered %+v, %v", got, err)
	}
	f := api.seen[0].Filters
	if len(f) != 3 || *f[0].Name != "vpc-id" || *f[1].Name != "availability-zone" || *f[2].Name != "tag-key" || f[2].Values[0] != section.SubnetRoleTag {
		t.Errorf("filters %+v", f)
	}
}

type pagedSubnets struct {
	pages [][]types.Subnet
	seen  []ec2.DescribeSubnetsInput
}

func (p *pagedSubnets) DescribeSubnets(_ context.Context, in *ec2.DescribeSubnetsInput, _ ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error) {
	p.seen = append(p.seen, *in)
	i := len(p.seen) - 1
	out := &ec2.DescribeSubnetsOutput{Subnets: p.pages[i]}
	if i+1 < len(p.pages) {
		out.NextToken = aws.String("next")
	}
	return out, nil
}
