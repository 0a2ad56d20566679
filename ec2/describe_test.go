package ec2

import (
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// TestDescribesFilteredAndPaged: no DescribeNetworkInterfaces of warm
// lands in the account's bucket of unfiltered, unpaginated calls (here
// one that throttles every call), and the leak sweep reads every page: 120
// leaked ENIs, more than one page holds, are all deleted.
func TestDescribesFilteredAndPaged(t *testing.T) {
	th := ec2fake.AccountThrottling()
	th.Buckets[ec2fake.UnfilteredDescribe] = ec2fake.Bucket{}
	th.Buckets["DeleteNetworkInterface"] = ec2fake.Bucket{Size: 2000, Refill: 5}
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large", Subnets: []ec2fake.SubnetConfig{{CIDR: "10.0.0.0/20"}}}, section.WarmConfig{WarmIPTarget: 3})
	id := e.fake.Info().InstanceID
	old := e.now.Add(-time.Hour).UTC().Format(time.RFC3339)
	for range describePage + 20 {
		if _, err := e.fake.SeedENI(ec2fake.ENISpec{Detached: true, Tags: map[string]string{TagInstanceID: id, TagCreatedAt: old}}); err != nil {
			t.Fatal(err)
		}
	}
	e.fake.SetThrottling(&th)
	e.warm(t)
	if got := e.fake.Throttled(); len(got) != 0 {
		t.Errorf("throttled calls %v: a describe was unfiltered or unpaged", got)
	}
	if n := e.fake.Calls()["DeleteNetworkInterface"]; n != describePage+20 {
		t.Errorf("%d leaked ENIs deleted, want %d (every page of the sweep)", n, describePage+20)
	}
	for _, en := range e.fake.ENIs() {
		if en.Status == "available" {
			t.Errorf("%s left available", en.ID)
		}
	}
}
