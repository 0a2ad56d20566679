package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// TestSmallFleet: four nodes of ten pods each, well inside the buckets:
// every pod gets an address, nothing is throttled, and nodes whose launch
// template assigned prefixes make no mutating call at all.
func TestSmallFleet(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	base := Options{Nodes: 4, PodsPerNode: 10, Scale: 10, Timeout: 5 * time.Minute, Warm: section.WarmConfig{WarmIPTarget: 5}}
	lt := base
	lt.Warm.PrefixDelegation, lt.LaunchPrefixes = true, 1
	for _, o := range []Options{base, lt} {
		r, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("\n%s", Table([]*Report{r}))
		if r.Unserved != 0 || len(r.NodeDone) != o.Nodes {
			t.Errorf("%s: %d pods unserved", name(o), r.Unserved)
		}
		if len(r.Throttled) != 0 {
			t.Errorf("%s: throttled %v", name(o), r.Throttled)
		}
		if o.LaunchPrefixes > 0 && r.Mutations() != 0 {
			t.Errorf("%s: %d mutating calls, want 0 (calls %v)", name(o), r.Mutations(), r.Calls)
		}
		if o.LaunchPrefixes == 0 && r.Calls["AssignPrivateIpAddresses"] != o.Nodes {
			t.Errorf("%s: %d assigns for %d nodes, want one each", name(o), r.Calls["AssignPrivateIpAddresses"], o.Nodes)
		}
	}
}
