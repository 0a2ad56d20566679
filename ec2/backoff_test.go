package ec2

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// TestBackoffDelays: the wait after a throttle doubles from Base up to
// Cap and is drawn from the upper half of it, never shorter (a retry
// storm) nor longer.
func TestBackoffDelays(t *testing.T) {
	b := DefaultBackoff
	for _, tc := range []struct {
		attempt int
		want    time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {5, 16 * time.Second}, {6, 20 * time.Second}, {60, 20 * time.Second}} {
		lo, hi := b.delay(tc.attempt, func() float64 { return 0 }), b.delay(tc.attempt, func() float64 { return 0.999999 })
		if lo != tc.want/2 || hi < tc.want*99/100 || hi > tc.want {
			t.Errorf("attempt %d: waits %v..%v, want %v..%v", tc.attempt, lo, hi, tc.want/2, tc.want)
		}
	}
	r := NewRetryer(b)
	if d, _ := r.RetryDelay(3, throttleErr()); d < 2*time.Second || d > 4*time.Second {
		t.Errorf("the retryer waits %v after a third throttle, want 2-4 s", d)
	}
	if r.MaxAttempts() != throttleAttempts {
		t.Errorf("max attempts %d, want %d", r.MaxAttempts(), throttleAttempts)
	}
}

// TestThrottledCallsWaitForTheBucket: twelve nodes' Assign calls against
// an account bucket of 2 tokens refilled 20 a second all get through,
// each retried after a back-off instead of at once. (At 10 a second the
// last callers' six attempts, about 1.1 s, were a lottery for the last
// tokens: 3 runs in 30 failed a call.)
func TestThrottledCallsWaitForTheBucket(t *testing.T) {
	th := ec2fake.Throttling{Buckets: map[string]ec2fake.Bucket{"AssignPrivateIpAddresses": {Size: 2, Refill: 20}}}
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge", Throttling: &th}, section.WarmConfig{})
	eni := e.fake.PrimaryENI().ID
	fast := Backoff{Base: 100 * time.Millisecond, Cap: 400 * time.Millisecond}
	api := NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), func(o *ec2.Options) { o.Retryer = NewRetryer(fast) })
	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = api.AssignPrivateIpAddresses(context.Background(), &ec2.AssignPrivateIpAddressesInput{
				NetworkInterfaceId: aws.String(eni), SecondaryPrivateIpAddressCount: aws.Int32(1),
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	throttled := e.fake.Throttled()["AssignPrivateIpAddresses"]
	if took := time.Since(start); took < 450*time.Millisecond {
		t.Errorf("%d calls through a bucket of 2 refilled 20/s took %v, want ≥ 0.5 s", n, took)
	}
	// Retried at once, 10 waiting callers would meet the empty bucket
	// hundreds of times a second; backed off, each a few times.
	if throttled == 0 || throttled > 4*n {
		t.Errorf("%d throttled attempts for %d calls, want some and at most %d", throttled, n, 4*n)
	}
}

// TestTimerPassPausesAfterThrottle: passes nobody waits for (the
// timer's) that EC2 throttles are remembered outside the store, which
// stays as it was. Two in a row pause nothing (an operator's warm right
// after runs); from the third, the next pass within lastingPause makes no
// EC2 call, one after it tries again and lengthens the streak, and the
// first that gets through forgets it.
func TestTimerPassPausesAfterThrottle(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{WarmIPTarget: 5})
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	mem := ThrottleFile(filepath.Join(t.TempDir(), ThrottledName))
	e.w.Throttles = mem
	e.warm(t) // limits and the first addresses
	e.w.Cfg.WarmIPTarget = 20
	e.fake.Throttle("AssignPrivateIpAddresses", 1000)
	state := e.st.Bytes()
	for streak := 1; streak <= lastingThrottle; streak++ {
		e.now = e.now.Add(time.Second)
		if err := e.w.Run(context.Background()); err == nil {
			t.Fatalf("throttled pass %d succeeded", streak)
		}
		if o, err := mem.Load(); err != nil || o == nil || o.Streak != streak {
			t.Fatalf("remembered %+v (%v) after %d throttled passes", o, err, streak)
		}
	}
	if !bytes.Equal(state, e.st.Bytes()) || e.lastPass(t) != nil {
		t.Errorf("throttled passes nobody waited for changed the store")
	}
	calls := e.fake.Calls()["AssignPrivateIpAddresses"]
	e.now = e.now.Add(lastingBase / 4)
	e.warm(t)
	if n := e.fake.Calls()["AssignPrivateIpAddresses"]; n != calls {
		t.Errorf("a pass within the pause made %d Assign calls", n-calls)
	}
	e.now = e.now.Add(lastingBase)
	if err := e.w.Run(context.Background()); err == nil {
		t.Fatal("throttled pass after the pause succeeded")
	}
	if o, _ := mem.Load(); o == nil || o.Streak != lastingThrottle+1 {
		t.Fatalf("remembered %+v after the pause's throttled pass, want a streak of %d", o, lastingThrottle+1)
	}
	e.fake.ClearFaults()
	e.now = e.now.Add(2 * lastingBase)
	e.warm(t)
	if o, _ := mem.Load(); o != nil {
		t.Errorf("remembered %+v after a pass got through", o)
	}
	if c, _, _ := e.counts(t); c.Free < 20 {
		t.Errorf("pool %+v after the throttle, want 20 free", c)
	}
}

