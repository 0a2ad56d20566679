package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"

	ec2pkg "github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// RealOptions is a scale-up of real processes (RunReal): where its
// programs are and how much smaller the account's buckets are.
type RealOptions struct {
	Bin     string // eni-cni, as `make build` makes it
	EC2Fake string // the world's command (ec2/ec2fake/cmd/ec2fake)
	// Size and Refill multiply the account's buckets (Throttling.Shrunk):
	// N nodes against sizes × N/1000 meet them as 1,000 nodes do.
	Size, Refill float64
	Log          io.Writer // progress and the world's stderr
}

// Throttling is the buckets RunReal's world throttles with: the simulation
// beside it runs on the same.
func (ro RealOptions) Throttling() *ec2fake.Throttling {
	return ptr(ec2fake.AccountThrottling().Shrunk(ro.Size, ro.Refill))
}

// realRun is one RunReal: what it made, to undo.
type realRun struct {
	o     Options
	ro    RealOptions
	dir   string
	tag   string   // prefix of its namespaces' names
	netns []string // made, deleted at the end
	world *exec.Cmd
	nodes []*realNode
	start time.Time
}

// realNode is one instance: its namespace (the node's host side), its
// configuration and what its processes did.
type realNode struct {
	id, netns, conf, state string
	env                    []string
	pods                   []string // the pods' namespaces
	mu                     sync.Mutex
	errs                   int
}

// RunReal is Run with real processes: one ec2fake world process serving
// N instances on the VPC fabric (each its own network namespace, its IMDS
// and the shared EC2 API on a listener there, its ENIs' links made there as
// EC2 attaches them), and on each node the real binary: `eni-cni warm` as
// its timer runs it (10 s after boot, then 30 s after each pass, each with
// up to 5 s of RandomizedDelaySec), CNI STATUS every 5 s as kubelet asks
// (with Options.Gate), then the pods' CNI ADDs all at once, each into its
// own network namespace, retried 10 s after a failure. Real time: the run
// takes as long as the buckets make it. Root; it deletes every namespace
// it made and waits for every pass it started.
func RunReal(ctx context.Context, o Options, ro RealOptions) (r *Report, err error) {
	o.defaults()
	o.Throttling = ro.Throttling()
	run := &realRun{o: o, ro: ro, tag: fmt.Sprintf("fr%d", os.Getpid()%100000)}
	if run.dir, err = os.MkdirTemp("", "eni-cni-fleet-real-"); err != nil {
		return nil, err
	}
	defer run.cleanup()
	if err := run.setup(ctx); err != nil {
		return nil, err
	}
	wall := time.Now()
	r = run.scaleUp(ctx)
	r.Real = time.Since(wall)
	run.settle()
	return r, run.tally(r)
}

// setup makes the namespaces, starts the world and writes each node's
// configuration.
func (run *realRun) setup(ctx context.Context) error {
	router, err := run.addNetNS("vpc")
	if err != nil {
		return err
	}
	args := []string{"--vpc-cidr", "10.0.0.0/16", "--subnet-cidr", "10.0.0.0/16", "--instance-type", "m5.xlarge",
		"--latency", "realistic", "--throttling", "account",
		"--throttling-size", fmt.Sprint(run.ro.Size), "--throttling-refill", fmt.Sprint(run.ro.Refill),
		"--router-netns", router, "--describe", run.describeFile(),
		// What the launch template assigns (ec2fake seeds every instance).
		"--secondary-ips", fmt.Sprint(run.o.LaunchSecondaries), "--prefixes", fmt.Sprint(run.o.LaunchPrefixes)}
	for i := range run.o.Nodes {
		n := &realNode{id: fmt.Sprintf("i-%017x", 0x0f1ee7000+i)} // the simulation's IDs: the same windows of the hour
		if n.netns, err = run.addNetNS(fmt.Sprintf("n%d", i)); err != nil {
			return err
		}
		for j := range run.o.PodsPerNode {
			p, err := run.addNetNS(fmt.Sprintf("n%dp%d", i, j))
			if err != nil {
				return err
			}
			n.pods = append(n.pods, p)
		}
		args = append(args, "--instance", fmt.Sprintf("id=%s,netns=%s,env-file=%s", n.id, n.netns, filepath.Join(run.dir, n.id+".env")))
		run.nodes = append(run.nodes, n)
	}
	if err := run.startWorld(ctx, args); err != nil {
		return err
	}
	for _, n := range run.nodes {
		if err := run.configure(n); err != nil {
			return err
		}
	}
	return nil
}

func (run *realRun) describeFile() string { return filepath.Join(run.dir, "world.json") }

