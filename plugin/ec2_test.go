package plugin

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/netconf"
)

// newEC2Plugin is a plugin on the ec2 source whose IMDS is the fake. Its
// store is on disk in a temporary stateDir, under the real boot ID: in the
// lean build ADD's IMDS reads run the full build as a child, which opens
// the store of the config's stateDir and reads the boot ID itself.
func newEC2Plugin(t *testing.T, imdsURL string) (*Plugin, *alloc.DiskStore) {
	t.Helper()
	p, _, _ := newTestPlugin(t, "10.99.0.0/24")
	dir := t.TempDir()
	cfg, err := netconf.Parse([]byte(`{"cniVersion":"1.0.0","name":"pods","stateDir":"` + dir + `","pool":{"source":"ec2","addWaitSeconds":0},"imdsEndpoint":"` + imdsURL + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	store, err := alloc.NewDiskStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := alloc.ReadBootID()
	if err != nil {
		t.Fatal(err)
	}
	p.Cfg = cfg
	p.Mgr.Pool, p.Mgr.Store, p.Mgr.BootID = cfg.Pool, store, boot
	src := provider.EC2{Cfg: cfg, Mgr: p.Mgr, Full: ec2.InProcess{}}
	p.provider, p.Mgr.Admit = src, src.Admit
	return p, store
}

// seedPool gives the store an ec2 section of the fake's instance with
// addresses on its primary ENI, as warm would have left it in bootID.
func seedPool(t *testing.T, p *Plugin, f *ec2fake.Server, bootID string, ips ...string) {
	t.Helper()
	primary := f.PrimaryENI()
	err := p.Mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		st.EC2 = &section.EC2{InstanceID: f.Info().InstanceID, VerifiedBoot: bootID,
			ENIs: []section.ENI{{ID: primary.ID, MAC: primary.MAC, PrimaryIP: netip.MustParseAddr(primary.PrimaryIP)}}}
		for _, ip := range ips {
			st.EC2.Addrs = append(st.EC2.Addrs, section.Addr{IP: netip.MustParseAddr(ip), ENI: primary.ID, Origin: section.OriginAssigned})
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEC2FirstAddOfBootChecksIdentity(t *testing.T) {
	f := startFake(t)
	ips, err := f.SeedIPs(f.PrimaryENI().ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := newEC2Plugin(t, f.URL())
	ctx := context.Background()
	seedPool(t, p, f, "old-boot", ips...)
	calls := f.IMDSCalls()
	if _, err := p.add(ctx, att("c1")); err != nil {
		t.Fatalf("same instance after a reboot: %v", err)
	}
	if f.IMDSCalls() == calls {
		t.Error("the first ADD of a boot did not ask IMDS who this is")
	}
	st, _, _ := p.Mgr.Snapshot(ctx)
	if st.EC2.VerifiedBoot != p.Mgr.BootID {
		t.Errorf("verified in %q, want this boot %q", st.EC2.VerifiedBoot, p.Mgr.BootID)
	}
	calls = f.IMDSCalls()
	if _, err := p.add(ctx, att("c2")); err != nil {
		t.Fatal(err)
	}
	if f.IMDSCalls() != calls {
		t.Error("the second ADD of the boot read IMDS again")
	}
}

func TestEC2BakedImageNeverHandsOutTheBuildersAddresses(t *testing.T) {
	f := startFake(t)
	ips, err := f.SeedIPs(f.PrimaryENI().ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := newEC2Plugin(t, f.URL())
	ctx := context.Background()
	seedPool(t, p, f, "builder-boot", ips...)
	if err := f.BecomeInstance("i-0aaaabbbbccccdddd"); err != nil {
		t.Fatal(err)
	}
	_, err = p.add(ctx, att("c1"))
	if err == nil {
		t.Fatal("a node launched from the image got an address of the builder")
	}
	if toCNIError(err).Code != types.ErrTryAgainLater || !strings.Contains(err.Error(), "eni-cni warm") {
		t.Errorf("err %v (code %d): want try again later, pointing at warm", err, toCNIError(err).Code)
	}
	st, _, _ := p.Mgr.Snapshot(ctx)
	if st.EC2.InstanceID != "i-0aaaabbbbccccdddd" || len(st.EC2.Addrs) != 0 || len(st.Allocations) != 0 {
		t.Errorf("after the identity check: %+v, allocations %v", st.EC2, st.Allocations)
	}
}

func TestEC2FirstAddOfBootWithoutIMDS(t *testing.T) {
	f := startFake(t)
	p, s := newEC2Plugin(t, "http://127.0.0.1:1")
	seedPool(t, p, f, "old-boot", "10.0.0.50")
	read := func() []byte { b, _ := os.ReadFile(s.Path()); return b }
	before := read()
	_, err := p.add(context.Background(), att("c1"))
	if ce := toCNIError(err); ce == nil || ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, "identity") {
		t.Fatalf("err %v: want code 11 saying the identity could not be checked", err)
	}
	if !bytes.Equal(before, read()) {
		t.Error("a refused ADD changed the store")
	}
}

func startFake(t *testing.T) *ec2fake.Server {
	t.Helper()
	f, err := ec2fake.New(ec2fake.Config{InstanceType: "t3.medium"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

func TestEC2AddRefreshesFromIMDSOnce(t *testing.T) {
	f := startFake(t)
	p, _ := newEC2Plugin(t, f.URL())
	ctx := context.Background()
	if _, err := p.add(ctx, att("c0")); err == nil || !strings.Contains(err.Error(), "eni-cni warm") {
		t.Fatalf("empty pool, empty IMDS: %v; want a hint at eni-cni warm", err)
	} else if toCNIError(err).Code != types.ErrTryAgainLater {
		t.Errorf("code %d, want 11", toCNIError(err).Code)
	}
	ips, err := f.SeedIPs(f.PrimaryENI().ID, 2) // assigned outside warm: IMDS knows, the store does not
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.add(ctx, att("c1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.IPs[0].Address.IP.String(); got != ips[0] && got != ips[1] {
		t.Errorf("got %s, want one of %v", got, ips)
	}
	st, _, _ := p.Mgr.Snapshot(ctx)
	if st.EC2 == nil || len(st.EC2.Addrs) != 2 || st.Allocations[0].ENI != f.PrimaryENI().ID {
		t.Errorf("pool %+v, allocation ENI %q", st.EC2, st.Allocations[0].ENI)
	}
	calls := f.IMDSCalls()
	if _, err := p.add(ctx, att("c2")); err != nil {
		t.Fatal(err)
	}
	if f.IMDSCalls() != calls {
		t.Error("ADD read IMDS although the pool had a free address")
	}
}

func TestEC2Status(t *testing.T) {
	f := startFake(t)
	p, _ := newEC2Plugin(t, f.URL())
	// readyWhenFilled off: STATUS as before issue 20 (its default is
	// TestEC2StatusReadyWhenFilled's).
	p.Cfg.Warm.ReadyWhenFilled = false
	if _, err := p.Status(context.Background()); err != nil {
		t.Errorf("empty pool with IMDS reachable is not a fault: %v", err)
	}
	p, _ = newEC2Plugin(t, "http://127.0.0.1:1")
	p.Cfg.Warm.ReadyWhenFilled = false
	start := time.Now()
	_, err := p.Status(context.Background())
	if ce := toCNIError(err); ce.Code != types.ErrPluginNotAvailable || !strings.Contains(ce.Msg, "instance metadata") {
		t.Errorf("empty pool, no IMDS: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("STATUS took %s", time.Since(start))
	}
}
