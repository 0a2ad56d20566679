package ec2

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// scaledLatency is the realistic profile at a fifth of its times: the
// calls still take long enough to tell overlapping ones from sequential
// ones, and a burst's pass takes about a second.
func scaledLatency() *ec2fake.Latency {
	l := ec2fake.RealisticLatency()
	for k, d := range l.Calls {
		l.Calls[k] = d / 5
	}
	l.LinkDelay /= 5
	l.IMDSLag /= 5
	return &l
}

// onDisk puts the env's store on disk, as on a node: the DiskStore holds
// one flock at a time, so the pass's concurrent creations must take turns
// at it (the fake store would not notice).
func (e *env) onDisk(t *testing.T) {
	t.Helper()
	d, err := alloc.NewDiskStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e.mgr.Store = d
	e.st = nil
}

// span is when one EC2 call was under way, as the client saw it.
type span struct{ start, end time.Time }

// timedAPI records when each CreateNetworkInterface call starts and ends.
type timedAPI struct {
	API
	mu      sync.Mutex
	creates []span
}

func (a *timedAPI) CreateNetworkInterface(ctx context.Context, in *ec2.CreateNetworkInterfaceInput, o ...func(*ec2.Options)) (*ec2.CreateNetworkInterfaceOutput, error) {
	s := span{start: time.Now()}
	out, err := a.API.CreateNetworkInterface(ctx, in, o...)
	s.end = time.Now()
	a.mu.Lock()
	a.creates = append(a.creates, s)
	a.mu.Unlock()
	return out, err
}

// allOverlap: there is a moment when every call was under way.
func allOverlap(spans []span) bool {
	if len(spans) == 0 {
		return false
	}
	lastStart, firstEnd := spans[0].start, spans[0].end
	for _, s := range spans[1:] {
		lastStart = later(lastStart, s.start)
		if s.end.Before(firstEnd) {
			firstEnd = s.end
		}
	}
	return lastStart.Before(firstEnd)
}