// TestPaceOrdersNodes: under one throttled bucket a node whose waiting
// pods outnumber its free addresses retries soonest, then one with
// nothing, and the more a node has of its target the longer it yields;
// the pace scales the back-off of the retryer the call is given.
func TestPaceOrdersNodes(t *testing.T) {
	order := []float64{paceOf(5, 30, true), paceOf(0, 35, false), paceOf(14, 21, false), paceOf(28, 7, false), paceOf(35, 0, false)}
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			t.Errorf("paces %v: want each longer than the last", order)
		}
	}
	var p pace
	if p.factor() != 1 {
		t.Errorf("zero pace %v, want 1", p.factor())
	}
	p.set(paceWaiting)
	if b := p.scale(DefaultBackoff); b != (Backoff{Base: 250 * time.Millisecond, Cap: 5 * time.Second}) {
		t.Errorf("back-off at pace %v: %+v", paceWaiting, b)
	}
}

// TestPaceRoundRobin: the pace is read at each retry, not at the call's
// start, so a node that records its first ENI while its second one's
// Attach is throttled yields from that attempt on; and under the
// steepened pace a node with its first ENI retries several times less
// often than one without (first ENIs before second ones across a fleet),
// and pauses longer between throttled passes, while a yielding call still
// keeps the 20 s cap and a pause at most doubles.
func TestPaceRoundRobin(t *testing.T) {
	var p pace
	p.set(paceOf(14, 21, false)) // the primary ENI's addresses, no ENI yet
	o := ec2.Options{Retryer: NewRetryer(DefaultBackoff)}
	p.option(&o)
	r := o.Retryer.(throttleRetryer)
	r.rnd = func() float64 { return 0.999999 }
	before, _ := r.RetryDelay(1, throttleErr())
	p.set(paceOf(28, 7, false)) // the batch's first ENI recorded
	after, _ := r.RetryDelay(1, throttleErr())
	if after < 3*before/2 {
		t.Errorf("first retry %v before the ENI was recorded, %v after: want the same call to yield harder", before, after)
	}
	first, second := paceOf(14, 21, false), paceOf(28, 7, false)
	if second/first < 2 {
		t.Errorf("paces %v (no ENI) and %v (one ENI): want the second at least twice the first", first, second)
	}
	if a, b := paceOfPause(first), paceOfPause(second); a >= b || b > 2 || paceOfPause(paceOf(35, 0, false)) != 2 || paceOfPause(paceWaiting) != 1 {
		t.Errorf("pause paces %v (no ENI), %v (one ENI): want rising from 1 (a starved node's), at most 2", a, b)
	}
	if d, _ := r.RetryDelay(throttleAttempts, throttleErr()); d > DefaultBackoff.Cap {
		t.Errorf("a yielding call's last retry waits %v, above the cap %v", d, DefaultBackoff.Cap)
	}
	p.set(paceOf(5, 30, true)) // pods wait
	if d, _ := r.RetryDelay(throttleAttempts, throttleErr()); d > DefaultBackoff.Cap/4 {
		t.Errorf("a starved node's last retry waits %v, want at most %v", d, DefaultBackoff.Cap/4)
	}
}

