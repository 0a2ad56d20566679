package ec2

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// mutating are the EC2 actions that change what the account holds.
var mutating = []string{"AssignPrivateIpAddresses", "UnassignPrivateIpAddresses", "CreateNetworkInterface",
	"AttachNetworkInterface", "ModifyNetworkInterfaceAttribute", "DeleteNetworkInterface", "DetachNetworkInterface"}

// TestLaunchTemplateAddressesNoMutations: a node booting with the
// addresses its launch template assigned to its primary ENI (secondary
// addresses, or /28 prefixes with prefix delegation) serves its pods from
// them with no EC2 mutation, through the first passes of its boot and an
// hour of timer passes after.
func TestLaunchTemplateAddressesNoMutations(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		secondaries, prefixes int
		pd                    bool
		pods                  int
	}{
		{"secondary addresses", 14, 0, false, 9},
		{"prefixes", 0, 3, true, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{WarmIPTarget: 5, PrefixDelegation: tc.pd})
			e.w.Spread = true
			if err := e.fake.Instances()[0].LaunchTemplate(tc.secondaries, tc.prefixes); err != nil {
				t.Fatal(err)
			}
			e.demand(t, tc.pods, 25*time.Second)
			e.warm(t)
			for i := range tc.pods {
				k := alloc.Key{Network: "pods", ContainerID: fmt.Sprintf("wait%d-0", i), IfName: "eth0"}
				if _, _, err := e.mgr.Allocate(context.Background(), alloc.Request{Key: k}); err != nil {
					t.Fatalf("pod %d: %v\n%s", i, err, e.out)
				}
			}
			e.passes(t, 120)
			calls := e.fake.Calls()
			for _, a := range mutating {
				if calls[a] != 0 {
					t.Errorf("%s called %d times, want none (all calls %v)\n%s", a, calls[a], calls, e.out)
				}
			}
		})
	}
}