// spans shows calls as start–end offsets from the first start.
func spans(ss []span) string {
	var parts []string
	for _, s := range ss {
		t0 := ss[0].start
		parts = append(parts, fmt.Sprintf("%v–%v", s.start.Sub(t0).Round(time.Millisecond), s.end.Sub(t0).Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func deviceNumbers(src *section.EC2) []int {
	var out []int
	for _, e := range src.ENIs {
		out = append(out, e.DeviceNumber)
	}
	slices.Sort(out)
	return out
}

// TestWarmCreatesENIsConcurrently: 58 ADDs waiting on a fresh m5.xlarge
// (4 ENIs x 14 secondaries) need three new ENIs. The pass creates them at
// once: the three CreateNetworkInterface calls are under way together.
// All 56 addresses are recorded, the ENIs hold distinct device indexes
// 1, 2 and 3, each was set up on the node, and no pending record or dirty
// mark is left.
func TestWarmCreatesENIsConcurrently(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge", Latency: scaledLatency()}, section.WarmConfig{WarmIPTarget: 5})
	e.onDisk(t)
	api := &timedAPI{API: e.w.API}
	e.w.API = api
	e.demand(t, 58, time.Minute)
	e.warm(t)
	if len(api.creates) != 3 {
		t.Fatalf("%d CreateNetworkInterface calls, want 3\n%s", len(api.creates), e.out)
	}
	if !allOverlap(api.creates) {
		t.Errorf("the three CreateNetworkInterface calls did not overlap: %s", spans(api.creates))
	}
	c, _, src := e.counts(t)
	if c.Total != 56 || len(src.ENIs) != 4 {
		t.Fatalf("pool %+v on %d ENIs, want 56 on 4\n%s", c, len(src.ENIs), e.out)
	}
	if got := deviceNumbers(src); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("device indexes %v, want 0 1 2 3", got)
	}
	for _, en := range src.ENIs[1:] {
		if en.Secondary != 14 || !en.Created || !en.DeleteOnTermination || en.AttachmentID == "" {
			t.Errorf("created ENI recorded as %+v", en)
		}
	}
	if len(src.Pending) != 0 || src.Dirty {
		t.Errorf("pending %+v, dirty %v after the pass", src.Pending, src.Dirty)
	}
	if n := e.fake.Calls()["AssignPrivateIpAddresses"]; n != 1 {
		t.Errorf("AssignPrivateIpAddresses called %d times, want 1 (the primary ENI's)", n)
	}
	if o := src.LastPass; o == nil || o.Result != section.PassInstanceLimit {
		t.Errorf("outcome %+v, want %s", o, section.PassInstanceLimit)
	}
	e.host.mu.Lock()
	setup := slices.Clone(e.host.setup)
	e.host.mu.Unlock()
	if len(setup) != 3 {
		t.Errorf("ENIs set up on the node: %v, want the 3 new ones", setup)
	}
	e.assertStoreIsEC2(t)
}

// TestWarmENIBatchOneFails: one of the three creations of a burst's pass
// fails. The other two finish and are recorded, the pass reports the
// failure, and the next pass settles what the failed one left and creates
// the third ENI.
func TestWarmENIBatchOneFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		breaks func(*ec2fake.Server)
		// pending: the failed creation leaves a pending record for the
		// next pass (EC2 may hold, or holds, an ENI the store does not).
		pending bool
		msg     string
	}{
		{"create refused", func(f *ec2fake.Server) {
			f.InjectFault("CreateNetworkInterface", ec2fake.Fault{Code: "InsufficientFreeAddressesInSubnet", Times: 1})
		}, false, "InsufficientFreeAddressesInSubnet"},
		{"create reply lost", func(f *ec2fake.Server) {
			f.InjectFault("CreateNetworkInterface", ec2fake.Fault{Code: "InternalError", Times: 1})
		}, true, "InternalError"},
		{"attach and delete fail", func(f *ec2fake.Server) {
			f.InjectFault("AttachNetworkInterface", ec2fake.Fault{Code: "InvalidParameterValue", Times: 1})
			// Twice: the pass's own settling, after the fill, fails too.
			f.InjectFault("DeleteNetworkInterface", ec2fake.Fault{Code: "UnauthorizedOperation", Times: 2})
		}, true, "InvalidParameterValue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge", Latency: scaledLatency()}, section.WarmConfig{WarmIPTarget: 5})
			e.onDisk(t)
			// No SDK retries: the one fault is the call's answer.
			e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), func(o *ec2.Options) { o.RetryMaxAttempts = 1 })
			e.demand(t, 58, 25*time.Second)
			tc.breaks(e.fake)
			err := e.w.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("pass with one creation failing: %v, want %s\n%s", err, tc.msg, e.out)
			}
			c, _, src := e.counts(t)
			if len(src.ENIs) != 3 || c.Total != 42 {
				t.Fatalf("pool %+v on %d ENIs, want the other two ENIs recorded (42 addresses on 3)\n%s", c, len(src.ENIs), e.out)
			}
			if got := len(src.Pending); (got == 1) != tc.pending || got > 1 {
				t.Errorf("pending %+v, want one for the failed creation: %v", src.Pending, tc.pending)
			}
			if tc.pending && !src.Dirty {
				t.Error("a creation that may have changed EC2 left no dirty mark")
			}
			if o := src.LastPass; o == nil || !strings.Contains(o.Message, tc.msg) {
				t.Errorf("outcome %+v, want the failure for the waiting ADDs", o)
			}

			// The next pass, once any ENI the failed creation may have
			// made is old enough to be swept: the ADDs waited in vain,
			// their kubelet tries again.
			e.now = e.now.Add(leakAge + time.Minute)
			e.demand(t, 58, 25*time.Second)
			e.warm(t)
			c, _, src = e.counts(t)
			if len(src.ENIs) != 4 || c.Total != 56 {
				t.Errorf("after the next pass: pool %+v on %d ENIs, want 56 on 4\n%s", c, len(src.ENIs), e.out)
			}
			if got := deviceNumbers(src); !slices.Equal(got, []int{0, 1, 2, 3}) {
				t.Errorf("device indexes %v, want 0 1 2 3", got)
			}
			if len(src.Pending) != 0 || src.Dirty {
				t.Errorf("after the next pass: pending %+v, dirty %v", src.Pending, src.Dirty)
			}
			if n := len(e.fake.ENIs()); n != 4 {
				t.Errorf("EC2 holds %d ENIs, want 4 (none left over)", n)
			}
			e.assertStoreIsEC2(t)
		})
	}
}

// TestWarmCreatesOnlyWhatIsNeeded: a need that one new ENI covers creates
// one, and maxENIs bounds a batch.
func TestWarmCreatesOnlyWhatIsNeeded(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{WarmIPTarget: 5, MaxENIs: 3})
	e.demand(t, 20, time.Minute) // 14 on the primary, 11 on one more
	e.warm(t)
	if n := e.fake.Calls()["CreateNetworkInterface"]; n != 1 {
		t.Errorf("%d creates for a need one ENI covers", n)
	}
	e.demand(t, 40, time.Minute)
	e.warm(t)
	_, _, src := e.counts(t)
	if n := e.fake.Calls()["CreateNetworkInterface"]; n != 2 || len(src.ENIs) != 3 {
		t.Errorf("%d creates, %d ENIs with maxENIs 3", n, len(src.ENIs))
	}
}

