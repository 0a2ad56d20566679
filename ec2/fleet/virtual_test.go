package fleet

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// TestVirtualFleet: twenty nodes of thirty pods on virtual time (a
// synctest bubble): every pod gets an address, and the run takes the
// simulated time EC2's replies and buckets set, whatever the machine's
// speed.
func TestVirtualFleet(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	synctest.Test(t, func(t *testing.T) {
		o := Options{Nodes: 20, PodsPerNode: 30, Timeout: 10 * time.Minute, Warm: section.WarmConfig{WarmIPTarget: 5}}
		start := time.Now()
		r, err := RunVirtual(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("\n%s(virtual %v)", Table([]*Report{r}), time.Since(start))
		if r.Unserved != 0 || len(r.NodeDone) != o.Nodes {
			t.Errorf("%d pods unserved, %d nodes done", r.Unserved, len(r.NodeDone))
		}
	})
}
