package ec2fake

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// TestLatencyProfile: each call takes at least its minimum; the link of an attached ENI appears (OnLink) after the link
// delay; DescribeInstanceTypes has vCPUs.
func TestLatencyProfile(t *testing.T) {
	prof := Latency{
		Calls:     map[string]time.Duration{"AssignPrivateIpAddresses": 80 * time.Millisecond, AllActions: 30 * time.Millisecond},
		Jitter:    0.5,
		LinkDelay: 150 * time.Millisecond,
		IMDSLag:   200 * time.Millisecond,
	}
	srv := startServer(t, Config{InstanceType: "m5.xlarge", Latency: &prof})
	c := newEC2(srv, 1)
	ctx := context.Background()
	linked := make(chan ENI, 1)
	var attachedAt time.Time
	srv.OnLink(func(e ENI) { linked <- e })

	for range 3 {
		t0 := time.Now()
		if _, err := c.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
			NetworkInterfaceId: aws.String(srv.PrimaryENI().ID), SecondaryPrivateIpAddressCount: aws.Int32(1),
		}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d < 80*time.Millisecond {
			t.Errorf("AssignPrivateIpAddresses took %s, less than its 80ms minimum", d)
		}
	}
	out, err := c.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"m5.xlarge"}})
	if err != nil {
		t.Fatal(err)
	}
	if vc := out.InstanceTypes[0].VCpuInfo; vc == nil || aws.ToInt32(vc.DefaultVCpus) != 4 {
		t.Errorf("m5.xlarge vCPU info %+v, want 4", vc)
	}
	created, err := c.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(srv.Info().Subnets[0].ID)})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(created.NetworkInterface.NetworkInterfaceId)
	if _, err := c.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{
		NetworkInterfaceId: aws.String(id), InstanceId: aws.String(srv.Info().InstanceID), DeviceIndex: aws.Int32(1),
	}); err != nil {
		t.Fatal(err)
	}
	attachedAt = time.Now()
	select {
	case e := <-linked:
		if d := time.Since(attachedAt); d < 140*time.Millisecond {
			t.Errorf("link appeared %s after the attach reply, want the 150ms link delay", d)
		}
		if e.ID != id || e.MAC == "" || e.DeviceIndex != 1 {
			t.Errorf("OnLink got %+v, want %s at device 1 with its MAC", e, id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnLink never ran")
	}
	if got := srv.LatencyProfile(); got.Min("AttachNetworkInterface") != 30*time.Millisecond || got.Min("AssignPrivateIpAddresses") != 80*time.Millisecond {
		t.Errorf("profile minimums %+v", got)
	}
	if r := RealisticLatency(); r.Min("CreateNetworkInterface") <= 0 || r.LinkDelay <= 0 || r.IMDSLag <= 0 {
		t.Errorf("realistic profile incomplete: %+v", r)
	}
}
