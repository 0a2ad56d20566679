package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsec2 "github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/gofrs/flock"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/netconf"
)

// dryNode is a node with an ec2 pool on the fake EC2: a state directory,
// and a warm that a test starter runs in-process as `eni-cni warm` would
// run (its own store, warm.lock), with the node side of new ENIs faked.
type dryNode struct {
	t      *testing.T
	fake   *ec2fake.Server
	dir    string
	conf   string
	starts atomic.Int32 // times a warm pass was started
	passes atomic.Int32 // passes that ran (took warm.lock)
	broken func(*ec2fake.Server)
	hold   chan struct{} // when set, passes wait for it to close
	runErr chan error
	wg     sync.WaitGroup // passes running
}

type noENIHost struct{}

func (noENIHost) SetupENI(context.Context, section.ENI) error { return nil }
func (noENIHost) Reassert(context.Context, []section.ENI, []alloc.Allocation) (ec2.HostReport, error) {
	return ec2.HostReport{}, nil
}

func newDryNode(t *testing.T, instanceType string, extra string) *dryNode {
	t.Helper()
	return newDryNodeOf(t, ec2fake.Config{InstanceType: instanceType}, extra)
}

// newDryNodeOf is newDryNode on a fake EC2 configured as fc.
func newDryNodeOf(t *testing.T, fc ec2fake.Config, extra string) *dryNode {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	f, err := ec2fake.New(fc)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	n := &dryNode{t: t, fake: f, dir: filepath.Join(t.TempDir(), "state"), runErr: make(chan error, 100)}
	t.Cleanup(n.wg.Wait) // before the directory goes
	n.conf = `{"cniVersion":"1.0.0","name":"pods","stateDir":"` + n.dir + `","imdsEndpoint":"` + f.URL() +
		`","ec2Endpoint":"` + f.URL() + `","pool":{"source":"ec2"` + extra + `}}`
	return n
}

// plugin is one ADD or DEL process's plugin on the node.
func (n *dryNode) plugin() (*Plugin, *fakeWire) {
	n.t.Helper()
	cfg, err := netconf.Parse([]byte(n.conf))
	if err != nil {
		n.t.Fatal(err)
	}
	p, err := newPlugin(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	w := newFakeWire()
	p.wire = w
	src := p.provider.(provider.EC2)
	src.Warm = n
	p.provider = src
	return p, w
}

// startWarm is the test's provider.WarmStarter: a pass on its own goroutine, like
// the detached process, with the real one-pass-at-a-time lock.
func (n *dryNode) StartWarm(context.Context, *netconf.Config, bool) (string, error) {
	n.starts.Add(1)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.runErr <- n.pass()
	}()
	return "test pass", nil
}

func (n *dryNode) pass() error {
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return err
	}
	busy := flock.New(filepath.Join(n.dir, "warm.lock"))
	if ok, err := busy.TryLock(); err != nil || !ok {
		return err
	}
	defer busy.Unlock()
	n.passes.Add(1)
	if n.hold != nil {
		<-n.hold
	}
	cfg, err := netconf.Parse([]byte(n.conf))
	if err != nil {
		return err
	}
	store, err := alloc.NewDiskStore(n.dir)
	if err != nil {
		return err
	}
	boot, _ := alloc.ReadBootID()
	mgr := &alloc.Manager{Store: store, Pool: cfg.Pool, Families: cfg.Families, BootID: boot, Cooldown: cfg.Cooldown, LockTimeout: 10 * time.Second}
	md := ec2.NewMetadataClient(n.fake.URL())
	w := &ec2.Warmer{Mgr: mgr, MD: md, API: ec2.NewAPI(n.fake.URL(), "us-east-1", md, quickRetry), Host: noENIHost{}, Cfg: cfg.Warm, Out: io.Discard}
	return w.Run(context.Background())
}

// quickRetry keeps the SDK's retry policy without its waiting.
func quickRetry(o *awsec2.Options) {
	o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxAttempts = 3
		so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
	})
}

func (n *dryNode) state() *alloc.State {
	n.t.Helper()
	s, err := alloc.NewDiskStore(n.dir)
	if err != nil {
		n.t.Fatal(err)
	}
	st, err := s.Load()
	if err != nil {
		n.t.Fatal(err)
	}
	return st
}

