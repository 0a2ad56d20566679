package ec2

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// assertStoreIsEC2 checks the store's pool holds exactly what EC2 has
// assigned: nothing lost, nothing made up, nothing twice.
func (e *env) assertStoreIsEC2(t *testing.T) {
	t.Helper()
	_, _, src := e.counts(t)
	held := map[string]int{}
	seen := map[string]bool{}
	for _, p := range src.Addrs {
		if seen[p.IP.String()] {
			t.Errorf("%s is in the pool twice", p.IP)
		}
		seen[p.IP.String()] = true
		held[p.ENI]++
	}
	for _, eni := range e.fake.ENIs() {
		if held[eni.ID] != len(eni.SecondaryIPs) {
			t.Errorf("%s: the store has %d addresses, EC2 assigned %d", eni.ID, held[eni.ID], len(eni.SecondaryIPs))
		}
	}
	if src.Dirty {
		t.Error("the store is still marked dirty")
	}
}

// TestEC2CallTimesOut: an assign call that EC2 carries out but whose reply
// never arrives before warm's deadline. warm fails saying which call timed
// out; the store is marked dirty, and the next pass learns the assigned
// addresses back from EC2 (nothing lost, nothing assigned twice).
func TestEC2CallTimesOut(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 3})
	e.warm(t)
	e.w.Cfg.WarmIPTarget = 6
	e.fake.SetLatency("AssignPrivateIpAddresses", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err := e.w.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "assign addresses to eni-") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("warm with EC2 not answering: %v, want a deadline naming the assign call", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("warm took %s past its 1 s deadline", d)
	}
	if _, _, src := e.counts(t); !src.Dirty {
		t.Error("a call that may have changed EC2 left no dirty mark")
	}
	e.fake.SetLatency("AssignPrivateIpAddresses", 0)
	time.Sleep(100 * time.Millisecond) // the fake finishes the abandoned call
	e.fake.ResetCalls()
	e.warm(t)
	if e.fake.Calls()["DescribeNetworkInterfaces"] == 0 {
		t.Error("the pass after the timeout did not read the truth back")
	}
	e.assertStoreIsEC2(t)
	if c, _, _ := e.counts(t); c.Free < 6 {
		t.Errorf("pool %+v, want the target of 6 free reached", c)
	}
}

// TestEC2ServerErrors: EC2 answering 500 InternalError is retried, then
// reported with the code and the ENI; the store keeps what EC2 has, and
// the pass after EC2 recovers reaches the target.
func TestEC2ServerErrors(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 3})
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	e.warm(t)
	e.w.Cfg.WarmIPTarget = 6
	e.fake.InjectFault("AssignPrivateIpAddresses", ec2fake.Fault{Code: "InternalError", HTTPStatus: 500})
	err := e.w.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "InternalError") || !strings.Contains(err.Error(), "assign addresses to eni-") {
		t.Fatalf("warm with EC2 failing: %v, want InternalError naming the call and ENI", err)
	}
	if n := e.fake.Calls()["AssignPrivateIpAddresses"]; n < 2 {
		t.Errorf("a 500 was not retried (%d calls)", n)
	}
	e.fake.ClearFaults()
	e.warm(t)
	e.assertStoreIsEC2(t)
}

// TestIMDSTimesOut: IMDS that accepts connections and never answers makes
// warm fail within its deadline with an IMDS error, the store untouched.
func TestIMDSTimesOut(t *testing.T) {
	e := newEnv(t, ec2fake.Config{}, section.WarmConfig{WarmIPTarget: 3})
	e.mgr.Snapshot(context.Background()) // the first call records the boot
	before := e.st.Bytes()
	e.fake.SetIMDSLatency(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := e.w.Run(ctx)
	if !errors.Is(err, ErrIMDS) || !strings.Contains(err.Error(), "instance") {
		t.Fatalf("warm with IMDS hanging: %v, want an IMDS error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("warm took %s past its 2 s deadline", d)
	}
	if string(before) != string(e.st.Bytes()) {
		t.Error("the store changed although IMDS said nothing")
	}
}