// addNetNS makes a named network namespace and returns its path.
func (run *realRun) addNetNS(name string) (string, error) {
	name = run.tag + name
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("ip netns add %s: %v: %s", name, err, out)
	}
	run.netns = append(run.netns, name)
	return "/run/netns/" + name, nil
}

// startWorld runs ec2fake and waits until it prints its URLs (its nodes
// are then on the fabric).
func (run *realRun) startWorld(ctx context.Context, args []string) error {
	run.world = exec.Command(run.ro.EC2Fake, args...)
	run.world.Stderr = run.ro.Log
	out, err := run.world.StdoutPipe()
	if err != nil {
		return err
	}
	if err := run.world.Start(); err != nil {
		return fmt.Errorf("start ec2fake: %w", err)
	}
	lines := make(chan int)
	go func() {
		s, n := bufio.NewScanner(out), 0
		for s.Scan() {
			if n++; n == 2 {
				lines <- n
			}
		}
		close(lines)
	}()
	select {
	case n := <-lines:
		if n < 2 {
			return errors.New("ec2fake exited before it served")
		}
		return nil
	case <-time.After(2 * time.Minute):
		return errors.New("ec2fake did not serve within 2 minutes")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// description is what RunReal reads of ec2fake's --describe file.
type description struct {
	Instances []struct {
		ID      string `json:"id"`
		URL     string `json:"url"`
		EnvFile string `json:"envFile"`
	} `json:"instances"`
	ENIs      []ec2fake.ENI  `json:"enis"`
	Calls     map[string]int `json:"calls"`
	Throttled map[string]int `json:"throttled"`
}

func (run *realRun) describe() (*description, error) {
	b, err := os.ReadFile(run.describeFile())
	if err != nil {
		return nil, err
	}
	d := &description{}
	return d, json.Unmarshal(b, d)
}

// configure writes the node's network configuration (the simulation's:
// warmIPTarget and the rest from Options) and reads its env file.
func (run *realRun) configure(n *realNode) error {
	d, err := run.describe()
	if err != nil {
		return err
	}
	url := ""
	for _, in := range d.Instances {
		if in.ID == n.id {
			url = in.URL
		}
	}
	if url == "" {
		return fmt.Errorf("ec2fake describes no listener of %s", n.id)
	}
	nd := filepath.Join(run.dir, n.id)
	n.state, n.conf = filepath.Join(nd, "state"), filepath.Join(nd, "eni-cni.conf")
	if err := os.MkdirAll(n.state, 0o700); err != nil {
		return err
	}
	w := run.o.Warm
	pool := map[string]any{"source": "ec2", "warmIPTarget": w.WarmIPTarget, "addWaitSeconds": run.o.AddWait.Seconds(),
		"prefixDelegation": w.PrefixDelegation, "readyWhenFilled": run.o.Gate}
	if w.MinimumIPTarget > 0 {
		pool["minimumIPTarget"] = w.MinimumIPTarget
	}
	conf, err := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "pods", "type": "eni-cni", "mtu": 9001,
		"stateDir": n.state, "logFile": filepath.Join(nd, "eni-cni.log"), "pool": pool, "imdsEndpoint": url, "ec2Endpoint": url})
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.conf, conf, 0o644); err != nil {
		return err
	}
	env, err := os.ReadFile(filepath.Join(run.dir, n.id+".env"))
	for _, l := range strings.Split(string(env), "\n") {
		if kv, ok := strings.CutPrefix(l, "export "); ok {
			n.env = append(n.env, kv)
		}
	}
	return err
}

// scaleUp is the launch: every node's timer, STATUS and pods at once, until
// every pod has an address or Options.Timeout.
func (run *realRun) scaleUp(ctx context.Context) *Report {
	ctx, cancel := context.WithTimeout(ctx, run.o.Timeout)
	defer cancel()
	run.start = time.Now()
	r := &Report{Opts: run.o, AddFailed: map[string]int{}, Processes: true}
	var timers, pods sync.WaitGroup
	var mu sync.Mutex
	for _, n := range run.nodes {
		timers.Go(func() { run.timer(ctx, n) })
		pods.Go(func() {
			ready, ok := run.ready(ctx, n)
			done, unserved, failed := time.Duration(0), run.o.PodsPerNode, map[string]int(nil)
			if ok {
				done, unserved, failed = run.pods(ctx, n)
			}
			mu.Lock()
			defer mu.Unlock()
			r.addNode(ready, done, unserved, failed)
		})
	}
	pods.Wait()
	cancel()
	timers.Wait()
	for _, n := range run.nodes {
		r.PassErrors += n.errs
	}
	return r
}

// since is the time from the launch.
func (run *realRun) since() time.Duration { return time.Since(run.start) }