// addAll runs ADDs of cids at once, each in a plugin of its own.
func (n *dryNode) addAll(cids ...string) map[string]error {
	var mu sync.Mutex
	errs := map[string]error{}
	var wg sync.WaitGroup
	for _, cid := range cids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, _ := n.plugin()
			_, err := p.add(context.Background(), att(cid))
			mu.Lock()
			errs[cid] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	return errs
}

// TestDryPoolADDWaitsForWarm: ADDs at once on a fresh node record their
// demand, start one warm pass between them, are woken by it and all get
// addresses; their demands are gone and the pass sized itself by them.
func TestDryPoolADDWaitsForWarm(t *testing.T) {
	n := newDryNode(t, "t3.large", "") // 11 secondaries on the primary ENI
	errs := n.addAll("a", "b", "c", "d", "e", "f", "g", "h")
	for cid, err := range errs {
		if err != nil {
			t.Errorf("ADD %s: %v", cid, err)
		}
	}
	n.wg.Wait() // the pass records its outcome after the ADDs have their addresses
	st := n.state()
	if len(st.Allocations) != 8 || len(st.Demands) != 0 {
		t.Errorf("%d allocations and demands %+v, want 8 and none", len(st.Allocations), st.Demands)
	}
	if s := n.starts.Load(); s < 1 || s > 2 {
		t.Errorf("warm started %d times for one burst, want 1 (2 if a waiter found the pass over)", s)
	}
	// 8 waiting + warmIPTarget 5 = 13 > 11 on the primary: one assign of 11
	// (a later pass may top up the rest).
	if c := n.fake.Calls(); c["AssignPrivateIpAddresses"] < 1 || c["AssignPrivateIpAddresses"] > 2 {
		t.Errorf("EC2 calls %v, want the need assigned in one call", c)
	}
	if src := st.EC2; src == nil || src.LastPass == nil || src.LastPass.Result == section.PassFailed {
		t.Errorf("outcome %+v", src)
	}
}

// TestDryPoolLaunchTemplateAddressesServeAtOnce: on a fresh node whose
// launch template assigned /28 prefixes to its primary ENI, the first ADDs
// take addresses IMDS lists, without waiting for a warm pass or any EC2
// call: a node of a fleet scaled by hundreds serves its pods as a warm one.
func TestDryPoolLaunchTemplateAddressesServeAtOnce(t *testing.T) {
	n := newDryNode(t, "m5.xlarge", `,"prefixDelegation":true`)
	if err := n.fake.Instances()[0].LaunchTemplate(0, 1); err != nil {
		t.Fatal(err)
	}
	p, _ := n.plugin()
	for _, cid := range []string{"a", "b", "c"} {
		if _, err := p.add(context.Background(), att(cid)); err != nil {
			t.Fatalf("ADD %s: %v", cid, err)
		}
	}
	n.wg.Wait()
	if s := n.starts.Load(); s != 0 {
		t.Errorf("ADDs started %d warm passes, want none", s)
	}
	if c := n.fake.Calls(); len(c) != 0 {
		t.Errorf("EC2 calls %v, want none", c)
	}
}

// TestDryPoolWarmFailureFailsWaiters: a warm pass that IAM denies makes
// the waiting ADD fail, within its wait, with code 11 and that reason; a
// throttled one does not fail it before its wait is up (EC2's buckets
// refill: ec2/provider.throttledPause), and then it says so; nothing is
// left allocated or demanded.
func TestDryPoolWarmFailureFailsWaiters(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fault    func(*ec2fake.Server)
		want     string
		waitsOut bool
	}{
		{"throttled", func(f *ec2fake.Server) { f.Throttle(ec2fake.AllActions, 1000) }, "throttled by EC2", true},
		{"IAM denied", func(f *ec2fake.Server) {
			f.InjectFault("AssignPrivateIpAddresses", ec2fake.Fault{Code: "UnauthorizedOperation", Message: "You are not authorized to perform this operation."})
		}, "denied by IAM", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newDryNode(t, "t3.medium", `,"addWaitSeconds":20`)
			tc.fault(n.fake)
			p, w := n.plugin()
			start := time.Now()
			_, err := p.add(context.Background(), att("x"))
			if err == nil {
				t.Fatal("ADD succeeded")
			}
			if ce := toCNIError(err); ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, tc.want) || !strings.Contains(ce.Msg, "no free address") {
				t.Errorf("error %d %q, want 11 saying %q", ce.Code, ce.Msg, tc.want)
			}
			t.Logf("failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
			if took := time.Since(start); tc.waitsOut != (took >= 20*time.Second) {
				t.Errorf("failed after %s; want the wait (20s) waited out: %v", took, tc.waitsOut)
			}
			st := n.state()
			if len(st.Allocations) != 0 || len(st.Demands) != 0 || len(w.wired) != 0 {
				t.Errorf("left %d allocations, demands %+v, wiring %v", len(st.Allocations), st.Demands, w.wired)
			}
			if tc.waitsOut {
				// The passes it started came after growing pauses, not
				// one after another: 1-2 s, 2-4, 4-8, 8-16 fit in 20 s.
				if starts := n.starts.Load(); starts > 5 {
					t.Errorf("the ADD started %d passes in its 20 s, want at most 5 (paused after each throttled one)", starts)
				}
				// An ADD right after is not failed at once either.
				p2, _ := n.plugin()
				ctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
				defer cancel()
				if _, err := p2.add(ctx, att("y")); err == nil || strings.Contains(err.Error(), tc.want) {
					t.Errorf("ADD after the throttled pass: %v, want it still waiting at its context's end", err)
				}
				return
			}
			// A second ADD right after fails at once with the same reason
			// rather than starting another pass into the same wall.
			starts := n.starts.Load()
			p2, _ := n.plugin()
			if _, err := p2.add(context.Background(), att("y")); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ADD after the failed pass: %v", err)
			}
			if n.starts.Load() != starts {
				t.Error("an ADD right after a failed pass started another")
			}
		})
	}
}

