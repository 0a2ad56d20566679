package ec2

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// ErrSubnetsFull: every pod subnet of the node's zone is full (EC2 said
// so, less than section.FullSubnetTTL ago, or DescribeSubnets shows no
// free address). The pass's outcome is subnet-full.
var ErrSubnetsFull = errors.New("every pod subnet of the zone is full")

// describeSubnetsPage is the page size of subnet discovery: a VPC has far
// fewer subnets in one zone, so one call is the rule.
const describeSubnetsPage = 100

// PodSubnet is a subnet new ENIs for pods may go to, with the security
// groups they get. CIDR is invalid when not known yet (the create then
// describes the subnet).
type PodSubnet struct {
	ID   string
	CIDR netip.Prefix
	Free int // DescribeSubnets' AvailableIpAddressCount; -1 unknown
	SGs  []string
}

// subnetFull reports whether EC2 refused a call because the subnet has no
// free address (or no free /28 for a prefix).
func subnetFull(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "InsufficientFreeAddressesInSubnet", "InsufficientCidrBlocks":
		return true
	}
	return false
}

// defaultSubnet is where new ENIs go without custom subnets: the
// configured subnetID and security groups, else the primary ENI's.
func (w *Warmer) defaultSubnet(src *section.EC2) PodSubnet {
	primary, _ := src.PrimaryENI()
	sn := PodSubnet{ID: primary.SubnetID, CIDR: primary.SubnetCIDR, Free: -1, SGs: primary.SecurityGroups}
	if w.Cfg.SubnetID != "" && w.Cfg.SubnetID != primary.SubnetID {
		sn.ID, sn.CIDR = w.Cfg.SubnetID, netip.Prefix{}
	}
	if len(w.Cfg.SecurityGroupIDs) > 0 {
		sn.SGs = w.Cfg.SecurityGroupIDs
	}
	return sn
}

// nextPodSubnet is the custom subnet the next ENI goes to: the best of
// the node's zone not remembered full. The candidates are read once a
// pass (discovery costs a DescribeSubnets call), and only by a pass that
// creates an ENI.
func (w *Warmer) nextPodSubnet(ctx context.Context, src *section.EC2) (PodSubnet, error) {
	if w.candidates == nil {
		c, err := w.PodSubnets(ctx, src)
		if err != nil {
			return PodSubnet{}, err
		}
		w.candidates = c
	}
	var full []string
	for _, sn := range w.candidates {
		if src.SubnetFull(sn.ID, w.now()) || sn.Free == 0 {
			full = append(full, sn.ID)
			continue
		}
		return sn, nil
	}
	return PodSubnet{}, fmt.Errorf("%w: zone %s: %s", ErrSubnetsFull, src.AZ, strings.Join(full, ", "))
}

// PodSubnets are the candidates of the node's zone, best first: the zone's
// entry of subnets, or the tagged subnets discovery finds.
func (w *Warmer) PodSubnets(ctx context.Context, src *section.EC2) ([]PodSubnet, error) {
	if !w.Cfg.SubnetDiscovery {
		z, ok := w.Cfg.Subnets[src.AZ]
		if !ok {
			zones := slices.Sorted(func(yield func(string) bool) {
				for k := range w.Cfg.Subnets {
					if !yield(k) {
						return
					}
				}
			})
			return nil, fmt.Errorf("no pod subnet for this node's availability zone %s: subnets has %s", src.AZ, strings.Join(zones, ", "))
		}
		sgs := z.SecurityGroupIDs
		if len(sgs) == 0 {
			sgs = w.defaultSubnet(src).SGs
		}
		return []PodSubnet{{ID: z.SubnetID, Free: -1, SGs: sgs}}, nil
	}
	vpc, err := w.vpcID(ctx, src)
	if err != nil {
		return nil, err
	}
	found, err := DiscoverSubnets(ctx, w.API, vpc, src.AZ)
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("discover pod subnets: no subnet of %s in %s is tagged %s", vpc, src.AZ, section.SubnetRoleTag)
	}
	sgs := w.defaultSubnet(src).SGs
	for i := range found {
		found[i].SGs = sgs
	}
	w.say("pod subnets of %s: %s", src.AZ, describeSubnets(found))
	return found, nil
}

