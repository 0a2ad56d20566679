package fleet

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	ec2pkg "github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// SteadyOptions is a day of a fleet after its scale-up, and its scale-down.
type SteadyOptions struct {
	Options
	Hours int           // how long the steady state lasts, virtual
	Every time.Duration // each node's timer: a pass every so often (the unit's is 30 s)
	Down  time.Duration // how long the scale-down is watched
}

// SteadyReport is what the fleet's passes asked of EC2.
type SteadyReport struct {
	Opts                SteadyOptions
	Passes              int
	BootCalls           map[string]int // in the first hour after the scale-up
	Calls, Throttled    map[string]int // during the steady state, after that hour
	MaxDescribePerSec   int            // the most Describe calls the fleet made in one second
	MaxCallsPerSec      int
	DownCalls, DownThro map[string]int // during the scale-down
	DownDone            time.Duration  // until every node had given back its surplus
	Real                time.Duration
}

// PerNodeHour is the steady state's EC2 calls per node and hour.
func (r *SteadyReport) PerNodeHour() float64 {
	n := 0
	for _, c := range r.Calls {
		n += c
	}
	return float64(n) / float64(r.Opts.Nodes) / float64(r.Opts.Hours)
}

// stepClock is virtual time that jumps to each pass's moment and runs at
// the machine's speed during the pass (an ENI's attachment takes a moment
// of it): the fleet's passes run one after another, each at its own
// virtual moment, so the machine's load does not enter the figures. It
// never goes back.
type stepClock struct {
	mu          sync.Mutex
	base, since time.Time
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Add(time.Since(c.since))
}

func (c *stepClock) set(t time.Time) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base, c.since = t, time.Now()
	if now.After(t) {
		c.base = now
	}
}

// instant: on a stepped clock no wait takes real time.
func instant(time.Duration) time.Duration { return time.Millisecond }

// Steady launches the nodes with their pods addressed (a pass sized for
// them, then the pods' allocations), then runs every node's timer passes
// for Hours on a stepped clock against the account's buckets, counting the
// calls per second; then every pod goes (DEL) and the passes go on for
// Down, counting what the scale-down asks of EC2.
func Steady(ctx context.Context, o SteadyOptions) (*SteadyReport, error) {
	o.defaults()
	if o.Hours == 0 {
		o.Hours = 24
	}
	if o.Every == 0 {
		o.Every = 30 * time.Second
	}
	if o.Down == 0 {
		o.Down = 30 * time.Minute
	}
	start := time.Now()
	c := &stepClock{base: time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC), since: time.Now()}
	fake, err := ec2fake.New(ec2fake.Config{InstanceType: o.InstanceType, Clock: c.now,
		VPCCIDRs: []string{"10.0.0.0/16"}, Subnets: []ec2fake.SubnetConfig{{CIDR: "10.0.0.0/16"}}})
	if err != nil {
		return nil, err
	}
	netw := &loopback{}
	s, closeSite, err := openSite(fake, netw)
	if err != nil {
		return nil, err
	}
	defer closeSite()
	nodes := make([]*node, o.Nodes)
	for i := range nodes {
		if nodes[i], err = launchOn(s, o.Options, c.now, instant, i); err != nil {
			return nil, err
		}
		if err := nodes[i].addressed(ctx, o.PodsPerNode); err != nil {
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
	}
	r := &SteadyReport{Opts: o}
	fake.ResetCalls()
	fake.SetThrottling(ptr(ec2fake.AccountThrottling()))
	// The first hour after boot holds each node's once-a-boot leak sweep
	// (in its window of the hour): counted apart, as the boot's.
	settle := c.now()
	r.Passes = o.run(ctx, c, fake, nodes, settle, settle.Add(time.Hour), func(time.Time, map[string]int) {})
	r.BootCalls = fake.Calls()
	fake.ResetCalls()
	t0 := settle.Add(time.Hour)
	perSec := map[int64]int{}
	describePerSec := map[int64]int{}
	r.Passes += o.run(ctx, c, fake, nodes, t0, t0.Add(time.Duration(o.Hours)*time.Hour), func(at time.Time, calls map[string]int) {
		for a, n := range calls {
			perSec[at.Unix()] += n
			if strings.HasPrefix(a, "Describe") {
				describePerSec[at.Unix()] += n
			}
		}
	})
	r.Calls, r.Throttled = fake.Calls(), fake.Throttled()
	for _, n := range perSec {
		r.MaxCallsPerSec = max(r.MaxCallsPerSec, n)
	}
	for _, n := range describePerSec {
		r.MaxDescribePerSec = max(r.MaxDescribePerSec, n)
	}
	// Scale-down: every pod goes at once; each node's passes give the
	// surplus back after TrimAfter.
	for _, n := range nodes {
		if err := n.releaseAll(ctx); err != nil {
			return nil, err
		}
	}
	fake.ResetCalls()
	fake.SetThrottling(ptr(ec2fake.AccountThrottling()))
	down := c.now()
	o.run(ctx, c, fake, nodes, down, down.Add(o.Down), func(at time.Time, calls map[string]int) {
		if calls["UnassignPrivateIpAddresses"] > 0 {
			r.DownDone = max(r.DownDone, at.Sub(down))
		}
	})
	r.DownCalls, r.DownThro = fake.Calls(), fake.Throttled()
	r.Real = time.Since(start)
	return r, nil
}