// TestDryPoolHardLimit: on a node whose every ENI is full, ADD fails at once
// with code 11, says the node is full and gives kubelet's maxPods; it
// starts no pass and records no demand. An address cooling down that comes
// back within the wait is waited for instead.
func TestDryPoolHardLimit(t *testing.T) {
	n := newDryNode(t, "t3.small", `,"warmIPTarget":50`) // 3 ENIs x 3 secondaries
	if err := n.pass(); err != nil {
		t.Fatal(err)
	}
	p, _ := n.plugin()
	for i := range 9 { // pods on all three ENIs (their wiring needs ENI links: not here)
		if _, _, err := p.Mgr.Allocate(context.Background(), alloc.Request{Key: alloc.Key{Network: "pods", ContainerID: fmt.Sprintf("full%d", i), IfName: "eth0"}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := p.add(context.Background(), att("one-too-many"))
	ce := toCNIError(err)
	if ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, "node is full") || !strings.Contains(ce.Msg, "maxPods to 11") ||
		!strings.Contains(ce.Msg, "9 pod addresses") {
		t.Errorf("error %d %q, want 11: node is full, maxPods to 11", ce.Code, ce.Msg)
	}
	if n.starts.Load() != 0 || len(n.state().Demands) != 0 {
		t.Errorf("at the hard limit: %d warm starts, demands %+v", n.starts.Load(), n.state().Demands)
	}

	// A pod on the primary ENI goes; its address cools down for 5 s (the
	// minimum), less than the wait: the next ADD waits for it (no wake-up comes for a
	// cooldown's end) instead of failing.
	n.conf = strings.Replace(n.conf, `"pool"`, `"cooldownSeconds":5,"pool"`, 1)
	p, _ = n.plugin()
	st := n.state()
	src := st.EC2
	var onPrimary alloc.Allocation
	for _, a := range st.Allocations {
		if a.ENI == src.ENIs[0].ID {
			onPrimary = a
		}
	}
	if _, _, err := p.Mgr.Release(context.Background(), onPrimary.Key, onPrimary.IP); err != nil {
		t.Fatal(err)
	}
	p, _ = n.plugin()
	res, err := p.add(context.Background(), att("after-cooldown"))
	if err != nil {
		t.Fatalf("ADD while an address cools down for 5s: %v, want it to wait for it", err)
	}
	if got := res.IPs[0].Address.IP.String(); got != onPrimary.IP.String() {
		t.Errorf("ADD after the cooldown got %s, want the cooled %s", got, onPrimary.IP)
	}
	if n.starts.Load() != 0 {
		t.Errorf("warm started %d times on a node at its hard limit", n.starts.Load())
	}
}

// TestDryPoolDELOfWaitingAttachment: DEL of an attachment whose ADD waits
// withdraws the demand; the ADD stops without an address, and nothing of
// it is left.
func TestDryPoolDELOfWaitingAttachment(t *testing.T) {
	n := newDryNode(t, "t3.medium", "")
	n.hold = make(chan struct{}) // the pass does not get anywhere
	defer close(n.hold)
	p, w := n.plugin()
	done := make(chan error, 1)
	go func() {
		_, err := p.add(context.Background(), att("waiting"))
		done <- err
	}()
	k := alloc.Key{Network: "pods", ContainerID: "waiting", IfName: "eth0"}
	for n.state().FindDemand(k) < 0 {
		time.Sleep(10 * time.Millisecond)
	}
	d, _ := n.plugin()
	if err := d.del(context.Background(), k, ""); err != nil {
		t.Fatalf("DEL of the waiting attachment: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, provider.ErrWithdrawn) || toCNIError(err).Code != types.ErrTryAgainLater {
			t.Errorf("waiting ADD after DEL: %v, want %v (code 11)", err, provider.ErrWithdrawn)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting ADD did not stop after DEL")
	}
	st := n.state()
	if len(st.Allocations) != 0 || len(st.Demands) != 0 || len(w.wired) != 0 {
		t.Errorf("left %d allocations, demands %+v, wiring %v", len(st.Allocations), st.Demands, w.wired)
	}
}

// TestDryPoolWaitEnds: with no pass finishing, ADD gives up at
// addWaitSeconds with code 11, saying it waited and for what, and leaves
// no demand.
func TestDryPoolWaitEnds(t *testing.T) {
	n := newDryNode(t, "t3.medium", `,"addWaitSeconds":0.5`)
	n.hold = make(chan struct{})
	defer close(n.hold)
	p, _ := n.plugin()
	_, err := p.add(context.Background(), att("late"))
	ce := toCNIError(err)
	if ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, "waited 500ms for eni-cni warm (started as test pass)") ||
		!strings.Contains(ce.Msg, "no pass finished") {
		t.Errorf("error %d %q", ce.Code, ce.Msg)
	}
	if d := n.state().Demands; len(d) != 0 {
		t.Errorf("demand left: %+v", d)
	}
	if got := fmt.Sprint(p.addAttrs...); !strings.Contains(got, "waitedMs") || !strings.Contains(got, "test pass") {
		t.Errorf("log attrs %v", p.addAttrs)
	}
}

// TestDryPoolNoWait: addWaitSeconds 0 is the old behaviour: code 11 at once,
// no demand, no pass started.
func TestDryPoolNoWait(t *testing.T) {
	n := newDryNode(t, "t3.medium", `,"addWaitSeconds":0`)
	p, _ := n.plugin()
	_, err := p.add(context.Background(), att("x"))
	if ce := toCNIError(err); ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, "check that `eni-cni warm` runs") {
		t.Errorf("error %d %q", ce.Code, ce.Msg)
	}
	if n.starts.Load() != 0 || len(n.state().Demands) != 0 {
		t.Errorf("addWaitSeconds 0: %d starts, demands %+v", n.starts.Load(), n.state().Demands)
	}
}

// TestWaitingADDChecksIdentityFirst: with addWaitSeconds (the default), the
// first ADD of a boot still compares the store with IMDS before handing
// out its addresses, and fails with code 11 and no change when IMDS cannot
// say who this is.
func TestWaitingADDChecksIdentityFirst(t *testing.T) {
	f := startFake(t)
	ips, err := f.SeedIPs(f.PrimaryENI().ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := newEC2Plugin(t, f.URL())
	p.Cfg.AddWait = 25 * time.Second
	seedPool(t, p, f, "old-boot", ips...)
	calls := f.IMDSCalls()
	if _, err := p.add(context.Background(), att("c1")); err != nil {
		t.Fatalf("same instance after a reboot: %v", err)
	}
	st, _, _ := p.Mgr.Snapshot(context.Background())
	if f.IMDSCalls() == calls || st.EC2.VerifiedBoot != p.Mgr.BootID {
		t.Errorf("identity not checked: %d IMDS calls, verified in %q", f.IMDSCalls()-calls, st.EC2.VerifiedBoot)
	}

	p, s := newEC2Plugin(t, "http://127.0.0.1:1")
	p.Cfg.AddWait = 25 * time.Second
	seedPool(t, p, f, "old-boot", "10.0.0.50")
	before, _ := os.ReadFile(s.Path())
	_, err = p.add(context.Background(), att("c2"))
	if ce := toCNIError(err); ce == nil || ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, "identity") {
		t.Fatalf("IMDS down: %v, want code 11 about the identity", err)
	}
	if after, _ := os.ReadFile(s.Path()); string(after) != string(before) {
		t.Error("a refused ADD changed the store")
	}
}
