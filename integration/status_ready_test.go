package integration

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// TestEC2StatusNotReadyUntilFilled runs STATUS (cniVersion 1.1.0) through
// the binary on a new ec2 node, as containerd 2.x does on every CRI Status:
// not ready (50) while no warm pass has filled the pool in this boot, each
// time saying why (the failing pass's reason once there is one); STATUS
// itself starts the passes (no timer, no ADD here), and once EC2 assigns,
// the node turns ready with no ADD.
func TestEC2StatusNotReadyUntilFilled(t *testing.T) {
	en := newDryNode(t, ec2fake.Config{})
	en.fake.InjectFault("AssignPrivateIpAddresses", ec2fake.Fault{Code: "InternalError", Message: "We encountered an internal error."})
	nw := newEC2Network(t, en, "1.1.0", map[string]any{"warmIPTarget": 3}, map[string]any{})
	nw.setConf(t, func(c map[string]any) { c["logFile"] = filepath.Join(filepath.Dir(nw.stateDir), "eni-cni.log") })
	t.Cleanup(func() { nw.waitWarmIdle(t) })
	status := func() output { return nw.run(t, dryEnv("STATUS", nil), nw.config(t)) }

	wantCNIError(t, "STATUS on a new node", status(), 50, "not ready for pods", "started a warm pass")
	nw.waitWarmIdle(t)
	wantCNIError(t, "STATUS after a failed pass", status(), 50, "not been filled since boot", "InternalError")

	en.fake.ClearFaults()
	start := time.Now()
	var o output
	for o = status(); o.exit != 0 && time.Since(start) < 30*time.Second; o = status() {
		time.Sleep(time.Second) // kubelet asks every 5 s
	}
	if o.exit != 0 {
		t.Fatalf("STATUS 30 s after EC2 assigns again: %s", o)
	}
	t.Logf("ready %s after EC2 assigns again (STATUS every second)", time.Since(start).Round(100*time.Millisecond))
	if st := nw.dryState(t); len(st.Allocations) != 0 {
		t.Errorf("allocations %+v: STATUS made the node ready with no ADD", st.Allocations)
	}
	if n := en.fake.Calls()["AssignPrivateIpAddresses"]; n < 2 {
		t.Errorf("%d assign calls; want the failed one and the one that filled", n)
	}
}
