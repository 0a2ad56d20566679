package ec2

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// TestWarmDeviceIndexTakenBehindItsBack: an ENI attached behind
// eni-cni's back holds device index 1 and IMDS does not show it yet. The
// batch's creation reserved at 1 fails its attach; the next pass must not
// reserve 1 again.
func TestWarmDeviceIndexTakenBehindItsBack(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge", IMDSLag: time.Hour}, section.WarmConfig{WarmIPTarget: 5})
	e.warm(t)
	ctx := context.Background()
	_, _, src := e.counts(t)
	p, _ := src.PrimaryENI()
	out, err := e.w.API.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(p.SubnetID)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.w.API.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{DeviceIndex: aws.Int32(1), NetworkCardIndex: aws.Int32(0),
		InstanceId: aws.String(src.InstanceID), NetworkInterfaceId: out.NetworkInterface.NetworkInterfaceId}); err != nil {
		t.Fatal(err)
	}
	e.demand(t, 30, time.Minute)
	err1 := e.w.Run(ctx)
	e.now = e.now.Add(time.Minute)
	e.demand(t, 30, time.Minute)
	err2 := e.w.Run(ctx)
	t.Logf("pass 1: %v\npass 2: %v", err1, err2)
	if err2 != nil {
		t.Errorf("the second pass failed again: %v\n%s", err2, e.out)
	}
	if err1 == nil {
		t.Error("the pass whose attach met the foreign ENI's index reported no failure")
	}
	// The foreign Create and the batch's two; the refused one deleted
	// again. The second pass learns the foreign ENI (IMDS and the store
	// disagree: a describe) and fills it: no new ENI at index 1 again.
	calls := e.fake.Calls()
	if calls["CreateNetworkInterface"] != 3 || calls["DeleteNetworkInterface"] != 1 {
		t.Errorf("%d creates, %d deletes, want 3 and 1 (no churn at the taken index)\n%s", calls["CreateNetworkInterface"], calls["DeleteNetworkInterface"], e.out)
	}
	if n := len(e.fake.ENIs()); n != 3 {
		t.Errorf("EC2 holds %d ENIs, want 3", n)
	}
	e.assertStoreIsEC2(t)
}