// run runs each node's timer passes from t0 to end in time order, node i's
// timer shifted by i/N of a period, and reports each pass's EC2 calls.
func (o SteadyOptions) run(ctx context.Context, c *stepClock, fake *ec2fake.Server, nodes []*node, t0, end time.Time, seen func(time.Time, map[string]int)) int {
	passes := 0
	for tick := t0; tick.Before(end); tick = tick.Add(o.Every) {
		for i, n := range nodes {
			at := tick.Add(o.Every * time.Duration(i) / time.Duration(len(nodes)))
			c.set(at)
			// A fresh IMDS client for each pass, as each pass of the
			// real timer is a process of its own: a client kept across
			// the clock's jumps holds a session token the fake has
			// expired on its virtual clock.
			n.w.MD = ec2pkg.NewMetadataClient(n.cfg.IMDSEndpoint)
			before := fake.Calls()
			_ = n.w.Run(ctx)
			passes++
			after := fake.Calls()
			diff := map[string]int{}
			for a, k := range after {
				if d := k - before[a]; d > 0 {
					diff[a] = d
				}
			}
			if len(diff) > 0 {
				seen(at, diff)
			}
		}
	}
	return passes
}

// addressed brings the node to where the scale-up left it: a pass sized
// for its pods (warmIPTarget on top), then their allocations.
func (n *node) addressed(ctx context.Context, pods int) error {
	cfg := n.w.Cfg
	n.w.Cfg.MinimumIPTarget = pods + cfg.WarmIPTarget
	err := n.w.Run(ctx)
	n.w.Cfg = cfg
	if err != nil {
		return err
	}
	for i := range pods {
		key := alloc.Key{Network: "pods", ContainerID: fmt.Sprintf("pod-%d", i), IfName: "eth0"}
		if _, _, err := n.mgr.Allocate(ctx, alloc.Request{Key: key}); err != nil {
			return err
		}
	}
	return nil
}

// releaseAll is every pod's DEL.
func (n *node) releaseAll(ctx context.Context) error {
	st, err := n.mgr.Load()
	if err != nil {
		return err
	}
	for _, a := range st.Allocations {
		if _, _, err := n.mgr.Release(ctx, a.Key, netip.Addr{}); err != nil {
			return err
		}
	}
	return nil
}

// SteadyTable renders a steady-state report.
func SteadyTable(r *SteadyReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "steady state: %d nodes × %d h after the first hour, a pass every %s per node (%d passes, stepped virtual clock, %s real)\n",
		r.Opts.Nodes, r.Opts.Hours, r.Opts.Every, r.Passes, r.Real.Round(time.Second))
	fmt.Fprintf(&b, "  calls per node-hour %.3f; most calls in one second %d, Describe calls %d (the Describe bucket refills 20/s)\n",
		r.PerNodeHour(), r.MaxCallsPerSec, r.MaxDescribePerSec)
	fmt.Fprintf(&b, "  calls (throttled): %s\n", formatCalls(r.Calls, r.Throttled))
	fmt.Fprintf(&b, "  the hour before (the boot's leak sweeps): %s\n", formatCalls(r.BootCalls, nil))
	fmt.Fprintf(&b, "scale-down: every pod deleted at once; %s watched; last give-back %.0fs after\n", r.Opts.Down, r.DownDone.Seconds())
	fmt.Fprintf(&b, "  calls (throttled): %s\n", formatCalls(r.DownCalls, r.DownThro))
	return b.String()
}

func formatCalls(calls, throttled map[string]int) string {
	actions := make([]string, 0, len(calls))
	for a := range calls {
		actions = append(actions, a)
	}
	sort.Strings(actions)
	var parts []string
	for _, a := range actions {
		parts = append(parts, fmt.Sprintf("%s %d (%d)", a, calls[a], throttled[a]))
	}
	return strings.Join(parts, "; ")
}