// TestWarmENIBatchThrottled: EC2 throttles the creations of a batch. One
// Create is retried as the client retries; the others, throttled too, are
// not: a batch does not multiply the calls fired into a throttle. Nothing
// is left pending, the outcome says throttled, and the pass after the
// throttle creates the ENIs.
func TestWarmENIBatchThrottled(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge", Latency: scaledLatency()}, section.WarmConfig{WarmIPTarget: 5})
	e.onDisk(t)
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry) // 4 attempts
	e.demand(t, 58, 25*time.Second)
	e.fake.Throttle("CreateNetworkInterface", 1000)
	err := e.w.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "RequestLimitExceeded") {
		t.Fatalf("pass with Create throttled: %v", err)
	}
	if n := e.fake.Calls()["CreateNetworkInterface"]; n != 4+2 {
		t.Errorf("%d CreateNetworkInterface calls into the throttle, want 6 (one call's 4 attempts, the 2 others' first)", n)
	}
	c, _, src := e.counts(t)
	if len(src.ENIs) != 1 || len(src.Pending) != 0 || src.Dirty {
		t.Errorf("ENIs %d, pending %+v, dirty %v after a throttled batch", len(src.ENIs), src.Pending, src.Dirty)
	}
	if o := src.LastPass; o == nil || o.Result != section.PassThrottled {
		t.Errorf("outcome %+v, want %s", o, section.PassThrottled)
	}
	if c.Total != 14 {
		t.Errorf("pool %+v, want the primary ENI's 14", c)
	}
	e.fake.ClearFaults()
	e.now = e.now.Add(10 * time.Second)
	e.warm(t)
	if c, _, src = e.counts(t); c.Total != 56 || len(src.ENIs) != 4 {
		t.Errorf("after the throttle: pool %+v on %d ENIs, want 56 on 4\n%s", c, len(src.ENIs), e.out)
	}
	e.assertStoreIsEC2(t)
}

// TestWarmENIBatchThrottleBlip: EC2 throttles the first attempt of each
// of the batch's three Creates, then lets calls through. One Create is
// retried; the other two wait for it and try once more when it got
// through: all three ENIs are created in the pass, with six calls.
func TestWarmENIBatchThrottleBlip(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge", Latency: scaledLatency()}, section.WarmConfig{WarmIPTarget: 5})
	e.onDisk(t)
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	e.demand(t, 58, 25*time.Second)
	e.fake.Throttle("CreateNetworkInterface", 3)
	e.warm(t)
	if n := e.fake.Calls()["CreateNetworkInterface"]; n != 3+1+2 {
		t.Errorf("%d CreateNetworkInterface calls, want 6 (3 throttled, the owner's retry, the 2 others' second)", n)
	}
	c, _, src := e.counts(t)
	if c.Total != 56 || len(src.ENIs) != 4 || len(src.Pending) != 0 || src.Dirty {
		t.Errorf("pool %+v on %d ENIs, pending %+v, dirty %v", c, len(src.ENIs), src.Pending, src.Dirty)
	}
	if got := len(e.fake.ENIs()); got != 4 {
		t.Errorf("EC2 holds %d ENIs, want 4 (a Create tried again is not a second ENI)", got)
	}
	e.assertStoreIsEC2(t)
}

