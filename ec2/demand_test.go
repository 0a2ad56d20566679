package ec2

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// demand records n ADDs waiting on a dry pool for wait, as the plugin does.
func (e *env) demand(t *testing.T, n int, wait time.Duration) []alloc.Key {
	t.Helper()
	var keys []alloc.Key
	err := e.mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		for i := range n {
			k := alloc.Key{Network: "pods", ContainerID: fmt.Sprintf("wait%d-%d", i, len(st.Demands)), IfName: "eth0"}
			st.Demands = append(st.Demands, alloc.Demand{Key: k, Since: e.now, Until: e.now.Add(wait)})
			keys = append(keys, k)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func (e *env) lastPass(t *testing.T) *section.PassOutcome {
	t.Helper()
	_, _, src := e.counts(t)
	return src.LastPass
}

// TestWarmSizesByDemand: 30 ADDs waiting on a fresh m5.xlarge (4 ENIs x 14
// secondaries) get their addresses from one pass with one
// AssignPrivateIpAddresses per ENI (the primary's, then the count given to
// CreateNetworkInterface), and warmIPTarget on top; the outcome is recorded
// for them. Afterwards an hour of timer passes assigns nothing and writes
// no outcome.
func TestWarmSizesByDemand(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{WarmIPTarget: 5})
	keys := e.demand(t, 30, 25*time.Second)
	w, err := e.mgr.Watch()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e.warm(t)
	c, _, src := e.counts(t)
	if c.Total != 35 || c.Free != 35 {
		t.Fatalf("after one pass for 30 waiting ADDs: %+v, want 35 addresses (30 + warmIPTarget 5)\n%s", c, e.out)
	}
	calls := e.fake.Calls()
	want := map[string]int{"DescribeInstanceTypes": 0, "AssignPrivateIpAddresses": 1, "CreateNetworkInterface": 2, "AttachNetworkInterface": 2, "ModifyNetworkInterfaceAttribute": 2}
	for k, v := range want {
		if calls[k] != v {
			t.Errorf("%s called %d times, want %d (all calls: %v)", k, calls[k], v, calls)
		}
	}
	if len(src.ENIs) != 3 || src.ENIs[0].Secondary != 14 || src.ENIs[1].Secondary != 14 || src.ENIs[2].Secondary != 7 {
		t.Errorf("ENIs %+v, want 14+14+7 secondaries", src.ENIs)
	}
	if len(e.host.setup) != 2 {
		t.Errorf("new ENIs set up on the node: %v, want 2", e.host.setup)
	}
	if o := src.LastPass; o == nil || o.Result != section.PassDone || !o.At.Equal(e.now.UTC()) || !src.PassStartedAt.IsZero() {
		t.Errorf("outcome %+v (started %v), want done at the pass's time and no pass under way", o, src.PassStartedAt)
	}
	if src.Limits.MaxENIs != 4 || src.Limits.IPv4PerENI != 15 || src.Limits.VCPUs != 0 {
		t.Errorf("limits %+v, want 4 ENIs of 15 from the built-in table (no vCPU count)", src.Limits)
	}
	if woken, _ := w.Wait(context.Background(), time.Second); !woken {
		t.Error("the pass did not wake the waiting ADDs")
	}

	// The waiting ADDs take their addresses; their demands end with it.
	for _, k := range keys {
		if _, _, err := e.mgr.Allocate(context.Background(), alloc.Request{Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	e.now = e.now.Add(time.Minute)
	e.fake.ResetCalls()
	_, _, src = e.counts(t)
	outcome := *src.LastPass
	for range 120 {
		e.now = e.now.Add(30 * time.Second)
		e.warm(t)
	}
	// The demands are gone: nothing is assigned or created any more, and
	// the only call is the hourly DescribeNetworkInterfaces safety net of
	// the reconciliation (at most one per node-hour).
	calls = e.fake.Calls()
	if n := calls["DescribeNetworkInterfaces"]; len(calls) > 1 || (len(calls) == 1 && n != 1) {
		t.Errorf("an hour of timer passes after the burst made EC2 calls: %v, want at most the hourly describe", calls)
	}
	if _, _, src = e.counts(t); src.LastPass == nil || *src.LastPass != outcome || !src.PassStartedAt.IsZero() {
		t.Errorf("quiet passes rewrote the outcome: %+v, was %+v", src.LastPass, outcome)
	}
}

// TestWarmDemandBeyondTheInstance: 58 waiting ADDs on an m5.xlarge fill all
// four ENIs in one pass (56 addresses) and the outcome says the instance
// limit is reached.
func TestWarmDemandBeyondTheInstance(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{WarmIPTarget: 5})
	e.demand(t, 58, 25*time.Second)
	e.warm(t)
	c, _, src := e.counts(t)
	if c.Total != 56 || len(src.ENIs) != 4 {
		t.Fatalf("pool %+v on %d ENIs, want 56 on 4", c, len(src.ENIs))
	}
	if n := e.fake.Calls()["AssignPrivateIpAddresses"]; n != 1 {
		t.Errorf("AssignPrivateIpAddresses called %d times, want 1", n)
	}
	if o := src.LastPass; o == nil || o.Result != section.PassInstanceLimit {
		t.Errorf("outcome %+v, want %s", o, section.PassInstanceLimit)
	}
	if !src.AtHardLimit(0) {
		t.Error("the store does not show the node at its hard limit")
	}
	if !strings.Contains(e.out.String(), "all 4 ENIs are full") {
		t.Errorf("output: %s", e.out)
	}
}

// TestWarmFailureRecordedForWaiters: a pass that EC2 throttles, denies or
// cannot serve records why, for the ADDs waiting on it, and wakes them; the
// same failure with nobody waiting writes nothing.
func TestWarmFailureRecordedForWaiters(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    ec2fake.Config
		breaks func(*ec2fake.Server)
		want   string
		msg    string
	}{
		{"throttled", ec2fake.Config{InstanceType: "m5.large"}, func(f *ec2fake.Server) { f.Throttle(ec2fake.AllActions, 1000) },
			section.PassThrottled, "RequestLimitExceeded"},
		{"IAM denied", ec2fake.Config{InstanceType: "m5.large"}, func(f *ec2fake.Server) {
			f.InjectFault("AssignPrivateIpAddresses", ec2fake.Fault{Code: "UnauthorizedOperation", Message: "You are not authorized to perform this operation."})
		}, section.PassDenied, "UnauthorizedOperation"},
		{"subnet full", ec2fake.Config{InstanceType: "m5.large", VPCCIDRs: []string{"10.0.0.0/16"}, Subnets: []ec2fake.SubnetConfig{{CIDR: "10.0.0.0/28"}}},
			func(*ec2fake.Server) {}, section.PassSubnetFull, "InsufficientFreeAddressesInSubnet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg, section.WarmConfig{WarmIPTarget: 5})
			e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
			e.warm(t) // limits and the first addresses; nobody waits
			if e.lastPass(t) != nil {
				t.Fatalf("a pass nobody waited for recorded an outcome")
			}
			tc.breaks(e.fake)
			e.w.Cfg.WarmIPTarget = 20
			if err := e.w.Run(context.Background()); err == nil {
				t.Fatal("pass succeeded")
			}
			if o := e.lastPass(t); o != nil {
				t.Errorf("a failed pass nobody waited for recorded %+v", o)
			}
			e.demand(t, 3, 25*time.Second)
			w, _ := e.mgr.Watch()
			defer w.Close()
			e.now = e.now.Add(time.Second)
			if err := e.w.Run(context.Background()); err == nil {
				t.Fatal("pass succeeded")
			}
			o := e.lastPass(t)
			if o == nil || o.Result != tc.want || !strings.Contains(o.Message, tc.msg) || !o.At.Equal(e.now.UTC()) {
				t.Fatalf("outcome %+v, want %s mentioning %s", o, tc.want, tc.msg)
			}
			if woken, _ := w.Wait(context.Background(), time.Second); !woken {
				t.Error("the failed pass did not wake the waiting ADDs")
			}
		})
	}
}

func TestClassify(t *testing.T) {
	if got := classify(false, nil); got != section.PassDone {
		t.Errorf("nil: %s", got)
	}
	if got := classify(true, nil); got != section.PassInstanceLimit {
		t.Errorf("short: %s", got)
	}
	if got := classify(false, fmt.Errorf("dial tcp: refused")); got != section.PassFailed {
		t.Errorf("other: %s", got)
	}
}

// refreshingHost is a node where an IMDS refresh (the look of an ADD on a
// dry pool) runs while warm waits for a new ENI's link: IMDS shows the ENI
// by then.
type refreshingHost struct {
	e *env
	t *testing.T
}

func (h refreshingHost) SetupENI(ctx context.Context, _ section.ENI) error {
	h.e.fake.SyncIMDS()
	r, err := Refresh(ctx, h.e.mgr, h.e.w.MD, h.e.now)
	if err != nil || r.Added == 0 {
		h.t.Errorf("refresh during the link wait: %+v, %v", r, err)
	}
	return nil
}

func (refreshingHost) Reassert(context.Context, []section.ENI, []alloc.Allocation) (HostReport, error) {
	return HostReport{}, nil
}

// TestENIFoundByIMDSBeforeItsRecord: an ENI that an IMDS refresh finds
// between its attach and warm's record of it is recorded once, as created
// by eni-cni, with its addresses as assigned (not found): the store stays
// valid (an ENI listed twice made it corrupt).
func TestENIFoundByIMDSBeforeItsRecord(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium", IMDSLag: time.Hour}, section.WarmConfig{WarmIPTarget: 8})
	e.w.Host = refreshingHost{e, t}
	e.warm(t)
	c, _, src := e.counts(t)
	if len(src.ENIs) != 2 || c.Total != 8 {
		t.Fatalf("ENIs %+v, pool %+v", src.ENIs, c)
	}
	second := src.ENIs[1]
	if !second.Created || second.Secondary != 3 {
		t.Errorf("the created ENI's record: %+v", second)
	}
	for _, a := range src.Addrs {
		if a.ENI == second.ID && a.Origin != section.OriginAssigned {
			t.Errorf("address %s of the created ENI has origin %q", a.IP, a.Origin)
		}
	}
	if _, err := e.st.Load(); err != nil {
		t.Errorf("store: %v", err)
	}
}

// TestHourlyCheckAfterTheFillWhenADDsWait: on a fresh store the first pass
// owes the hourly describe. With ADDs waiting it comes after their
// addresses are assigned (it only checks); a timer pass makes it first. A
// describe that drift forces (a new ENI IMDS shows, whose tags must be
// read before it is used) still comes before the fill.
func TestHourlyCheckAfterTheFillWhenADDsWait(t *testing.T) {
	order := func(e *env) *[]string {
		var seq []string
		var mu sync.Mutex
		for _, a := range []string{"DescribeNetworkInterfaces", "AssignPrivateIpAddresses"} {
			e.fake.SetHook(a, func() { mu.Lock(); seq = append(seq, a); mu.Unlock() })
		}
		return &seq
	}
	first := func(seq []string) string {
		if len(seq) == 0 {
			return ""
		}
		return seq[0]
	}

	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{WarmIPTarget: 5})
	seq := order(e)
	e.demand(t, 3, 25*time.Second)
	e.warm(t)
	if first(*seq) != "AssignPrivateIpAddresses" || !slices.Contains(*seq, "DescribeNetworkInterfaces") {
		t.Errorf("ADDs waiting on a fresh store: calls %v, want the assign first and the hourly describe after it", *seq)
	}
	_, _, src := e.counts(t)
	if src.LastDescribe.IsZero() {
		t.Error("the deferred hourly describe was not recorded")
	}

	// A pass that may have changed EC2 without recording it: the describe
	// comes first even though ADDs wait.
	e.fake.ResetCalls()
	*seq = nil
	if err := e.mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		st.EC2.Dirty = true
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	e.demand(t, 20, 25*time.Second)
	e.warm(t)
	if first(*seq) != "DescribeNetworkInterfaces" || !slices.Contains(*seq, "AssignPrivateIpAddresses") {
		t.Errorf("dirty store, ADDs waiting: calls %v, want the describe before the assign", *seq)
	}

	timer := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{WarmIPTarget: 5})
	seq = order(timer)
	timer.warm(t)
	if first(*seq) != "DescribeNetworkInterfaces" {
		t.Errorf("timer pass on a fresh store: calls %v, want the describe first", *seq)
	}
}
