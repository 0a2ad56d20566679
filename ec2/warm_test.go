package ec2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// env is one simulated node: the fake AWS, real SDK clients pointed at it,
// a store and a warmer.
type env struct {
	fake *ec2fake.Server
	mgr  *alloc.Manager
	st   *allocfake.Store
	w    *Warmer
	host *fakeHost
	out  *bytes.Buffer
	now  time.Time
}

type fakeHost struct {
	mu        sync.Mutex
	setup     []string
	err       error
	reasserts int
	enis      []section.ENI      // as last reasserted
	pods      []alloc.Allocation // as last reasserted
	repair    []string           // what the next Reassert reports repaired
}

func (h *fakeHost) Reassert(_ context.Context, enis []section.ENI, pods []alloc.Allocation) (HostReport, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reasserts++
	h.enis, h.pods = enis, pods
	r := h.repair
	h.repair = nil
	return HostReport{Repaired: r}, nil
}

func (h *fakeHost) SetupENI(_ context.Context, e section.ENI) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.setup = append(h.setup, e.ID)
	return h.err
}

func newEnv(t testing.TB, cfg ec2fake.Config, wc section.WarmConfig) *env {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	fake, err := ec2fake.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	e := &env{fake: fake, st: allocfake.NewStore(), host: &fakeHost{}, out: &bytes.Buffer{}, now: time.Now()}
	e.mgr = &alloc.Manager{Store: e.st, Pool: alloc.StoredPool{}, BootID: "b", Cooldown: 30 * time.Second, Now: e.clock}
	md := NewMetadataClient(fake.URL())
	e.w = &Warmer{Mgr: e.mgr, API: NewAPI(fake.URL(), "us-east-1", md), MD: md, Host: e.host, Cfg: wc, Out: e.out, Now: e.clock}
	return e
}

func (e *env) clock() time.Time { return e.now }

func (e *env) warm(t testing.TB) {
	t.Helper()
	if err := e.w.Run(context.Background()); err != nil {
		t.Fatalf("warm: %v\n%s", err, e.out)
	}
}

func (e *env) counts(t *testing.T) (alloc.Counts, *alloc.State, *section.EC2) {
	t.Helper()
	st, c, err := e.mgr.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c, st, sectionOf(st)
}

func (e *env) addPods(t *testing.T, n int) []alloc.Allocation {
	t.Helper()
	var out []alloc.Allocation
	for range n {
		cid := fmt.Sprintf("pod%d-%d", len(out), time.Now().UnixNano())
		a, _, err := e.mgr.Allocate(context.Background(), alloc.Request{Key: alloc.Key{Network: "pods", ContainerID: cid, IfName: "eth0"}})
		if err != nil {
			t.Fatalf("allocate pod %d: %v", len(out), err)
		}
		out = append(out, a)
	}
	return out
}

// ec2Addresses is what EC2 has assigned as secondary addresses, by ENI.
func (e *env) ec2Addresses() map[string]int {
	m := map[string]int{}
	for _, eni := range e.fake.ENIs() {
		m[eni.ID] = len(eni.SecondaryIPs) + 16*len(eni.Prefixes)
	}
	return m
}

