package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// wantNotReady checks that STATUS failed with code 50 (kubelet's
// NetworkReady=false) saying all of parts.
func wantNotReady(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	ce := toCNIError(err)
	if err == nil || ce.Code != types.ErrPluginNotAvailable {
		t.Fatalf("%s: STATUS %v, want code 50", what, err)
	}
	for _, p := range parts {
		if !strings.Contains(ce.Msg, p) {
			t.Errorf("%s: message %q does not say %q", what, ce.Msg, p)
		}
	}
}

// TestEC2StatusReadyWhenFilled: on an ec2 pool (readyWhenFilled on by
// default) STATUS says not ready, code 50, while the pool was not filled
// in this boot; ready once it was; still ready drained by pods while it can
// grow; not ready drained when the last pass says it cannot grow. After a
// reboot the first STATUS reads IMDS itself: the addresses EC2 still
// assigns make the node ready with no warm pass.
func TestEC2StatusReadyWhenFilled(t *testing.T) {
	f := startFake(t)
	p, _ := newEC2Plugin(t, f.URL())
	ctx := context.Background()
	_, err := p.Status(ctx)
	wantNotReady(t, "empty pool", err, "cannot serve ADD", "not been filled since boot", "warmIPTarget 5")

	ips, err := f.SeedIPs(f.PrimaryENI().ID, 5)
	if err != nil {
		t.Fatal(err)
	}
	seedPool(t, p, f, p.Mgr.BootID, ips...)
	setSection(t, p, func(sec *section.EC2) { sec.FilledBoot = p.Mgr.BootID })
	if _, err := p.Status(ctx); err != nil {
		t.Fatalf("filled: %v", err)
	}
	for i := range 5 {
		if _, _, err := p.Mgr.Allocate(ctx, alloc.Request{Key: att("c" + string(rune('0'+i))).Key}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Status(ctx); err != nil {
		t.Errorf("drained, can grow: %v", err)
	}
	setSection(t, p, func(sec *section.EC2) {
		sec.Growth = &section.PassOutcome{Result: section.PassSubnetFull, Boot: p.Mgr.BootID, Message: "InsufficientFreeAddressesInSubnet"}
	})
	_, err = p.Status(ctx)
	wantNotReady(t, "drained, subnet full", err, "cannot grow", "the subnet is full", "5 allocated")

	// A reboot: the store was checked and filled in another boot, and
	// the last STATUS that started anything is long past.
	os.Remove(filepath.Join(p.Cfg.StateDir, "status.warm"))
	err = p.Mgr.Update(ctx, func(st *alloc.State) (bool, error) {
		st.BootID, st.EC2.VerifiedBoot, st.EC2.FilledBoot, st.EC2.Growth = "old-boot", "old-boot", "old-boot", nil
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Status(ctx); err != nil {
		t.Errorf("after a reboot, with addresses in IMDS: %v", err)
	}
	st, _, _ := p.Mgr.Snapshot(ctx)
	if st.EC2.VerifiedBoot != p.Mgr.BootID || st.EC2.FilledBoot != p.Mgr.BootID {
		t.Errorf("after STATUS's IMDS look: verified %q filled %q, want this boot", st.EC2.VerifiedBoot, st.EC2.FilledBoot)
	}
}

// TestEC2StatusCorruptStore: a store that cannot be read is not ready,
// code 50, saying so.
func TestEC2StatusCorruptStore(t *testing.T) {
	f := startFake(t)
	p, _ := newEC2Plugin(t, f.URL())
	if err := os.WriteFile(filepath.Join(p.Cfg.StateDir, alloc.StateFileName), []byte(`{"version":2,"allocations":[{`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := p.Status(context.Background())
	wantNotReady(t, "corrupt store", err, "cannot serve ADD", "corrupt")
}

func setSection(t *testing.T, p *Plugin, fn func(*section.EC2)) {
	t.Helper()
	err := p.Mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		fn(st.EC2)
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
