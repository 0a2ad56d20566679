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
// speed. Without the readiness gate the scheduler sends every pod to a
// node that cannot serve it yet; with it (the real STATUS, as kubelet
// calls it every 5 s) none.
func TestVirtualFleet(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	for _, gate := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			o := Options{Nodes: 20, PodsPerNode: 30, Gate: gate, Timeout: 10 * time.Minute, Warm: section.WarmConfig{WarmIPTarget: 5}}
			r, err := RunVirtual(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("\n%s", Table([]*Report{r}))
			if r.Unserved != 0 || len(r.NodeDone) != o.Nodes {
				t.Errorf("%d pods unserved, %d nodes done", r.Unserved, len(r.NodeDone))
			}
			if want := map[bool]int{false: o.Nodes * o.PodsPerNode, true: 0}[gate]; r.SentUnready != want {
				t.Errorf("gate %v: %d pods sent to nodes that could not serve them, want %d", gate, r.SentUnready, want)
			}
		})
	}
}
