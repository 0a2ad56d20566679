package ec2

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// describePage is the page size of every DescribeNetworkInterfaces warm
// makes: EC2's largest. EC2 rate-limits an unfiltered, unpaginated call
// with a bucket of its own, half the size of the Describe bucket, so warm
// always filters and always paginates. EC2 applies the filters to each page
// after paging, so a call reads MaxResults of the region's ENIs whatever
// matches: a small page would cost one call per 100 ENIs in the account on
// every check, a large one one call per 1000 (AWS's own resource
// controller reverted a paged, filtered describe for that reason).
const describePage = 1000

// describeENIs calls fn with every ENI in's filters match, page by page.
func describeENIs(ctx context.Context, api API, in *ec2.DescribeNetworkInterfacesInput, fn func(*types.NetworkInterface) error) error {
	in.MaxResults, in.NextToken = aws.Int32(describePage), nil
	for {
		out, err := api.DescribeNetworkInterfaces(ctx, in)
		if err != nil {
			return err
		}
		for i := range out.NetworkInterfaces {
			if err := fn(&out.NetworkInterfaces[i]); err != nil {
				return err
			}
		}
		if aws.ToString(out.NextToken) == "" {
			return nil
		}
		in.NextToken = out.NextToken
	}
}
