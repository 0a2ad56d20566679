package ec2

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

func TestCallCounter(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	f, err := ec2fake.New(ec2fake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := NewCallCounter()
	api := NewAPI(f.URL(), "us-east-1", NewMetadataClient(f.URL()), c.Option())
	ctx := context.Background()
	api.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{})
	api.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{})
	f.InjectFault("DescribeInstanceTypes", ec2fake.Fault{Code: "UnauthorizedOperation"})
	if _, err := DescribeLimits(ctx, api, "m5.large"); err == nil {
		t.Fatal("no error")
	}
	calls, errs := c.Counts()
	if calls["DescribeSubnets"] != 2 || errs["DescribeSubnets"] != 0 || calls["DescribeInstanceTypes"] != 1 || errs["DescribeInstanceTypes"] != 1 {
		t.Errorf("calls %v errors %v", calls, errs)
	}
}
