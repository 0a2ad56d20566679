package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// newEC2Plugin is a plugin on the ec2 source whose IMDS is the fake.
func newEC2Plugin(t *testing.T, imdsURL string) (*plugin, *alloc.MemStore) {
	t.Helper()
	p, _, s := newTestPlugin(t, "10.99.0.0/24")
	cfg, err := parseConfig([]byte(`{"cniVersion":"1.0.0","name":"pods","pool":{"source":"ec2"},"imdsEndpoint":"` + imdsURL + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	p.cfg = cfg
	p.mgr.Pool = cfg.Pool
	p.source = ec2Source{cfg: cfg, mgr: p.mgr}
	return p, s
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
	if leanBuild {
		t.Skip("the lean build refreshes in a child process, which cannot see this test's in-memory store; integration tests cover it")
	}
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
	st, _, _ := p.mgr.Snapshot(ctx)
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
	if _, err := p.status(context.Background()); err != nil {
		t.Errorf("empty pool with IMDS reachable is not a fault: %v", err)
	}
	p, _ = newEC2Plugin(t, "http://127.0.0.1:1")
	start := time.Now()
	_, err := p.status(context.Background())
	if ce := toCNIError(err); ce.Code != types.ErrPluginNotAvailable || !strings.Contains(ce.Msg, "instance metadata") {
		t.Errorf("empty pool, no IMDS: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("STATUS took %s", time.Since(start))
	}
}

func TestWarmSkipsWhileAnotherPassRuns(t *testing.T) {
	if leanBuild {
		t.Skip("the lean build execs the full build in place of the test process; covered by the default build")
	}
	f := startFake(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "c.conflist")
	os.WriteFile(conf, []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni","stateDir":"`+dir+
		`/state","imdsEndpoint":"`+f.URL()+`","ec2Endpoint":"`+f.URL()+`","pool":{"source":"ec2"}}]}`), 0o600)
	os.MkdirAll(filepath.Join(dir, "state"), 0o700)
	other := flock.New(filepath.Join(dir, "state", "warm.lock"))
	if ok, err := other.TryLock(); !ok || err != nil {
		t.Fatal(ok, err)
	}
	defer other.Unlock()
	code, out, errs := run("warm", "--config", conf)
	if code != 0 || !strings.Contains(out, "another pass is running") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if f.IMDSCalls() != 0 || len(f.Calls()) != 0 {
		t.Errorf("a skipped pass called IMDS/EC2: %d, %v", f.IMDSCalls(), f.Calls())
	}
}