func TestDiscoverSeveralENIs(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{})
	primary := e.fake.PrimaryENI()
	if _, err := e.fake.SeedIPs(primary.ID, 3); err != nil {
		t.Fatal(err)
	}
	second, err := e.fake.SeedENI(ec2fake.ENISpec{SecondaryIPCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	third, err := e.fake.SeedENI(ec2fake.ENISpec{PrefixCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := Discover(context.Background(), e.w.MD)
	if err != nil {
		t.Fatal(err)
	}
	if inst.ID != e.fake.Info().InstanceID || inst.Type != "m5.xlarge" || inst.Region() != "us-east-1" || len(inst.ENIs) != 3 {
		t.Fatalf("instance %+v", inst)
	}
	got := inst.ENIs
	if got[0].ID != primary.ID || got[0].DeviceNumber != 0 || got[1].ID != second.ID || got[2].ID != third.ID || got[2].DeviceNumber != 2 {
		t.Errorf("ENIs out of order or wrong: %+v", got)
	}
	if len(got[0].Secondary) != 3 || got[0].PrimaryIP.String() != primary.PrimaryIP || len(got[1].Secondary) != 2 {
		t.Errorf("secondaries: %v / %v", got[0].Secondary, got[1].Secondary)
	}
	if len(got[2].Prefixes) != 1 || len(got[2].Secondary) != 0 || !got[0].SubnetCIDR.IsValid() || len(got[0].VPCCIDRs) == 0 || len(got[0].SecurityGroups) == 0 {
		t.Errorf("third ENI / subnet: %+v", got[2])
	}
	src := &section.EC2{}
	if d := section.Reconcile(src, inst, time.Now()); d.Found != 3+2+16 {
		t.Errorf("merged %d addresses, want 21 (primaries excluded)", d.Found)
	}
	for _, p := range src.Addrs {
		if p.IP == got[0].PrimaryIP || p.IP == got[1].PrimaryIP {
			t.Errorf("ENI primary %s put in the pool", p.IP)
		}
	}
	if src.ENIs[2].Table() != 3 || src.ENIs[0].Table() != 0 {
		t.Errorf("tables %d %d", src.ENIs[0].Table(), src.ENIs[2].Table())
	}
}

func TestWarmToTargetThenSteady(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 5})
	e.warm(t)
	c, _, src := e.counts(t)
	if c.Free != 5 || c.Total != 5 {
		t.Fatalf("after first warm: %+v\n%s", c, e.out)
	}
	if src.Limits == nil || src.Limits.MaxENIs != 3 || src.Limits.IPv4PerENI != 10 {
		t.Errorf("limits not cached: %+v", src.Limits)
	}
	if got := e.ec2Addresses()[e.fake.PrimaryENI().ID]; got != 5 {
		t.Errorf("EC2 has %d secondaries on the primary ENI, want 5", got)
	}
	e.fake.ResetCalls()
	for range 240 { // two hours of 30 s timer runs
		e.now = e.now.Add(30 * time.Second)
		e.warm(t)
	}
	// The budget: the hourly safety net, nothing else.
	if calls := e.fake.Calls(); totalCalls(calls) != 2 || calls["DescribeNetworkInterfaces"] != 2 {
		t.Errorf("two hours of steady state made EC2 calls %v, want 2 DescribeNetworkInterfaces", calls)
	}
	t.Logf("IMDS reads in two hours of steady state: %d (local, free)", e.fake.IMDSCalls())
}

// fillTo starts pods one by one as a kubelet would, with the warm timer
// firing every fifth pod and whenever ADD finds the pool empty. It returns
// how many pods got an address.
func (e *env) fillTo(t *testing.T, n int) (pods int) {
	t.Helper()
	for pods < n {
		cid := fmt.Sprintf("fill-%d", pods)
		_, _, err := e.mgr.Allocate(context.Background(), alloc.Request{Key: alloc.Key{Network: "pods", ContainerID: cid, IfName: "eth0"}})
		if errors.Is(err, alloc.ErrPoolExhausted) {
			before, _, _ := e.counts(t)
			e.warm(t)
			if after, _, _ := e.counts(t); after.Total == before.Total {
				return pods // the node is full
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		pods++
		e.now = e.now.Add(time.Second)
		if pods%5 == 0 {
			e.warm(t)
		}
	}
	return pods
}

func totalCalls(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func TestWarmCreatesENIsUpToLimit(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 5, Tags: map[string]string{"team": "net"}})
	got := e.fillTo(t, 29)
	calls := e.fake.Calls()
	t.Logf("m5.large, warmIPTarget 5: %d pods got addresses with %d EC2 calls %v", got, totalCalls(calls), calls)
	if got != 27 {
		t.Fatalf("got %d pods, want 27 (3 ENIs x 9 secondaries)\n%s", got, e.out)
	}
	enis := e.fake.ENIs()
	if len(enis) != 3 {
		t.Fatalf("EC2 has %d ENIs, want 3 (instance limit)", len(enis))
	}
	for _, eni := range enis[1:] {
		if !eni.DeleteOnTermination || eni.Tags[TagInstanceID] != e.fake.Info().InstanceID || eni.Tags["team"] != "net" || eni.Tags[TagCreatedAt] == "" {
			t.Errorf("created ENI %s: DeleteOnTermination %v, tags %v", eni.ID, eni.DeleteOnTermination, eni.Tags)
		}
		if eni.DeviceIndex < 1 || eni.SubnetID != enis[0].SubnetID {
			t.Errorf("ENI %s at device %d in %s", eni.ID, eni.DeviceIndex, eni.SubnetID)
		}
	}
	if len(e.host.setup) != 2 {
		t.Errorf("host setup ran for %v, want the 2 new ENIs", e.host.setup)
	}
	c, st, src := e.counts(t)
	if c.Total != 27 || c.Allocated != 27 || len(src.ENIs) != 3 {
		t.Errorf("store: %+v, %d ENIs", c, len(src.ENIs))
	}
	for _, a := range st.Allocations {
		if a.ENI == "" {
			t.Errorf("allocation %s has no ENI", a.IP)
		}
	}
	if calls["AttachNetworkInterface"] != 2 || calls["CreateNetworkInterface"] != 2 || calls["AttachmentLimitExceeded"] != 0 {
		t.Errorf("calls %v", calls)
	}
	e.fake.ResetCalls()
	e.warm(t)
	if n := totalCalls(e.fake.Calls()); n != 0 || !strings.Contains(e.out.String(), "all 3 ENIs are full") {
		t.Errorf("full node: %d calls\n%s", n, e.out)
	}
}

func TestWarmPrefixDelegation(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 5, PrefixDelegation: true})
	got := e.fillTo(t, 29)
	calls := e.fake.Calls()
	t.Logf("m5.large, prefix delegation: %d pods with %d EC2 calls %v", got, totalCalls(calls), calls)
	if got != 29 {
		t.Fatalf("got %d pods, want 29", got)
	}
	e.warm(t) // the timer after the last pod: 3 free < 5 wanted
	c, _, src := e.counts(t)
	if c.Total != 48 || len(src.ENIs[0].Prefixes) != 3 {
		t.Errorf("pool %+v, prefixes %v: want three /28s on the primary ENI", c, src.ENIs[0].Prefixes)
	}
}