// TestWarmENIAttachThrottledKeepsTheENI: EC2 throttles every attach of a
// batch past its retries. The three ENIs created are kept (pending,
// unattached), not deleted; the pass after the throttle attaches them
// without creating others: three Creates and no Delete in all, where
// deleting and creating again spent a Create and a Delete of the
// account's buckets per throttled attach (1,695 Creates for 400 ENIs in
// the 200-node fleet run).
func TestWarmENIAttachThrottledKeepsTheENI(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge", Latency: scaledLatency()}, section.WarmConfig{WarmIPTarget: 5})
	e.onDisk(t)
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	e.demand(t, 58, 25*time.Second)
	e.fake.Throttle("AttachNetworkInterface", 1000)
	err := e.w.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "RequestLimitExceeded") {
		t.Fatalf("pass with Attach throttled: %v", err)
	}
	_, _, src := e.counts(t)
	kept := 0
	for _, p := range src.Pending {
		if p.Unattached != nil && p.ID != "" {
			kept++
		}
	}
	if len(src.ENIs) != 1 || len(src.Pending) != 3 || kept != 3 || src.Dirty {
		t.Errorf("ENIs %d, pending %+v, dirty %v: want the 3 created ENIs kept unattached", len(src.ENIs), src.Pending, src.Dirty)
	}
	if n := len(e.fake.ENIs()); n != 4 || e.fake.Calls()["DeleteNetworkInterface"] != 0 {
		t.Errorf("EC2 holds %d ENIs after %d deletes, want the 3 created kept", n, e.fake.Calls()["DeleteNetworkInterface"])
	}
	if o := src.LastPass; o == nil || o.Result != section.PassThrottled {
		t.Errorf("outcome %+v, want %s", o, section.PassThrottled)
	}

	e.fake.ClearFaults()
	e.now = e.now.Add(10 * time.Second)
	// The Describe bucket empty too: the store knows all EC2 holds, so
	// the kept ENIs are attached without a describe first (one drew on
	// the account's Describe bucket ahead of the attach: at 1,000 nodes,
	// 100 s of throttled describes while the pods waited). What fails is
	// what comes after the fill: the hourly check, the boot's leak sweep.
	e.fake.Throttle("DescribeNetworkInterfaces", 1000)
	_ = e.w.Run(context.Background())
	e.fake.ClearFaults()
	c, _, src := e.counts(t)
	if c.Total != 56 || len(src.ENIs) != 4 || len(src.Pending) != 0 || src.Dirty {
		t.Errorf("after the throttle: pool %+v on %d ENIs, pending %+v, dirty %v\n%s", c, len(src.ENIs), src.Pending, src.Dirty, e.out)
	}
	if got := deviceNumbers(src); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("device indexes %v, want 0 1 2 3", got)
	}
	calls := e.fake.Calls()
	if calls["CreateNetworkInterface"] != 3 || calls["DeleteNetworkInterface"] != 0 || len(e.fake.ENIs()) != 4 {
		t.Errorf("calls %v, EC2 holds %d ENIs: want 3 Creates, no Delete, 4 ENIs", calls, len(e.fake.ENIs()))
	}
	e.assertStoreIsEC2(t)
}

// TestWarmKeptENINotNeededIsDeleted: a kept ENI the pool never needs again
// (its pods gave up) survives the boot's leak sweep, which would take it
// for a leak, and is deleted keptFor after its creation.
func TestWarmKeptENINotNeededIsDeleted(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{WarmIPTarget: 5})
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	e.throttledAttachPass(t, 20, 25*time.Second)
	e.now = e.now.Add(leakAge + time.Minute) // the demand is gone, the ENI older than a leak
	e.warm(t)
	_, _, src := e.counts(t)
	if len(src.Pending) != 1 || len(e.fake.ENIs()) != 2 {
		t.Fatalf("pending %+v, EC2 holds %d ENIs: want the kept ENI still there\n%s", src.Pending, len(e.fake.ENIs()), e.out)
	}
	e.now = e.now.Add(keptFor)
	e.warm(t)
	_, _, src = e.counts(t)
	if len(src.Pending) != 0 || len(e.fake.ENIs()) != 1 || len(src.ENIs) != 1 {
		t.Errorf("pending %+v, EC2 holds %d ENIs, store %d: want the kept ENI deleted\n%s", src.Pending, len(e.fake.ENIs()), len(src.ENIs), e.out)
	}
	e.assertStoreIsEC2(t)
}

// newKeptAndRoomy is a node with an ENI of 13 addresses an earlier pass
// created and kept unattached (its attach throttled), an attached ENI
// with 3 addresses of room (given back behind eni-cni's back: the next
// pass learns it from IMDS), and 33 ADDs waiting: 13 addresses needed.
func newKeptAndRoomy(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{WarmIPTarget: 5})
	e.onDisk(t)
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	e.demand(t, 16, 3*time.Minute) // the primary ENI's 14, then an ENI of 7
	e.warm(t)
	_, _, src := e.counts(t)
	if len(src.ENIs) != 2 {
		t.Fatalf("%d ENIs after the first pass, want the primary and one of 7\n%s", len(src.ENIs), e.out)
	}
	small := src.ENIs[1].ID
	e.demand(t, 20, 3*time.Minute) // 7 more on it, then an ENI of 13, its attach throttled
	e.fake.Throttle("AttachNetworkInterface", 1000)
	if err := e.w.Run(context.Background()); err == nil {
		t.Fatal("pass with Attach throttled succeeded")
	}
	e.fake.ClearFaults()
	if _, _, src = e.counts(t); len(keptENIs(src)) != 1 || keptAddrs(src) != 13 {
		t.Fatalf("pending %+v: want one ENI of 13 kept\n%s", src.Pending, e.out)
	}
	eni, _ := e.fake.ENI(small)
	if err := e.fake.UnassignIPs(small, eni.SecondaryIPs[:3]...); err != nil {
		t.Fatal(err)
	}
	err := e.mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		st.Demands = st.Demands[3:] // 3 ADDs gave up
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Past IMDS's grace, so that the next pass learns of the 3 from IMDS
	// (a kept ENI alone forces no describe: the store knows all it is).
	e.now = e.now.Add(section.IMDSGrace + 10*time.Second)
	e.fake.ResetCalls()
	return e
}

