package ec2

import (
	"context"
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// ENIDescriber is the EC2 call that lists ENIs.
type ENIDescriber interface {
	DescribeNetworkInterfaces(context.Context, *ec2.DescribeNetworkInterfacesInput, ...func(*ec2.Options)) (*ec2.DescribeNetworkInterfacesOutput, error)
}

// CreatedENI is an ENI that warm created for an instance (tagged
// TagInstanceID with the instance's ID).
type CreatedENI struct {
	ID           string
	Status       string // in-use, available, attaching, ...
	AttachmentID string
	DeviceIndex  int
	SubnetID     string
	Addresses    int // private IPv4 addresses, the primary included
	Prefixes     int
	CreatedAt    string // the TagCreatedAt tag
	// DeleteOnTermination: EC2 deletes it with the instance.
	DeleteOnTermination bool
}

// CreatedFilter is the DescribeNetworkInterfaces filter of the ENIs warm
// created for instanceID; `aws ec2 describe-network-interfaces --filters`
// takes it as Name=tag:eni-cni/instance-id,Values=<id>.
func CreatedFilter(instanceID string) types.Filter {
	return types.Filter{Name: aws.String("tag:" + TagInstanceID), Values: []string{instanceID}}
}

// ListCreated returns the ENIs warm created for instanceID, attached or not,
// by ID. It only reads.
func ListCreated(ctx context.Context, api ENIDescriber, instanceID string) ([]CreatedENI, error) {
	in := &ec2.DescribeNetworkInterfacesInput{Filters: []types.Filter{CreatedFilter(instanceID)}}
	var out []CreatedENI
	for {
		page, err := api.DescribeNetworkInterfaces(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list ENIs tagged %s=%s: %w", TagInstanceID, instanceID, err)
		}
		for _, ni := range page.NetworkInterfaces {
			out = append(out, createdFrom(ni))
		}
		if aws.ToString(page.NextToken) == "" {
			break
		}
		in.NextToken = page.NextToken
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func createdFrom(ni types.NetworkInterface) CreatedENI {
	c := CreatedENI{
		ID: aws.ToString(ni.NetworkInterfaceId), Status: string(ni.Status), SubnetID: aws.ToString(ni.SubnetId),
		Addresses: len(ni.PrivateIpAddresses), Prefixes: len(ni.Ipv4Prefixes),
	}
	if a := ni.Attachment; a != nil {
		c.AttachmentID = aws.ToString(a.AttachmentId)
		c.DeviceIndex = int(aws.ToInt32(a.DeviceIndex))
		c.DeleteOnTermination = aws.ToBool(a.DeleteOnTermination)
	}
	for _, t := range ni.TagSet {
		if aws.ToString(t.Key) == TagCreatedAt {
			c.CreatedAt = aws.ToString(t.Value)
		}
	}
	return c
}

// Identity reads the instance's ID and region from IMDS (two or three
// small reads, not the whole discovery).
func Identity(ctx context.Context, md Metadata) (id, region string, err error) {
	r := reader{md: md}
	inst := section.Instance{ID: r.get(ctx, "instance-id"), AZ: r.get(ctx, "placement/availability-zone")}
	if rn := r.optionalList(ctx, "placement/region"); len(rn) == 1 {
		inst.RegionName = rn[0]
	}
	if r.err != nil {
		return "", "", r.err
	}
	return inst.ID, inst.Region(), nil
}