// TestRepaceByWhoWaits: under one bucket a NotReady node (nothing held,
// never filled, no ADD waiting) yields to nodes whose pods wait, and of
// those a node that was Ready (filled in this boot) retries, and pauses,
// the less the longer its oldest ADD has waited, if its pods came as the
// gate let them (within 3 minutes of the fill, kubelet's retries included); a node whose pods came
// before it was ever filled, or long after (a burst on a fleet Ready long
// since), does not age (every node of such a rush would, a retry storm),
// nor does a node whose runtime has no readiness gate count as NotReady,
// nor does a node whose minimumIPTarget fills its pods' addresses before
// it is Ready yield.
func TestRepaceByWhoWaits(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	w := &Warmer{Mgr: &alloc.Manager{BootID: "boot-1"}, Cfg: section.WarmConfig{WarmIPTarget: 5, ReadyWhenFilled: true}, Now: func() time.Time { return now }}
	admittedAt := func(d time.Duration) *section.EC2 { // filled 3 s before pods waited d
		return &section.EC2{FilledBoot: "boot-1", FilledAt: now.Add(-d - 3*time.Second)}
	}
	waitingSince := func(d time.Duration) *alloc.State {
		return &alloc.State{Demands: []alloc.Demand{{Key: alloc.Key{Network: "pods", ContainerID: "c1", IfName: "eth0"}, Since: now.Add(-d), Until: now.Add(alloc.MaxDemandWait - d)}}}
	}
	cases := []struct {
		name   string
		v      view
		want   float64
		paused func(float64) bool
	}{
		{"NotReady, nothing held", view{st: &alloc.State{}, src: &section.EC2{}}, paceFresh, func(p float64) bool { return p == 2 }},
		{"NotReady, holds the fill's first addresses", view{st: &alloc.State{}, src: &section.EC2{}, counts: alloc.Counts{Total: 3, Free: 3}}, paceOf(3, 5, false), nil},
		{"filled, pods waited 5 s", view{st: waitingSince(5 * time.Second), src: admittedAt(5 * time.Second)}, paceWaiting, func(p float64) bool { return p == 1 }},
		{"filled, pods waited 40 s", view{st: waitingSince(40 * time.Second), src: admittedAt(40 * time.Second)}, paceWaiting / 4, func(p float64) bool { return p == paceWaiting/4 }},
		{"filled, pods waited 170 s", view{st: waitingSince(170 * time.Second), src: admittedAt(170 * time.Second)}, paceAgedFloor, func(p float64) bool { return p == paceAgedFloor }},
		{"filled, a retried ADD (sent 5 s after the fill, failed at 110 s, retried 10 s later) waited 40 s", view{st: waitingSince(40 * time.Second), src: &section.EC2{FilledBoot: "boot-1", FilledAt: now.Add(-165 * time.Second)}}, paceWaiting / 4, nil},
		{"filled 10 min before its pods came, they waited 100 s", view{st: waitingSince(100 * time.Second), src: &section.EC2{FilledBoot: "boot-1", FilledAt: now.Add(-700 * time.Second)}}, paceWaiting, func(p float64) bool { return p == 1 }},
		{"filled (a store without FilledAt), pods waited 100 s", view{st: waitingSince(100 * time.Second), src: &section.EC2{FilledBoot: "boot-1"}}, paceWaiting, nil},
		{"filled after its pods came (clock stepped), they waited 100 s", view{st: waitingSince(100 * time.Second), src: &section.EC2{FilledBoot: "boot-1", FilledAt: now}}, paceWaiting, nil},
		{"filled in another boot, pods waited 100 s", view{st: waitingSince(100 * time.Second), src: &section.EC2{FilledBoot: "boot-0"}}, paceWaiting, func(p float64) bool { return p == 1 }},
		{"never filled, pods waited 100 s", view{st: waitingSince(100 * time.Second), src: &section.EC2{}}, paceWaiting, nil},
	}
	for _, c := range cases {
		w.repace(&c.v, 5)
		if got := w.pace.factor(); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: pace %v, want %v", c.name, got, c.want)
		}
		if c.paused != nil && !c.paused(paceOfPause(w.pace.factor())) {
			t.Errorf("%s: pause pace %v", c.name, paceOfPause(w.pace.factor()))
		}
	}
	w.Cfg.MinimumIPTarget = 35
	w.repace(&view{st: &alloc.State{}, src: &section.EC2{}}, 40)
	if got := w.pace.factor(); got != 1 {
		t.Errorf("minimumIPTarget, nothing held: pace %v, want 1 (its fill is all its pods need)", got)
	}
	w.Cfg.MinimumIPTarget, w.Cfg.ReadyWhenFilled = 0, false
	w.repace(&view{st: &alloc.State{}, src: &section.EC2{}}, 5)
	if got := w.pace.factor(); got != 1 {
		t.Errorf("no readiness gate, nothing held: pace %v, want 1", got)
	}
	var p pace
	p.set(paceAged(time.Hour))
	b := p.scale(DefaultBackoff)
	if b.Base < 30*time.Millisecond || b.Cap > DefaultBackoff.Cap/16 {
		t.Errorf("the longest waiter's back-off %v to %v: want from about 30 ms, its cap shrunk with it", b.Base, b.Cap)
	}
	p.set(paceFresh)
	if b := p.scale(DefaultBackoff); b.Cap != DefaultBackoff.Cap || b.Base != 16*DefaultBackoff.Base {
		t.Errorf("a NotReady node's back-off %v to %v: want 16 s, the cap kept", b.Base, b.Cap)
	}
}

