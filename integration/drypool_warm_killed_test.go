package integration

import (
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// TestEC2DryPoolWarmKilled: the warm pass an ADD started is killed with
// SIGKILL (OOM, an operator) after it marked itself running for the
// waiters. The waiting ADD sees at its next look that the pass's process is
// gone, starts another and gets its address within its wait, instead of
// trusting the mark for a minute and timing out.
func TestEC2DryPoolWarmKilled(t *testing.T) {
	en := newDryNode(t, ec2fake.Config{})
	en.fake.SetLatency("DescribeNetworkInterfaces", 30*time.Second) // the first pass stalls after its mark
	nw := newDryNetwork(t, en, map[string]any{"addWaitSeconds": 15})
	p := newPod(t, "outlives-warm")
	done := make(chan output, 1)
	go func() {
		o, err := runIn(t.Context(), nw.node.path(), dryEnv("ADD", p), nw.config(t), pluginBin)
		if err != nil {
			t.Error(err)
		}
		done <- o
	}()
	var pid int
	waitFor(t, "the pass's running mark", func() bool {
		var st struct {
			EC2 *struct {
				PassPID int `json:"passPID"`
			} `json:"ec2"`
		}
		if b := nw.stateBytes(t); b != nil && json.Unmarshal(b, &st) == nil && st.EC2 != nil {
			pid = st.EC2.PassPID
		}
		return pid > 0
	})
	en.fake.SetLatency("DescribeNetworkInterfaces", 0)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the warm pass %d: %v", pid, err)
	}
	select {
	case o := <-done:
		if o.exit != 0 {
			t.Fatalf("ADD whose warm pass was killed: %s", o)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ADD did not end")
	}
	nw.del(t, p, p.path())
	en.assertNoPods(t)
}