// vpcID reads the VPC of the primary ENI from IMDS (local, free).
func (w *Warmer) vpcID(ctx context.Context, src *section.EC2) (string, error) {
	primary, ok := src.PrimaryENI()
	if !ok || w.MD == nil {
		return "", fmt.Errorf("discover pod subnets: the primary ENI is not known")
	}
	r := reader{md: w.MD}
	vpc := r.get(ctx, "network/interfaces/macs/"+primary.MAC+"/vpc-id")
	if r.err != nil {
		return "", fmt.Errorf("discover pod subnets: %w", r.err)
	}
	return vpc, nil
}

// SubnetsAPI is the EC2 call subnet discovery makes.
type SubnetsAPI interface {
	DescribeSubnets(context.Context, *ec2.DescribeSubnetsInput, ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error)
}

// DiscoverSubnets finds the pod subnets of zone in vpc as the AWS VPC
// CNI's subnet discovery does: those tagged kubernetes.io/role/cni (any
// value), most free addresses first. It only reads.
func DiscoverSubnets(ctx context.Context, api SubnetsAPI, vpc, zone string) ([]PodSubnet, error) {
	in := &ec2.DescribeSubnetsInput{
		Filters: []types.Filter{
			{Name: aws.String("vpc-id"), Values: []string{vpc}},
			{Name: aws.String("availability-zone"), Values: []string{zone}},
			{Name: aws.String("tag-key"), Values: []string{section.SubnetRoleTag}},
		},
		MaxResults: aws.Int32(describeSubnetsPage),
	}
	var all []types.Subnet
	for {
		page, err := api.DescribeSubnets(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("discover pod subnets of %s in %s: %w", vpc, zone, err)
		}
		all = append(all, page.Subnets...)
		if aws.ToString(page.NextToken) == "" {
			break
		}
		in.NextToken = page.NextToken
	}
	return rankSubnets(all, vpc, zone), nil
}

// rankSubnets keeps the subnets of vpc and zone carrying the role tag
// (EC2 filtered already; a reply is not trusted to have) and orders them
// by free addresses, most first, then by ID so that ties always choose
// the same one.
func rankSubnets(subnets []types.Subnet, vpc, zone string) []PodSubnet {
	var out []PodSubnet
	for _, s := range subnets {
		if aws.ToString(s.VpcId) != vpc || aws.ToString(s.AvailabilityZone) != zone || !hasTag(s.Tags, section.SubnetRoleTag) {
			continue
		}
		cidr, err := netip.ParsePrefix(aws.ToString(s.CidrBlock))
		if err != nil {
			continue
		}
		out = append(out, PodSubnet{ID: aws.ToString(s.SubnetId), CIDR: cidr.Masked(), Free: int(aws.ToInt32(s.AvailableIpAddressCount))})
	}
	slices.SortFunc(out, func(a, b PodSubnet) int {
		if c := cmp.Compare(b.Free, a.Free); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

func hasTag(tags []types.Tag, key string) bool {
	return slices.ContainsFunc(tags, func(t types.Tag) bool { return aws.ToString(t.Key) == key })
}

func describeSubnets(subnets []PodSubnet) string {
	parts := make([]string, len(subnets))
	for i, s := range subnets {
		parts[i] = fmt.Sprintf("%s (%s, %d free)", s.ID, s.CIDR, s.Free)
	}
	return strings.Join(parts, ", ")
}

// markFull remembers that EC2 found subnet full, so that the fill moves
// on to the zone's next pod subnet and later passes skip it for a while.
func (w *Warmer) markFull(ctx context.Context, subnet string, cause error) error {
	w.say("subnet %s is full, skipped for %s: %v", subnet, section.FullSubnetTTL, cause)
	return w.update(context.WithoutCancel(ctx), func(_ *alloc.State, src *section.EC2) error {
		src.MarkSubnetFull(subnet, w.now())
		return nil
	})
}
