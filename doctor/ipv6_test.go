package doctor

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	eniec2 "github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// A network of IPv6: the subnet's IPv6 block read from IMDS, the type's
// hypervisor from EC2, AssignIpv6Addresses probed for permission.
func TestIPv6Check(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	for _, tt := range []struct {
		block  string
		status Status
		says   string
	}{
		{"2600:1f18:abcd:1200::/64", OK, "has IPv6 block 2600:1f18:abcd:1200::/64; m5.large is a Nitro type"},
		{"", Fail, "has no IPv6 CIDR block"},
	} {
		f, err := ec2fake.New(ec2fake.Config{InstanceType: "m5.large", Subnets: []ec2fake.SubnetConfig{{CIDR: "10.0.0.0/20", IPv6CIDR: tt.block}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Start(); err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		e := ec2Env(t.TempDir())
		e.IMDSEndpoint, e.Warm.IPv6 = f.URL(), true
		e.EC2 = func(region string) (EC2API, error) {
			return eniec2.NewAPI(f.URL(), region, eniec2.NewMetadataClient(f.URL())), nil
		}
		_, info := checkIMDS(context.Background(), e)
		want(t, checkIPv6(context.Background(), e, info), tt.status, tt.says)
		want(t, checkPermissions(context.Background(), e, nil, info), OK, "all 11")
		if n := f.Calls()["AssignIpv6Addresses"]; n != 1 {
			t.Errorf("AssignIpv6Addresses probed %d times", n)
		}
		if e := f.PrimaryENI(); len(e.IPv6Prefixes) != 0 {
			t.Errorf("the probe assigned %v", e.IPv6Prefixes)
		}
	}
	e := ec2Env(t.TempDir())
	want(t, checkIPv6(context.Background(), e, &instanceInfo{}), Skip, "not of IPv6")
}

// typeAs is an EC2 whose DescribeInstanceTypes says of the type what it is
// given.
type typeAs struct {
	EC2API
	it types.InstanceTypeInfo
}

func (a typeAs) DescribeInstanceTypes(context.Context, *ec2.DescribeInstanceTypesInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error) {
	return &ec2.DescribeInstanceTypesOutput{InstanceTypes: []types.InstanceTypeInfo{a.it}}, nil
}

// A bare-metal type (m5.metal) names no hypervisor but is of the Nitro
// system, whose ENIs take prefixes: not a failure. A Xen type is.
func TestIPv6CheckBareMetal(t *testing.T) {
	info := &instanceInfo{Type: "m5.metal", Region: "us-east-1", Subnet: "subnet-1", SubnetIPv6: []string{"2600:1f18:abcd:1200::/64"}}
	for _, tt := range []struct {
		it     types.InstanceTypeInfo
		status Status
	}{
		{types.InstanceTypeInfo{InstanceType: "m5.metal", BareMetal: aws.Bool(true)}, OK},
		{types.InstanceTypeInfo{InstanceType: "m4.large", Hypervisor: types.InstanceTypeHypervisorXen, BareMetal: aws.Bool(false)}, Fail},
	} {
		e := ec2Env(t.TempDir())
		e.Warm.IPv6 = true
		e.EC2 = func(string) (EC2API, error) { return typeAs{it: tt.it}, nil }
		want(t, checkIPv6(context.Background(), e, info), tt.status, "")
	}
}