// sleep waits d, or less if ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// timer is eni-cni-warm.timer (scripts/systemd): OnBootSec=10s,
// OnUnitActiveSec=30s, RandomizedDelaySec=5s.
func (run *realRun) timer(ctx context.Context, n *realNode) {
	jitter := func() time.Duration { return rand.N(5 * time.Second) }
	sleep(ctx, 10*time.Second+jitter())
	for ctx.Err() == nil {
		if _, err := run.exec(ctx, n, nil, "", run.ro.Bin, "warm", "--config", n.conf); err != nil && ctx.Err() == nil {
			n.mu.Lock()
			n.errs++
			n.mu.Unlock()
		}
		sleep(ctx, 30*time.Second+jitter())
	}
}

// ready is kubelet asking the runtime's status every 5 s, which runs the
// real CNI STATUS: the node is sent its pods when it first succeeds (at
// once without Options.Gate).
func (run *realRun) ready(ctx context.Context, n *realNode) (time.Duration, bool) {
	for run.o.Gate {
		if _, err := run.cni(ctx, n, "STATUS", "", ""); err == nil {
			break
		}
		sleep(ctx, statusEvery)
		if ctx.Err() != nil {
			return run.since(), false
		}
	}
	return run.since(), true
}

// pods runs the node's pods' ADDs at once, each retried 10 s after a
// failure as kubelet does, and returns when the last had an address.
func (run *realRun) pods(ctx context.Context, n *realNode) (last time.Duration, unserved int, failed map[string]int) {
	failed = map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, netns := range n.pods {
		wg.Go(func() {
			for {
				_, err := run.cni(ctx, n, "ADD", fmt.Sprintf("pod-%d", i), netns)
				mu.Lock()
				if err == nil {
					last = max(last, run.since())
					mu.Unlock()
					return
				}
				if ctx.Err() != nil {
					unserved++
					mu.Unlock()
					return
				}
				failed[reason(err)]++
				mu.Unlock()
				sleep(ctx, run.o.Retry)
			}
		})
	}
	wg.Wait()
	return last, unserved, failed
}

// cni runs the plugin as a runtime does, in the node's namespace.
func (run *realRun) cni(ctx context.Context, n *realNode, command, container, netns string) ([]byte, error) {
	env := []string{"CNI_COMMAND=" + command, "CNI_PATH=" + filepath.Dir(run.ro.Bin)}
	if container != "" {
		env = append(env, "CNI_CONTAINERID="+container, "CNI_NETNS="+netns, "CNI_IFNAME=eth0")
	}
	conf, err := os.ReadFile(n.conf)
	if err != nil {
		return nil, err
	}
	return run.exec(ctx, n, env, string(conf), run.ro.Bin)
}

// exec runs a command in the node's namespace; a failure says what the
// plugin said (its CNI error's msg).
func (run *realRun) exec(ctx context.Context, n *realNode, env []string, stdin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", filepath.Base(n.netns)}, args...)...)
	cmd.Env = append(append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, n.env...), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var e struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal(out, &e) == nil && e.Msg != "" {
			return out, errors.New(e.Msg)
		}
		return out, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// settle waits for the passes the ADDs and STATUS started (processes of
// their own, outliving them) to end: each holds its node's warm.lock.
func (run *realRun) settle() {
	for _, n := range run.nodes {
		l := flock.New(filepath.Join(n.state, ec2pkg.WarmLockName))
		ctx, cancel := context.WithTimeout(context.Background(), ec2pkg.WarmTimeout+10*time.Second)
		if ok, _ := l.TryLockContext(ctx, 100*time.Millisecond); ok {
			_ = l.Unlock()
		}
		cancel()
	}
}

// tally reads what the world counted: the calls, the throttled ones, and
// the addresses each node holds beyond its pods.
func (run *realRun) tally(r *Report) error {
	d, err := run.describe()
	if err != nil {
		return err
	}
	r.Calls, r.Throttled = d.Calls, d.Throttled
	served := map[string]int{}
	for a, c := range r.Calls {
		served[a] = c - r.Throttled[a]
	}
	r.Bound, r.BoundOf = run.o.throttling().Drain(served)
	held := 0
	for _, e := range d.ENIs {
		if e.InstanceID != "" {
			held += len(e.SecondaryIPs) + 16*len(e.Prefixes)
		}
	}
	r.Idle = held - run.o.Nodes*run.o.PodsPerNode + r.Unserved
	return nil
}

// cleanup stops the world and deletes every namespace RunReal made.
func (run *realRun) cleanup() {
	if run.world != nil && run.world.Process != nil {
		_ = run.world.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = run.world.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = run.world.Process.Kill()
			<-done
		}
	}
	for _, name := range run.netns {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			fmt.Fprintf(run.ro.Log, "ip netns del %s: %v: %s\n", name, err, out)
		}
	}
	_ = os.RemoveAll(run.dir)
}
