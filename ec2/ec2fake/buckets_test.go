package ec2fake

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
)

// TestAccountBuckets: with the account's buckets, the calls of one action
// beyond its bucket's size are throttled (RequestLimitExceeded, counted
// per action) until the clock has refilled a token; other actions have
// buckets of their own; an unfiltered, unpaginated
// DescribeNetworkInterfaces drains the smaller bucket, a filtered one the
// Describe bucket.
func TestAccountBuckets(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	step := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	th := AccountThrottling()
	srv := startServer(t, Config{Clock: clock, Throttling: &th, EC2BaseLatency: -1})
	c := newEC2(srv, 1)
	ctx := context.Background()
	eni := srv.PrimaryENI().ID
	modify := func() error {
		_, err := c.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{
			NetworkInterfaceId: aws.String(eni), Description: &types.AttributeValue{Value: aws.String("x")},
		})
		return err
	}
	for i := range 100 {
		if err := modify(); err != nil {
			t.Fatalf("call %d of a full bucket of 100: %v", i+1, err)
		}
	}
	err := modify()
	if api := (smithy.APIError)(nil); !errors.As(err, &api) || api.ErrorCode() != "RequestLimitExceeded" {
		t.Fatalf("call 101: %v, want RequestLimitExceeded", err)
	}
	step(100 * time.Millisecond) // half a token at 5 a second
	if err := modify(); err == nil {
		t.Fatal("a call 100 ms later was served: no token was due")
	}
	step(100 * time.Millisecond)
	if err := modify(); err != nil {
		t.Fatalf("a call 200 ms after the bucket ran dry: %v, want served (5 tokens a second)", err)
	}
	if got := srv.Throttled(); got["ModifyNetworkInterfaceAttribute"] != 2 || len(got) != 1 {
		t.Errorf("throttled %v, want 2 ModifyNetworkInterfaceAttribute", got)
	}
	if got := srv.Calls()["ModifyNetworkInterfaceAttribute"]; got != 103 {
		t.Errorf("calls counted %d, want 103 (throttled ones too)", got)
	}
	// Another action's bucket is full.
	if _, err := c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(eni), SecondaryPrivateIpAddressCount: aws.Int32(1)}); err != nil {
		t.Fatalf("assign beside a dry Modify bucket: %v", err)
	}
	describe := func(in *ec2.DescribeNetworkInterfacesInput) error {
		_, err := c.DescribeNetworkInterfaces(ctx, in)
		return err
	}
	for i := range 50 {
		if err := describe(&ec2.DescribeNetworkInterfacesInput{}); err != nil {
			t.Fatalf("unfiltered describe %d of 50: %v", i+1, err)
		}
	}
	if err := describe(&ec2.DescribeNetworkInterfacesInput{}); err == nil {
		t.Fatal("unfiltered describe 51 served: its bucket holds 50")
	}
	filtered := &ec2.DescribeNetworkInterfacesInput{Filters: []types.Filter{{Name: aws.String("attachment.instance-id"), Values: []string{srv.Info().InstanceID}}}}
	if err := describe(filtered); err != nil {
		t.Fatalf("filtered describe after the unfiltered bucket ran dry: %v", err)
	}
	if err := describe(&ec2.DescribeNetworkInterfacesInput{MaxResults: aws.Int32(5)}); err != nil {
		t.Fatalf("paginated describe after the unfiltered bucket ran dry: %v", err)
	}
	srv.SetThrottling(nil)
	for range 200 {
		if err := modify(); err != nil {
			t.Fatalf("throttling off: %v", err)
		}
	}
}

// TestDrain: the time the buckets need for a set of calls is the longest
// of each bucket's calls beyond its size at its refill rate.
func TestDrain(t *testing.T) {
	th := AccountThrottling()
	d, which := th.Drain(map[string]int{"AttachNetworkInterface": 2000, "CreateNetworkInterface": 2000, "DescribeInstanceTypes": 1000})
	if d != 390*time.Second || which != MutatingAction {
		t.Errorf("drain %v (%s), want 390s for 2000 Attach calls (50 then 5 a second)", d, which)
	}
	if d, _ := th.Scaled(10).Drain(map[string]int{"AttachNetworkInterface": 2000}); d != 39*time.Second {
		t.Errorf("scaled ×10: %v, want 39s", d)
	}
}

// TestShrunk: a fleet of 20 meets the account's buckets shrunk by 20/1000:
// sizes and refills scaled, never below one token, the bound unchanged
// when both scale alike.
func TestShrunk(t *testing.T) {
	acct := AccountThrottling()
	th := acct.Shrunk(0.02, 0.08)
	if b := th.Buckets["AssignPrivateIpAddresses"]; b.Size != 2 || b.Refill != 0.4 {
		t.Errorf("Assign bucket %+v, want size 2, refill 0.4", b)
	}
	if b := th.Buckets[MutatingAction]; b.Size != 1 {
		t.Errorf("mutating bucket %+v, want size 1", b)
	}
	big, _ := acct.Drain(map[string]int{"AttachNetworkInterface": 2000})
	small, _ := acct.Shrunk(0.02, 0.02).Drain(map[string]int{"AttachNetworkInterface": 40})
	if big != small {
		t.Errorf("1,000 nodes drain the Attach bucket in %s, 20 against it shrunk in %s", big, small)
	}
}