func TestTrimSparesAllocatedAndCooling(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large", Clock: nil}, section.WarmConfig{WarmIPTarget: 3, TrimAfter: time.Minute})
	e.warm(t)
	pods := e.addPods(t, 3)
	e.warm(t) // 6 in pool, 3 allocated, 3 free
	e.mgr.Cooldown = time.Hour
	for _, p := range pods[:2] {
		if _, _, err := e.mgr.Release(context.Background(), p.Key, p.IP); err != nil {
			t.Fatal(err)
		}
	}
	e.now = e.now.Add(2 * time.Minute) // old enough to trim, but the two freed ones still cool
	e.warm(t)
	c, _, _ := e.counts(t)
	if c.Total != 6 || c.Cooling != 2 {
		t.Fatalf("trimmed while cooling or allocated: %+v\n%s", c, e.out)
	}
	e.mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		st.Cooling = nil
		return true, nil
	})
	e.warm(t)
	c, st, _ := e.counts(t)
	if c.Total != 4 || c.Free != 3 || c.Allocated != 1 {
		t.Fatalf("after cooldown: %+v\n%s", c, e.out)
	}
	ec2IPs := map[string]bool{}
	for _, eni := range e.fake.ENIs() {
		for _, ip := range eni.SecondaryIPs {
			ec2IPs[ip] = true
		}
	}
	if !ec2IPs[pods[2].IP.String()] || len(ec2IPs) != 4 {
		t.Errorf("EC2 holds %v; the allocated %s must stay", ec2IPs, pods[2].IP)
	}
	for _, p := range sectionOf(st).Addrs {
		if !ec2IPs[p.IP.String()] || p.Unusable {
			t.Errorf("store and EC2 disagree on %s", p.IP)
		}
	}
	if !strings.Contains(e.out.String(), "unassigned 2 addresses") {
		t.Errorf("no trim line:\n%s", e.out)
	}
}