// TestWarmAttachesKeptENIBeforeAssigning: a pass that finds both an
// attached ENI with room and an ENI an earlier pass kept unattached (its
// attach throttled) attaches the kept one first, and assigns nothing when
// it covers the need: its Create is spent and its attach due anyway, while
// the Assign bucket is the one a fleet's readiness fills crowd (assigning
// first cost the nodes that waited longest a third, heavily throttled
// Assign).
func TestWarmAttachesKeptENIBeforeAssigning(t *testing.T) {
	e := newKeptAndRoomy(t)
	e.warm(t)
	calls := e.fake.Calls()
	if calls["AttachNetworkInterface"] != 1 || calls["AssignPrivateIpAddresses"] != 0 || calls["CreateNetworkInterface"] != 0 {
		t.Errorf("calls %v: want the kept ENI attached and no Assign, no Create\n%s", calls, e.out)
	}
	if _, _, src := e.counts(t); len(src.ENIs) != 3 || len(src.Pending) != 0 {
		t.Errorf("%d ENIs, pending %+v: want the kept ENI attached", len(src.ENIs), src.Pending)
	}
	e.assertStoreIsEC2(t)
}

// TestWarmKeptENIUnattachableStopsBlockingAssign: a kept ENI whose attach
// now fails for good (InvalidParameterValue) and whose delete fails too
// (InUse) is no longer kept, only left for settlePending's delete, and the
// same pass goes on to the Assign on the roomy ENI. Kept, every later pass
// tried its attach before any Assign and failed: the pool never grew again.
func TestWarmKeptENIUnattachableStopsBlockingAssign(t *testing.T) {
	e := newKeptAndRoomy(t)
	e.fake.InjectFault("AttachNetworkInterface", ec2fake.Fault{Code: "InvalidParameterValue"})
	e.fake.InjectFault("DeleteNetworkInterface", ec2fake.Fault{Code: "InvalidNetworkInterface.InUse"})
	_ = e.w.Run(context.Background()) // the ENI it creates for the rest cannot be attached either
	_, _, src := e.counts(t)
	if keptAddrs(src) != 0 {
		t.Errorf("pending %+v: want the ENI's record kept for a delete, not for an attach\n%s", src.Pending, e.out)
	}
	if calls := e.fake.Calls(); calls["AssignPrivateIpAddresses"] != 1 {
		t.Errorf("calls %v: want the roomy ENI's Assign in the same pass\n%s", calls, e.out)
	}
	if c, _, _ := e.counts(t); c.Total != 28 {
		t.Errorf("pool %+v: want the 3 addresses assigned again (28 in all)\n%s", c, e.out)
	}
}

// TestWarmKeptENIGoneDoesNotFailThePass: a kept ENI deleted behind
// eni-cni's back (a clean-up job; its attach says NotFound) is forgotten
// and the same pass fills from the roomy ENI and a new one: the pass
// succeeds, so no waiting ADD fails on it (a failed pass fails them all at
// once).
func TestWarmKeptENIGoneDoesNotFailThePass(t *testing.T) {
	e := newKeptAndRoomy(t)
	e.fake.InjectFault("AttachNetworkInterface", ec2fake.Fault{Code: "InvalidNetworkInterfaceID.NotFound", Times: 1})
	if err := e.w.Run(context.Background()); err != nil {
		t.Fatalf("pass whose kept ENI is gone: %v\n%s", err, e.out)
	}
	_, _, src := e.counts(t)
	if len(keptENIs(src)) != 0 {
		t.Errorf("pending %+v: want the gone ENI forgotten", src.Pending)
	}
	if calls := e.fake.Calls(); calls["AssignPrivateIpAddresses"] != 1 || calls["CreateNetworkInterface"] != 1 {
		t.Errorf("calls %v: want the roomy ENI's Assign and one new ENI for the rest\n%s", calls, e.out)
	}
	if o := src.LastPass; o != nil && o.Failed() {
		t.Errorf("outcome %+v: want the pass not failed", o)
	}
}
