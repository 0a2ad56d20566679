package ec2

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// TypesAPI is the EC2 call that describes instance types.
type TypesAPI interface {
	DescribeInstanceTypes(context.Context, *ec2.DescribeInstanceTypesInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
}

// DescribeLimits asks EC2 for the limits of instanceType.
func DescribeLimits(ctx context.Context, api TypesAPI, instanceType string) (*section.Limits, error) {
	out, err := api.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{
		InstanceTypes: []types.InstanceType{types.InstanceType(instanceType)},
	})
	if err != nil {
		return nil, fmt.Errorf("describe instance type %s: %w", instanceType, err)
	}
	if len(out.InstanceTypes) != 1 {
		return nil, fmt.Errorf("describe instance type %s: %d types in the reply", instanceType, len(out.InstanceTypes))
	}
	lim, err := LimitsOf(out.InstanceTypes[0])
	if err != nil {
		return nil, fmt.Errorf("describe instance type %s: %w", instanceType, err)
	}
	return lim, nil
}

// LimitsOf reads the limits that matter to pods from an instance type's
// description. warm attaches ENIs on the default network card only, so on
// multi-card types (p5.48xlarge: 64 ENIs over 32 cards, 2 on card 0) its
// own limit is MaxENIs, not the type's total; every card is in Cards.
func LimitsOf(it types.InstanceTypeInfo) (*section.Limits, error) {
	ni := it.NetworkInfo
	if ni == nil {
		return nil, fmt.Errorf("no network info in the reply")
	}
	lim := &section.Limits{MaxENIs: int(aws.ToInt32(ni.MaximumNetworkInterfaces)), IPv4PerENI: int(aws.ToInt32(ni.Ipv4AddressesPerInterface))}
	card := aws.ToInt32(ni.DefaultNetworkCardIndex)
	for _, c := range ni.NetworkCards {
		if aws.ToInt32(c.NetworkCardIndex) == card && aws.ToInt32(c.MaximumNetworkInterfaces) > 0 {
			lim.MaxENIs = int(aws.ToInt32(c.MaximumNetworkInterfaces))
		}
	}
	if len(ni.NetworkCards) > 1 {
		for _, c := range ni.NetworkCards {
			lim.Cards = append(lim.Cards, section.CardLimit{Index: int(aws.ToInt32(c.NetworkCardIndex)), MaxENIs: int(aws.ToInt32(c.MaximumNetworkInterfaces))})
		}
	}
	if it.VCpuInfo != nil {
		lim.VCPUs = int(aws.ToInt32(it.VCpuInfo.DefaultVCpus))
	}
	if lim.MaxENIs < 1 || lim.IPv4PerENI < 2 {
		return nil, fmt.Errorf("implausible limits %+v", *lim)
	}
	return lim, nil
}