// TestUnfilledNodeDoesNotPause: a node whose pool was never filled in this
// boot (NotReady behind readyWhenFilled) keeps trying after any number of
// throttled passes: the scheduler waits for it, and it yields to nobody.
func TestUnfilledNodeDoesNotPause(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{WarmIPTarget: 5, ReadyWhenFilled: true})
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	e.fake.Throttle("AssignPrivateIpAddresses", 1000)
	for streak := 1; streak <= lastingThrottle+2; streak++ {
		e.now = e.now.Add(time.Second)
		before := e.fake.Calls()["AssignPrivateIpAddresses"]
		if err := e.w.Run(context.Background()); err == nil {
			t.Fatalf("throttled pass %d succeeded", streak)
		}
		if e.fake.Calls()["AssignPrivateIpAddresses"] == before {
			t.Fatalf("pass %d made no Assign call: paused", streak)
		}
	}
	e.fake.ClearFaults()
	e.now = e.now.Add(time.Second)
	e.warm(t)
	if _, _, src := e.counts(t); src.FilledBoot != e.mgr.BootID {
		t.Errorf("pool not filled after the throttle ended")
	}
}

// TestRepaceDualStackByIPv4: on a dual-stack network the pace reads
// IPv4's counts, as the fill's targets do (provider.Sized): the IPv6
// /80's 2^48 free addresses in the summed counts made a node whose ADDs
// wait for IPv4 addresses look neither starved nor fresh, but holding
// all of its target, and yield hardest (paceSpread).
func TestRepaceDualStackByIPv4(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	w := &Warmer{Mgr: &alloc.Manager{BootID: "boot-1"}, Cfg: section.WarmConfig{WarmIPTarget: 5, ReadyWhenFilled: true}, Now: func() time.Time { return now }}
	dual := func(total4, free4 int) alloc.Counts {
		v4 := alloc.Counts{Total: total4, Free: free4}
		v6 := alloc.Counts{Total: math.MaxInt, Free: math.MaxInt}
		return alloc.Counts{Total: math.MaxInt, Free: math.MaxInt, Families: &alloc.FamilyCounts{IPv4: &v4, IPv6: &v6}}
	}
	var demands []alloc.Demand
	for i := range 3 {
		demands = append(demands, alloc.Demand{Key: alloc.Key{Network: "pods", ContainerID: fmt.Sprint("c", i), IfName: "eth0"}, Since: now.Add(-5 * time.Second), Until: now.Add(100 * time.Second)})
	}
	cases := []struct {
		name string
		v    view
		want float64
	}{
		{"IPv4 dry, pods wait", view{st: &alloc.State{Demands: demands}, src: &section.EC2{FilledBoot: "boot-1"}, counts: dual(14, 0)}, paceWaiting},
		{"NotReady, only the /80 held", view{st: &alloc.State{}, src: &section.EC2{}, counts: dual(0, 0)}, paceFresh},
		{"IPv4 half held", view{st: &alloc.State{}, src: &section.EC2{FilledBoot: "boot-1"}, counts: dual(14, 14)}, paceOf(14, 14, false)},
	}
	for _, c := range cases {
		w.repace(&c.v, 14)
		if got := w.pace.factor(); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: pace %v, want %v", c.name, got, c.want)
		}
	}
}
