// Package fleet simulates a fleet of eni-cni nodes scaling up against one
// EC2 account: N instances of one ec2fake world, whose EC2 API throttles
// with the account's token buckets, each node running the real warm pass
// (ec2.Warmer) and the real ADD side of a dry pool (provider.EC2.Allocate)
// for its pods, in one process on virtual or compressed time. Only the
// node's kernel side (links, routes) is left out: its HostENI does
// nothing. RunReal is the same scale-up with real processes (the built
// binary in a network namespace per node, against an ec2fake world
// process), to show the two agree.
package fleet

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// Options is one scale-up.
type Options struct {
	Nodes        int     // instances launched at once
	PodsPerNode  int     // pods each receives the moment it is up
	InstanceType string  // default m5.xlarge
	Scale        float64 // virtual seconds per real second (time compression)
	Warm         section.WarmConfig
	// LaunchSecondaries and LaunchPrefixes are what the launch template
	// assigns to each node's primary ENI before it boots.
	LaunchSecondaries, LaunchPrefixes int
	// Gate is the readiness gate (readyWhenFilled, a runtime that calls
	// CNI STATUS): the scheduler sends a node its pods only once its
	// STATUS says ready. Without it they are sent at boot.
	Gate bool
	// PodsAfter holds the pods back until this long after the launch
	// (virtual), and at least until the node is Ready: a burst of pods on
	// a fleet already up and filled (a Deployment scaled out), where
	// every node's ADDs begin to wait together.
	PodsAfter time.Duration
	AddWait   time.Duration // each ADD's wait (addWaitSeconds), virtual
	Retry     time.Duration // kubelet's wait before it retries a failed ADD, virtual
	Timeout   time.Duration // give up on the run after this much virtual time
	// Throttling is the account's buckets; nil is AccountThrottling. A
	// smaller fleet meets shrunk ones (Throttling.Shrunk) as 1,000 nodes
	// meet the account's.
	Throttling *ec2fake.Throttling
	// Trace records each node's EC2 attempts (Report.Timelines).
	Trace bool
}

// throttling is the run's buckets, full.
func (o Options) throttling() ec2fake.Throttling {
	if o.Throttling != nil {
		return *o.Throttling
	}
	return ec2fake.AccountThrottling()
}

// Report is what a scale-up did.
type Report struct {
	Opts      Options
	Last      time.Duration   // until the last pod of the last node had an address
	NodeDone  []time.Duration // per node, until its last pod had one
	Calls     map[string]int  // EC2 calls by action, throttled ones included
	Throttled map[string]int
	Bound     time.Duration // what the buckets need for the calls that got through
	BoundOf   string        // the bucket that sets it
	Unserved  int           // pods without an address when the run gave up
	// SentUnready counts the pods the scheduler sent to a node whose pool
	// could not serve them then (provider.PoolReady); Ready is when each
	// node was first Ready (with Gate).
	SentUnready int
	Ready       []time.Duration
	// PodWait is, per node, from when the scheduler sent its pods until
	// the last had an address: what the pods waited for, not the node.
	PodWait    []time.Duration
	AddFailed  map[string]int
	PassErrors int
	// Idle is the addresses the nodes hold and no pod uses when the last
	// pod has its address, summed over the nodes (free and cooling).
	Idle  int
	Model string // set when the report is of a model, not of eni-cni's code
	// Processes: the nodes ran the real binary as processes (RunReal),
	// not the packages in one process.
	Processes bool
	Real      time.Duration // the run's wall time
	// Timelines is each node's EC2 attempts, with Options.Trace.
	Timelines []Timeline `json:"-"`
}

// addNode records one node's outcome: when it was Ready, when its last
// pod had an address, the pods left without one and the failed ADDs by
// reason. The caller holds the report's lock.
func (r *Report) addNode(ready, done time.Duration, unserved int, failed map[string]int) {
	r.Ready = append(r.Ready, ready)
	r.PodWait = append(r.PodWait, max(done-ready, 0))
	r.NodeDone = append(r.NodeDone, done)
	r.Last = max(r.Last, done)
	r.Unserved += unserved
	for k, v := range failed {
		r.AddFailed[k] += v
	}
}

// Mutations counts the calls that changed the account.
func (r Report) Mutations() int {
	n := 0
	for a, c := range r.Calls {
		if !strings.HasPrefix(a, "Describe") {
			n += c - r.Throttled[a]
		}
	}
	return n
}

// IdlePerNode is the addresses a node holds that no pod uses, on average.
func (r Report) IdlePerNode() float64 {
	if r.Opts.Nodes == 0 {
		return 0
	}
	return float64(r.Idle) / float64(r.Opts.Nodes)
}