func TestIMDSLagNeitherLosesNorDoubles(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large", IMDSLag: time.Hour}, section.WarmConfig{WarmIPTarget: 4, TrimAfter: time.Minute})
	e.fake.SyncIMDS()
	e.warm(t) // EC2 assigns 4; IMDS will not show them for an hour
	r, err := Refresh(context.Background(), e.mgr, e.w.MD, e.now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Added != 0 || len(r.Instance.ENIs[0].Secondary) != 0 {
		t.Fatalf("IMDS should lag: added %d, lists %v", r.Added, r.Instance.ENIs[0].Secondary)
	}
	c, _, _ := e.counts(t)
	if c.Total != 4 {
		t.Fatalf("a lagging IMDS made the pool lose addresses: %+v", c)
	}
	// Give two back (target lowered), while IMDS still lists... nothing
	// new; then let IMDS catch up with the assign but not the unassign.
	e.w.Cfg.WarmIPTarget = 2
	e.now = e.now.Add(2 * time.Minute)
	e.warm(t)
	if c, _, _ := e.counts(t); c.Total != 2 {
		t.Fatalf("trim: %+v\n%s", c, e.out)
	}
	e.fake.SyncIMDS() // IMDS now lists the current truth
	r, err = Refresh(context.Background(), e.mgr, e.w.MD, e.now)
	if err != nil || r.Added != 0 {
		t.Fatalf("refresh after sync added %+v (%v)", r, err)
	}
	seen := map[netip.Addr]bool{}
	_, _, src := e.counts(t)
	for _, p := range src.Addrs {
		if seen[p.IP] {
			t.Errorf("%s twice in the pool", p.IP)
		}
		seen[p.IP] = true
	}
}

func TestTombstonesStopStaleIMDS(t *testing.T) {
	src := &section.EC2{Tombstones: []section.Tombstone{{IP: netip.MustParseAddr("10.0.0.9"), Until: time.Now().Add(time.Minute)}}}
	inst := &section.Instance{ENIs: []section.ENIInfo{{ID: "eni-1", PrimaryIP: netip.MustParseAddr("10.0.0.5"),
		Secondary: []netip.Addr{netip.MustParseAddr("10.0.0.9"), netip.MustParseAddr("10.0.0.10")}}}}
	if d := section.Reconcile(src, inst, time.Now()); d.Found != 1 || src.Addrs[0].IP.String() != "10.0.0.10" {
		t.Fatalf("merged %d: %+v", d.Found, src.Addrs)
	}
	if d := section.Reconcile(src, inst, time.Now().Add(time.Hour)); d.Found != 1 {
		t.Errorf("expired tombstone: merged %d", d.Found)
	}
}

func TestThrottlingRetriedThenReported(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 5})
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	e.fake.Throttle("AssignPrivateIpAddresses", 2)
	e.warm(t)
	if n := e.fake.Calls()["AssignPrivateIpAddresses"]; n != 3 {
		t.Errorf("throttled twice then success: %d calls, want 3", n)
	}
	e.w.Cfg.WarmIPTarget = 10
	e.fake.Throttle("AssignPrivateIpAddresses", 100)
	before := e.st.Bytes()
	err := e.w.Run(context.Background())
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "RequestLimitExceeded" || !strings.Contains(err.Error(), "assign addresses to eni-") {
		t.Fatalf("err = %v, want RequestLimitExceeded naming the ENI", err)
	}
	if !bytes.Equal(before, e.st.Bytes()) {
		t.Error("a failed assign changed the store")
	}
}

func TestIMDSUnreachable(t *testing.T) {
	e := newEnv(t, ec2fake.Config{}, section.WarmConfig{WarmIPTarget: 5})
	e.w.MD = NewMetadataClient("http://127.0.0.1:1")
	e.mgr.Snapshot(context.Background()) // the first call records the boot
	before := e.st.Bytes()
	err := e.w.Run(context.Background())
	if !errors.Is(err, ErrIMDS) || !strings.Contains(err.Error(), "instance-id") {
		t.Fatalf("err = %v, want an IMDS error naming what it read", err)
	}
	if !bytes.Equal(before, e.st.Bytes()) {
		t.Error("store changed although nothing was discovered")
	}
}

func TestIMDSBadReplies(t *testing.T) {
	cases := map[string]func(*ec2fake.Server){
		"server errors": func(f *ec2fake.Server) { f.FailIMDS(1000, 500) },
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, ec2fake.Config{}, section.WarmConfig{})
			breakIt(e.fake)
			if _, err := Discover(context.Background(), e.w.MD); !errors.Is(err, ErrIMDS) {
				t.Errorf("err = %v", err)
			}
		})
	}
}

// fastRetry keeps the retry policy but not its waiting, for tests.
func fastRetry(o *ec2.Options) {
	o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxAttempts = 4
		so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
	})
}

func unusableIPs(src *section.EC2) []netip.Addr {
	var out []netip.Addr
	for _, p := range src.Addrs {
		if p.Unusable {
			out = append(out, p.IP)
		}
	}
	return out
}

func TestFailedUnassignStaysUnusableUntilResync(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 4, TrimAfter: time.Minute})
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	e.warm(t)
	e.w.Cfg.WarmIPTarget = 2
	e.now = e.now.Add(2 * time.Minute)
	e.fake.InjectFault("UnassignPrivateIpAddresses", ec2fake.Fault{Code: "InternalError", HTTPStatus: 500, Times: 100})
	if err := e.w.Run(context.Background()); err == nil {
		t.Fatal("warm with a failing unassign reported success")
	}
	_, _, src := e.counts(t)
	stuck := unusableIPs(src)
	if len(stuck) != 2 || !src.Dirty {
		t.Fatalf("unusable %v, dirty %v: a failed unassign must keep them out of use", stuck, src.Dirty)
	}
	for range 2 { // the free addresses left are the two usable ones
		e.addPods(t, 1)
	}
	if _, _, err := e.mgr.Allocate(context.Background(), alloc.Request{Key: alloc.Key{Network: "pods", ContainerID: "x", IfName: "eth0"}}); !errors.Is(err, alloc.ErrPoolExhausted) {
		t.Fatalf("an address being given back was handed out: %v", err)
	}
	e.fake.ClearFaults()
	e.fake.ResetCalls()
	e.warm(t)
	calls := e.fake.Calls()
	if calls["DescribeNetworkInterfaces"] != 1 || !strings.Contains(e.out.String(), "2 unusable settled") {
		t.Errorf("next pass must resync once: %v\n%s", calls, e.out)
	}
	_, _, src = e.counts(t)
	if len(unusableIPs(src)) != 0 || src.Dirty {
		t.Errorf("after resync: unusable %v, dirty %v", unusableIPs(src), src.Dirty)
	}
	e.fake.ResetCalls()
	e.warm(t)
	if n := totalCalls(e.fake.Calls()); n != 0 {
		t.Errorf("a clean pass after the resync made %d calls", n)
	}
}

