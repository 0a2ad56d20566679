package ec2

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// ready is what STATUS would say of e's pool now.
func (e *env) ready(t *testing.T) error {
	t.Helper()
	st, c, err := e.mgr.Peek()
	if err != nil {
		t.Fatal(err)
	}
	return provider.PoolReady(st, c, e.w.Cfg, e.mgr.BootID)
}

// TestWarmRecordsReadiness: with readyWhenFilled, a pass that fills the
// pool records the boot as filled (the node is ready), a settled pass then
// writes nothing, a pool drained by pods stays ready while it can grow,
// a failed pass nobody waited for is recorded once (the node is not ready
// when nothing is free), the next successful pass clears it, and a reboot
// makes the node not ready until a pass of the new boot.
func TestWarmRecordsReadiness(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 3, ReadyWhenFilled: true})
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	if err := e.ready(t); !errors.Is(err, provider.ErrPoolNotReady) {
		t.Fatalf("before any pass: %v, want not ready", err)
	}
	e.warm(t)
	if err := e.ready(t); err != nil {
		t.Fatalf("after the pass that filled the pool: %v", err)
	}
	_, _, sec := e.counts(t)
	if sec.FilledBoot != "b" || sec.Growth == nil || sec.Growth.Result != section.PassDone || sec.Growth.Boot != "b" {
		t.Fatalf("filledBoot %q growth %+v", sec.FilledBoot, sec.Growth)
	}
	before := e.st.Bytes()
	e.warm(t)
	if !bytes.Equal(before, e.st.Bytes()) {
		t.Error("a settled pass wrote the store")
	}

	// Drained by pods: ready while it can grow.
	e.addPods(t, 3)
	if err := e.ready(t); err != nil {
		t.Errorf("drained, can grow: %v", err)
	}
	// The subnet is full: the next pass fails, and nothing is free.
	e.fake.InjectFault("AssignPrivateIpAddresses", ec2fake.Fault{Code: "InsufficientFreeAddressesInSubnet"})
	if err := e.w.Run(context.Background()); err == nil {
		t.Fatal("pass into a full subnet succeeded")
	}
	err := e.ready(t)
	if !errors.Is(err, provider.ErrPoolNotReady) || !strings.Contains(err.Error(), "cannot grow") || !strings.Contains(err.Error(), "subnet is full") {
		t.Fatalf("drained, subnet full: %v", err)
	}
	failed := e.st.Bytes()
	if err := e.w.Run(context.Background()); err == nil {
		t.Fatal("pass into a full subnet succeeded")
	}
	if !bytes.Equal(failed, e.st.Bytes()) {
		t.Error("the same failure, again, wrote the store")
	}
	e.fake.ClearFaults()
	e.warm(t)
	if err := e.ready(t); err != nil {
		t.Errorf("after a pass that grew the pool again: %v", err)
	}

	// A reboot: filled in the last boot is not filled in this one.
	e.mgr.BootID = "b2"
	if err := e.ready(t); !errors.Is(err, provider.ErrPoolNotReady) || !strings.Contains(err.Error(), "since boot") {
		t.Fatalf("after a reboot: %v, want not ready since boot", err)
	}
	e.warm(t)
	if err := e.ready(t); err != nil {
		t.Errorf("after the first pass of the new boot: %v", err)
	}
}

// TestWarmRecordsNothingForReadinessWhenOff: without readyWhenFilled no
// pass writes what only STATUS would read.
func TestWarmRecordsNothingForReadinessWhenOff(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 3})
	e.warm(t)
	if _, _, sec := e.counts(t); sec.FilledBoot != "" || sec.Growth != nil {
		t.Errorf("filledBoot %q growth %+v", sec.FilledBoot, sec.Growth)
	}
}

// TestRefreshFillsFromLaunchTemplate: the IMDS look of an ADD or STATUS
// records the boot as filled when the addresses a launch template assigned
// meet the targets, with no EC2 call (and pods taking some then leave the
// node ready); fewer than the targets do not.
func TestRefreshFillsFromLaunchTemplate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		assigned  int
		wantReady bool
	}{
		{"as many as warmIPTarget", 5, true},
		{"fewer", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{WarmIPTarget: 5, ReadyWhenFilled: true})
			if err := e.fake.Instances()[0].LaunchTemplate(tc.assigned, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := RefreshTargets(context.Background(), e.mgr, e.w.MD, e.now, &e.w.Cfg); err != nil {
				t.Fatal(err)
			}
			if err := e.ready(t); (err == nil) != tc.wantReady {
				t.Errorf("ready: %v, want ready %v", err, tc.wantReady)
			}
			if tc.wantReady {
				// Filled in this boot: pods taking addresses below the
				// target leave it ready (the warm timer tops it up).
				e.addPods(t, 2)
				if err := e.ready(t); err != nil {
					t.Errorf("filled from IMDS, then 2 pods: %v", err)
				}
			}
			if n := len(e.fake.Calls()); n != 0 {
				t.Errorf("EC2 calls %v, want none", e.fake.Calls())
			}
		})
	}
}