// Percentile of the nodes' times.
func (r Report) Percentile(p float64) time.Duration {
	if len(r.NodeDone) == 0 {
		return 0
	}
	s := slices.Clone(r.NodeDone)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// vclock is compressed time: virtual time runs scale times as fast as the
// machine's, from a fixed origin. One vclock is shared by reference by the
// world and every node: it starts when the scale-up does.
type vclock struct {
	origin, start time.Time
	scale         float64
}

func (c *vclock) now() time.Time {
	return c.origin.Add(time.Duration(float64(time.Since(c.start)) * c.scale))
}

// real is how long a virtual duration takes.
func (c *vclock) real(d time.Duration) time.Duration { return time.Duration(float64(d) / c.scale) }

func (c *vclock) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(c.real(d))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (o *Options) defaults() {
	if o.InstanceType == "" {
		o.InstanceType = "m5.xlarge"
	}
	if o.Warm.TrimAfter == 0 {
		// The config's default (netconf): without it every pass of the
		// scale-up gave back what its ADDs, their wait run out, had not
		// yet taken, and assigned it again for their retries.
		o.Warm.TrimAfter = 5 * time.Minute
	}
	if o.Scale <= 0 {
		o.Scale = 1
	}
	if o.AddWait == 0 {
		o.AddWait = 110 * time.Second // the config's default (netconf)
	}
	if o.Retry == 0 {
		o.Retry = 10 * time.Second
	}
	if o.Gate {
		o.Warm.ReadyWhenFilled = true
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Minute
	}
}

// world is the fake account: one VPC, the buckets on the virtual clock,
// EC2's reply times compressed.
func world(o Options, c *vclock) (*ec2fake.Server, error) {
	lat := ec2fake.RealisticLatency()
	for a, d := range lat.Calls {
		lat.Calls[a] = c.real(d)
	}
	lat.LinkDelay = c.real(lat.LinkDelay)
	th := o.throttling()
	return ec2fake.New(ec2fake.Config{
		InstanceType: o.InstanceType, Clock: c.now, Latency: &lat, Throttling: &th, EC2BaseLatency: -1,
		VPCCIDRs: []string{"10.0.0.0/16"}, Subnets: []ec2fake.SubnetConfig{{CIDR: "10.0.0.0/16"}},
	})
}

// Run launches the nodes, gives each its pods at once, and waits until
// every pod has an address or the time is up: on compressed time
// (Options.Scale) over loopback TCP, in which the machine's CPU time
// counts Scale times over.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	c := &vclock{origin: time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC), scale: o.Scale}
	return run(ctx, o, c, &loopback{}, false)
}

// RunVirtual is Run on virtual time: it must be called inside a
// testing/synctest bubble, whose clock advances only when every node,
// the world and every pod wait (for EC2's reply times, the buckets'
// refill, a timer), so the machine's speed enters no figure and a
// thousand nodes fit on two cores. The nodes reach the world over
// in-memory connections (pipes). Scale is ignored.
func RunVirtual(ctx context.Context, o Options) (*Report, error) {
	o.Scale = 1
	o.defaults()
	now := time.Now() // the bubble's
	c := &vclock{origin: now, start: now, scale: 1}
	return run(ctx, o, c, newPipes(), true)
}

func run(ctx context.Context, o Options, c *vclock, netw network, virtual bool) (*Report, error) {
	fake, err := world(o, c)
	if err != nil {
		return nil, err
	}
	s, closeSite, err := openSite(fake, netw)
	if err != nil {
		return nil, err
	}
	defer closeSite()
	nodes := make([]*node, o.Nodes)
	for i := range nodes {
		if nodes[i], err = launch(s, o, c, i); err != nil {
			return nil, err
		}
	}
	fake.ResetCalls()
	fake.SetThrottling(ptr(o.throttling())) // full buckets at the start
	c.start = time.Now()
	if virtual {
		c.origin = c.start // the bubble's clock is the virtual one
	}
	ctx, cancel := context.WithTimeout(ctx, c.real(o.Timeout))
	defer cancel()
	for _, n := range nodes {
		n.life = ctx
		n.passes.Go(func() { n.timer(ctx) })
	}
	r := &Report{Opts: o, AddFailed: map[string]int{}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unready, ok := n.scheduled(ctx)
			if wait := o.PodsAfter - c.now().Sub(c.origin); ok && wait > 0 {
				c.sleep(ctx, wait)
				unready, ok = n.scheduled(ctx)
			}
			ready := c.now().Sub(c.origin)
			var done time.Duration
			unserved, failed := o.PodsPerNode, map[string]int(nil)
			if ok {
				done, unserved, failed = n.pods(ctx)
			}
			mu.Lock()
			defer mu.Unlock()
			r.SentUnready += unready
			r.addNode(ready, done, unserved, failed)
			if n.trace != nil {
				r.Timelines = append(r.Timelines, n.timeline(ready, done))
			}
		}()
	}
	wg.Wait()
	cancel()
	for _, n := range nodes {
		n.passes.Wait()
	}
	r.Calls, r.Throttled = fake.Calls(), fake.Throttled()
	served := map[string]int{}
	for a, n := range r.Calls {
		served[a] = n - r.Throttled[a]
	}
	r.Bound, r.BoundOf = o.throttling().Drain(served)
	for _, n := range nodes {
		r.PassErrors += n.passErrors()
		r.Idle += n.idle()
	}
	return r, nil
}