func TestUnassignDoneButNotRecordedIsDropped(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 4})
	e.warm(t)
	_, _, src0 := e.counts(t)
	gone := src0.Addrs[:2]
	// warm marked two addresses, unassigned them at EC2, and died before
	// saving the result.
	e.mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		for i := range st.EC2.Addrs[:2] {
			st.EC2.Addrs[i].Unusable = true
		}
		st.EC2.Dirty = true
		return true, nil
	})
	api := NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()))
	if _, err := api.UnassignPrivateIpAddresses(context.Background(), &ec2.UnassignPrivateIpAddressesInput{
		NetworkInterfaceId: &gone[0].ENI, PrivateIpAddresses: []string{gone[0].IP.String(), gone[1].IP.String()},
	}); err != nil {
		t.Fatal(err)
	}
	e.w.Cfg.WarmIPTarget = 2 // no refill: EC2 would hand the same low addresses back
	e.warm(t)
	_, _, src := e.counts(t)
	for _, p := range src.Addrs {
		if p.IP == gone[0].IP || p.IP == gone[1].IP {
			t.Errorf("%s, no longer assigned by EC2, is still in the pool", p.IP)
		}
	}
	if len(src.Tombstones) < 2 {
		t.Errorf("dropped addresses not tombstoned: %v", src.Tombstones)
	}
	if r, err := Refresh(context.Background(), e.mgr, e.w.MD, e.now); err != nil || r.Added != 0 {
		t.Errorf("a refresh from IMDS brought addresses back: %+v %v", r, err)
	}
}

func TestLostRecordsAreLearntBack(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 3})
	e.warm(t) // primary ENI: 3 of its 5 slots
	fail := true
	e.st.SaveFn = func(st *alloc.State) error {
		if fail && st.EC2 != nil && len(st.EC2.ENIs) > 1 { // the save that records the new ENI
			fail = false
			return errors.New("disk full")
		}
		return nil
	}
	e.addPods(t, 3)
	e.w.Cfg.WarmIPTarget = 7 // the primary's 2 free slots, then a new ENI with 5
	if err := e.w.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("warm: %v", err)
	}
	if n := len(e.fake.ENIs()); n != 2 {
		t.Fatalf("EC2 has %d ENIs, want 2 (the new one attached, unrecorded)", n)
	}
	e.fake.ResetCalls()
	e.warm(t)
	_, _, src := e.counts(t)
	if len(src.ENIs) != 2 || len(e.fake.ENIs()) != 2 || e.fake.Calls()["CreateNetworkInterface"] != 0 {
		t.Fatalf("store ENIs %d, EC2 ENIs %d, calls %v: the attached ENI must be learnt, not made again", len(src.ENIs), len(e.fake.ENIs()), e.fake.Calls())
	}
	held := map[string]int{}
	for _, p := range src.Addrs {
		held[p.ENI]++
	}
	for _, eni := range e.fake.ENIs() {
		if held[eni.ID] != len(eni.SecondaryIPs) {
			t.Errorf("%s: store has %d addresses, EC2 %d", eni.ID, held[eni.ID], len(eni.SecondaryIPs))
		}
	}
}

// TestIdlePassWritesNothing: a pass with nothing to do neither marks the
// section dirty nor saves (it used to cost two fsynced saves per pass).
func TestIdlePassWritesNothing(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 5, TrimAfter: time.Minute})
	e.warm(t)
	saves := e.st.Saves
	for range 10 {
		e.now = e.now.Add(30 * time.Second)
		e.warm(t)
	}
	if e.st.Saves != saves {
		t.Errorf("10 idle passes saved %d times", e.st.Saves-saves)
	}
	if _, _, src := e.counts(t); src.Dirty {
		t.Error("an idle pass left the section dirty")
	}
}
