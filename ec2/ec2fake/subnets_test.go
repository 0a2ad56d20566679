package ec2fake

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// A zone with several tagged subnets, as subnet discovery sees them: the
// filters by VPC, zone and tag key, pages of MaxResults, free counts that
// drop as addresses go, and EC2's error once a subnet has none left.
func TestDescribeSubnetsDiscovery(t *testing.T) {
	const role = "kubernetes.io/role/cni"
	srv := startServer(t, Config{
		AvailabilityZone: "us-east-1a",
		VPCCIDRs:         []string{"10.1.0.0/16", "100.64.0.0/16"},
		Subnets: []SubnetConfig{
			{CIDR: "10.1.0.0/24"}, // the node's
			{CIDR: "100.64.0.0/28", Tags: map[string]string{role: "1"}},
			{CIDR: "100.64.1.0/24", Tags: map[string]string{role: ""}},
			{CIDR: "100.64.2.0/24", AvailabilityZone: "us-east-1b", Tags: map[string]string{role: "1"}},
			{CIDR: "100.64.3.0/24"},
			{CIDR: "100.64.4.0/24", Tags: map[string]string{"other": "1"}},
			{CIDR: "100.64.5.0/24", Tags: map[string]string{role: "1"}},
		},
	})
	api := newEC2(srv, 1)
	ctx := ctxT(t)
	in := &ec2.DescribeSubnetsInput{
		Filters: []types.Filter{
			{Name: aws.String("vpc-id"), Values: []string{srv.Info().VPCID}},
			{Name: aws.String("availability-zone"), Values: []string{"us-east-1a"}},
			{Name: aws.String("tag-key"), Values: []string{role}},
		},
		MaxResults: aws.Int32(5),
	}
	var got []string
	pages := 0
	for {
		out, err := api.DescribeSubnets(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range out.Subnets {
			got = append(got, aws.ToString(s.CidrBlock))
		}
		if aws.ToString(out.NextToken) == "" {
			break
		}
		in.NextToken = out.NextToken
	}
	want := []string{"100.64.0.0/28", "100.64.1.0/24", "100.64.5.0/24"}
	if pages != 2 || len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("tagged subnets of us-east-1a in %d pages: %v, want %v in 2", pages, got, want)
	}

	// The /28 has 16-5 = 11 addresses: an ENI with 9 secondaries and one
	// more ENI take them all, and the next ENI finds none.
	small := srv.Info().Subnets[1].ID
	for _, n := range []*int32{aws.Int32(9), nil} {
		if _, err := api.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(small), SecondaryPrivateIpAddressCount: n}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := api.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{small}})
	if err != nil || aws.ToInt32(out.Subnets[0].AvailableIpAddressCount) != 0 {
		t.Fatalf("free addresses of the full subnet: %+v %v", out, err)
	}
	_, err = api.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(small)})
	wantAPIError(t, err, "InsufficientFreeAddressesInSubnet", 400)
}
