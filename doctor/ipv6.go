package doctor

import (
	"context"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// checkIPv6 checks what a network of IPv6 on the ec2 pool needs of the
// node: an IPv6 block on the primary ENI's subnet (IMDS), without which
// EC2 delegates no /80, and an instance type on the Nitro system (EC2
// delegates prefixes to Nitro instances only).
func checkIPv6(ctx context.Context, e *Env, info *instanceInfo) Result {
	const name = "ipv6"
	switch {
	case e.Source != "ec2" || !e.Warm.IPv6:
		return skip(name, "the network is not of IPv6 on the ec2 pool")
	case info == nil:
		return skip(name, "IMDS did not answer: the subnet's IPv6 block is unknown")
	case len(info.SubnetIPv6) == 0:
		return fail(name, "associate an IPv6 /64 with the subnet (aws ec2 associate-subnet-cidr-block --subnet-id "+info.Subnet+" --ipv6-cidr-block ...; the VPC needs an IPv6 block first)",
			"the primary ENI's subnet %s has no IPv6 CIDR block: EC2 delegates it no /80 prefix and pods get no address", info.Subnet)
	}
	blocks := strings.Join(info.SubnetIPv6, ", ")
	if e.EC2 == nil || info.Region == "" || info.Type == "" {
		return ok(name, "subnet %s has IPv6 block %s; the instance type was not checked (no EC2 client)", info.Subnet, blocks)
	}
	api, err := e.EC2(info.Region)
	if err != nil {
		return warn(name, "", "subnet %s has IPv6 block %s; EC2 client: %v", info.Subnet, blocks, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := api.DescribeInstanceTypes(cctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{types.InstanceType(info.Type)}})
	if err != nil || len(out.InstanceTypes) != 1 {
		return warn(name, "check that EC2 is reachable", "subnet %s has IPv6 block %s; could not read instance type %s: %v", info.Subnet, blocks, info.Type, err)
	}
	// A bare-metal type names no hypervisor, and is of the Nitro system
	// all the same (m5.metal, c5.metal): prefixes are delegated to it.
	it := out.InstanceTypes[0]
	if hv := it.Hypervisor; hv != types.InstanceTypeHypervisorNitro && !aws.ToBool(it.BareMetal) {
		return fail(name, "run the node on an instance type of the Nitro system (m5, c5, t3 and later)",
			"instance type %s runs on hypervisor %q: EC2 delegates IPv6 prefixes to Nitro instances only", info.Type, hv)
	}
	return ok(name, "subnet %s has IPv6 block %s; %s is a Nitro type (IPv6 prefixes supported)", info.Subnet, blocks, info.Type)
}