func ptr[T any](v T) *T { return &v }

// Table renders reports side by side.
func Table(rs []*Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-50s %6s %9s %9s %9s %9s %9s %9s %10s %8s %8s %8s %9s\n", "configuration", "nodes", "last pod", "bound", "p50 node", "p99 node", "max node", "mutating", "throttled", "ADD fail", "unserved", "unready", "idle/node")
	for _, r := range rs {
		th := 0
		for _, n := range r.Throttled {
			th += n
		}
		fails := 0
		for _, n := range r.AddFailed {
			fails += n
		}
		unready, idle := "-", "-"
		if r.Processes {
			idle = fmt.Sprintf("%.1f", r.IdlePerNode())
		} else if r.Model == "" {
			unready, idle = fmt.Sprint(r.SentUnready), fmt.Sprintf("%.1f", r.IdlePerNode())
		}
		fmt.Fprintf(&b, "%-50s %6d %8.0fs %8.0fs %8.0fs %8.0fs %8.0fs %9d %10d %8d %8d %8s %9s\n", name(r), r.Opts.Nodes,
			r.Last.Seconds(), r.Bound.Seconds(), r.Percentile(0.5).Seconds(), r.Percentile(0.99).Seconds(), r.Percentile(1).Seconds(),
			r.Mutations(), th, fails, r.Unserved, unready, idle)
	}
	for _, r := range rs {
		fmt.Fprintf(&b, "\n%s: calls (throttled) by action:", name(r))
		actions := make([]string, 0, len(r.Calls))
		for a := range r.Calls {
			actions = append(actions, a)
		}
		sort.Strings(actions)
		for _, a := range actions {
			fmt.Fprintf(&b, " %s %d (%d);", a, r.Calls[a], r.Throttled[a])
		}
		if r.Opts.Gate && len(r.Ready) > 0 {
			rd := Report{NodeDone: r.Ready}
			fmt.Fprintf(&b, "\n  nodes Ready (STATUS) at p50 %.0fs, p99 %.0fs, max %.0fs", rd.Percentile(0.5).Seconds(), rd.Percentile(0.99).Seconds(), rd.Percentile(1).Seconds())
		}
		if len(r.PodWait) > 0 {
			pw := Report{NodeDone: r.PodWait}
			fmt.Fprintf(&b, "\n  pods waited (from being sent to the last address) p50 %.0fs, p99 %.0fs, max %.0fs", pw.Percentile(0.5).Seconds(), pw.Percentile(0.99).Seconds(), pw.Percentile(1).Seconds())
		}
		for why, n := range r.AddFailed {
			fmt.Fprintf(&b, "\n  %d ADDs failed: %s", n, why)
		}
		fmt.Fprintln(&b)
	}
	return b.String()
}

func name(r *Report) string {
	if r.Model != "" {
		return r.Model
	}
	o := r.Opts
	s := "secondary addresses"
	if o.Warm.PrefixDelegation {
		s = "prefix delegation"
	}
	if o.LaunchSecondaries+o.LaunchPrefixes > 0 {
		s = fmt.Sprintf("launch template (%d addrs, %d /28)", o.LaunchSecondaries, o.LaunchPrefixes)
	}
	if o.Warm.MinimumIPTarget > 0 {
		s += fmt.Sprintf(", minimumIPTarget %d", o.Warm.MinimumIPTarget)
	}
	if o.Gate {
		s += ", gated"
	} else if o.Warm.ReadyWhenFilled {
		s += ", readyWhenFilled without STATUS"
	}
	if o.PodsAfter > 0 {
		s += fmt.Sprintf(", pods at %v", o.PodsAfter)
	}
	if r.Processes {
		s += ", real processes"
	}
	return s
}
