package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// The dry-pool phase: a burst of exec'ed ADDs on a fresh m5.xlarge-shaped
// node (fake IMDS + EC2 with ec2fake.RealisticLatency, default warm
// settings), where each ADD finds the pool dry, starts `eni-cni warm` and
// waits for it; then the same burst the old way (addWaitSeconds 0: code 11
// at once, the caller retries every 10 s, the warm timer every 30 s).
// The harness plays the hypervisor: the link of each ENI the fake attaches
// appears in the node namespace after the profile's link delay.

const (
	dryType       = "m5.xlarge" // 4 ENIs x 14 secondaries: 56 pod addresses
	dryRetry      = 10 * time.Second
	dryTimer      = 30 * time.Second
	dryTimerPhase = 15 * time.Second // the mean phase of a 30 s timer against a burst
	dryOldLimit   = 15 * time.Minute
	dryVPC        = "10.96.0.0/16"
	drySubnet     = "10.96.0.0/20"
)

// dryResults is the phase's output (results.json "dry").
type dryResults struct {
	Profile string   `json:"profile"`
	Runs    []dryRun `json:"runs"`
	// CPU of waiting: two ADDs that wait 1 s and 5 s for a pass that does
	// not come, and one that takes a free address.
	WaitCPU1s, WaitCPU5s, NoWaitCPU float64 `json:"-"`
	WaitCPUNote                     string  `json:"waitCPU"`
}

// dryRun is one burst.
type dryRun struct {
	Label        string         `json:"label"`
	Pods         int            `json:"pods"`
	Old          bool           `json:"old"`
	OK           int            `json:"ok"`
	LastOK       float64        `json:"lastOKSeconds"`  // from the release of the burst
	Failed       []float64      `json:"failedSeconds"`  // when the failed ADDs gave up
	HardLimit    int            `json:"hardLimitFails"` // failures naming the full node
	FailMsg      string         `json:"failMessage,omitempty"`
	Floor        float64        `json:"floorSeconds"`
	Critical     float64        `json:"criticalPathSeconds"` // the floor with the new ENIs created at once
	EC2          map[string]int `json:"ec2"`
	EC2Total     int            `json:"ec2Total"`
	Execs        int            `json:"addExecs"`
	WarmStarts   int            `json:"warmStartedByADDs"`
	TimerPasses  int            `json:"timerPasses,omitempty"`
	FirstEC2     float64        `json:"firstEC2CallSeconds"` // the pass's first EC2 call, from the release
	LastLink     float64        `json:"lastLinkSeconds"`     // the last new ENI's link appearing
	ADDCPUP50    float64        `json:"addCPUP50Ms"`
	WarmCPUTotal float64        `json:"-"`
}

// dryNode is one simulated node of the phase.
type dryNode struct {
	b        *bench
	node     *node
	vpc      netns.NsHandle
	fake     *ec2fake.Server
	stateDir string
	confPath string
	conf     []byte
	pods     []*pod
	mu       sync.Mutex
	linkErr  error
	links    int
	t0       time.Time // the burst's release, for the trace
	traceBuf bytes.Buffer
	firstEC2 time.Duration // from the trace: the first EC2 call
	lastLink time.Duration // and the last link made
}

func (b *bench) newDryNode(label string, pods int, addWait float64) (*dryNode, error) {
	n, err := b.newNode("dry-" + label)
	if err != nil {
		return nil, err
	}
	vpcName := b.prefix + "dryvpc-" + label
	if err := b.createNamespaces([]string{vpcName}); err != nil {
		return nil, err
	}
	d := &dryNode{b: b, node: n, stateDir: filepath.Join(b.work, "dry-"+label)}
	if d.vpc, err = netns.GetFromPath(filepath.Join(nsRunDir, vpcName)); err != nil {
		return nil, err
	}
	lat := ec2fake.RealisticLatency()
	d.fake, err = ec2fake.New(ec2fake.Config{InstanceType: dryType, Latency: &lat,
		VPCCIDRs: []string{dryVPC}, Subnets: []ec2fake.SubnetConfig{{CIDR: drySubnet}}})
	if err != nil {
		return nil, err
	}
	// The listener is made in the node namespace: loopback is per namespace.
	// Every request is traced (time since the burst's release) into
	// dry-<label>.trace in the output directory: where the time goes.
	if err := b.inNS(n.ns, func() error { return d.fake.StartHandlers("127.0.0.1:0", d.traced(d.fake), "", nil) }); err != nil {
		return nil, err
	}
	d.fake.OnLink(func(e ec2fake.ENI) {
		d.trace("link of %s (device %d) appears", e.ID, e.DeviceIndex)
		d.addLink(e)
	})
	if d.pods, err = b.newPods("d"+label+"-", pods); err != nil {
		return nil, err
	}
	conf := map[string]any{
		"cniVersion": "1.0.0", "name": "bench-dry", "type": "eni-cni", "stateDir": d.stateDir, "mtu": b.cfg.mtu,
		"logFile": filepath.Join(b.work, "dry-"+label+".log"), "imdsEndpoint": d.fake.URL(), "ec2Endpoint": d.fake.URL(),
		"pool": map[string]any{"source": "ec2", "addWaitSeconds": addWait},
	}
	if d.conf, err = json.Marshal(conf); err != nil {
		return nil, err
	}
	d.confPath = filepath.Join(b.work, "dry-"+label+".conf")
	if err := os.WriteFile(d.confPath, d.conf, 0o600); err != nil {
		return nil, err
	}
	// A node's first timer run unpacks the full build into the state
	// directory's cache (.bin); the burst is timed on a node where that
	// has happened, not on the 45 MB write.
	x, err := b.execIn(b.rootNS, b.cfg.eniBin, []string{"warm", "--config", d.confPath, "--help"}, []string{"PATH=" + os.Getenv("PATH")}, nil)
	if err != nil || x.exit != 0 {
		return nil, fmt.Errorf("unpack the full build (eni-cni warm --config %s --help): %v %s", d.confPath, err, x.stderr)
	}
	return d, nil
}

// traced wraps the fake's handler to trace each request.
func (d *dryNode) traced(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		what := r.URL.Path
		if strings.HasPrefix(what, "/latest/") {
			h.ServeHTTP(w, r)
			if what == "/latest/api/token" || strings.HasSuffix(what, "/instance-id") {
				d.trace("IMDS %s", what)
			}
			return
		}
		r.ParseForm()
		what = r.Form.Get("Action")
		d.mu.Lock()
		if !d.t0.IsZero() && d.firstEC2 == 0 {
			d.firstEC2 = time.Since(d.t0)
		}
		d.mu.Unlock()
		d.trace("> %s", what)
		h.ServeHTTP(w, r)
		d.trace("< %s", what)
	})
}

func (d *dryNode) trace(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.t0.IsZero() {
		return
	}
	fmt.Fprintf(&d.traceBuf, "%8.3f %s\n", time.Since(d.t0).Seconds(), fmt.Sprintf(format, args...))
}

// addLink is the hypervisor: the ENI's link appears in the node namespace
// (a veth with the ENI's MAC whose peer is in a "vpc" namespace).
func (d *dryNode) addLink(e ec2fake.ENI) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() {
		if !d.t0.IsZero() {
			d.lastLink = time.Since(d.t0)
			fmt.Fprintf(&d.traceBuf, "%8.3f link ens%d made\n", d.lastLink.Seconds(), 5+e.DeviceIndex)
		}
	}()
	mac, err := net.ParseMAC(e.MAC)
	if err == nil {
		name := fmt.Sprintf("ens%d", 5+e.DeviceIndex)
		err = d.node.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac},
			PeerName: name + "p", PeerNamespace: netlink.NsFd(d.vpc)})
		if err == nil {
			var vh *netlink.Handle
			if vh, err = netlink.NewHandleAt(d.vpc); err == nil {
				var peer netlink.Link
				if peer, err = vh.LinkByName(name + "p"); err == nil {
					err = vh.LinkSetUp(peer)
				}
				vh.Close()
			}
		}
	}
	if err != nil && d.linkErr == nil {
		d.linkErr = fmt.Errorf("link of %s: %w", e.ID, err)
	}
	d.links++
}

// env is what a runtime passes the plugin, plus dummy credentials, which
// the warm an ADD starts inherits.
func (d *dryNode) env(verb string, pd *pod) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"), "CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + pd.cid, "CNI_NETNS=" + pd.path,
		"CNI_IFNAME=" + ifName, "CNI_PATH=" + filepath.Dir(d.b.cfg.eniBin),
		fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=dry-%d;K8S_POD_UID=uid-%s", pd.index, pd.cid[:16]),
		"AWS_ACCESS_KEY_ID=AKIDBENCH", "AWS_SECRET_ACCESS_KEY=bench",
	}
}

// add execs one ADD; ok with the pod's address, or the CNI error message.
func (d *dryNode) add(pd *pod) (execResult, bool, string, error) {
	r, err := d.b.execIn(d.node.ns, d.b.cfg.eniBin, nil, d.env("ADD", pd), d.conf)
	if err != nil {
		return r, false, "", err
	}
	if r.exit == 0 {
		return r, true, "", nil
	}
	var ce struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	}
	if json.Unmarshal(r.stdout, &ce) != nil || ce.Code != 11 {
		return r, false, "", fmt.Errorf("ADD %s: exit %d: %s %s", pd.name, r.exit, r.stdout, r.stderr)
	}
	return r, false, ce.Msg, nil
}

// idle waits until no warm process of this node runs (an ADD's warm
// outlives it), then checks the hypervisor made every link.
func (d *dryNode) idle() error {
	deadline := time.Now().Add(2 * time.Minute)
	for warmPIDs(d.confPath, filepath.Join(d.stateDir, "warm.conf")) != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("warm of %s still running after 2 minutes", d.stateDir)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.linkErr
}

// warmPIDsUnder lists warm processes whose configuration is under dir.
func warmPIDsUnder(dir string) []int { return warmPIDs(dir) }

// warmPIDs lists processes running `eni-cni warm --config <path>` for a
// path starting with one of confs: started by this harness or by the ADDs
// it exec'ed.
func warmPIDs(confs ...string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, c := range confs {
			if bytes.Contains(b, []byte("warm\x00--config\x00"+c)) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// floor is the sum of the minimum latencies the fake imposes on the calls a
// pass needs for pods addresses on a fresh node: DescribeInstanceTypes, one
// AssignPrivateIpAddresses on the primary ENI, and for each further ENI
// CreateNetworkInterface, AttachNetworkInterface, its link's delay and
// ModifyNetworkInterfaceAttribute (DeleteOnTermination).
func dryFloor(l ec2fake.Latency, pods int) time.Duration {
	lim := ec2fake.DefaultLimits()[dryType]
	per := lim.IPv4PerENI - 1
	need := min(pods, lim.MaxENIs*per)
	f := l.Min("DescribeInstanceTypes") + l.Min("AssignPrivateIpAddresses")
	for extra := (need - per + per - 1) / per; extra > 0; extra-- {
		f += l.Min("CreateNetworkInterface") + l.Min("AttachNetworkInterface") + l.LinkDelay + l.Min("ModifyNetworkInterfaceAttribute")
	}
	return f
}

// dryCriticalPath is the floor's critical path when warm creates the new
// ENIs at once (ec2/eni.go createENIs): DescribeInstanceTypes, the primary
// ENI's AssignPrivateIpAddresses, then one ENI's CreateNetworkInterface +
// AttachNetworkInterface + the longer of its link's delay and
// ModifyNetworkInterfaceAttribute (set while the link appears), however
// many ENIs the burst needs.
func dryCriticalPath(l ec2fake.Latency, pods int) time.Duration {
	lim := ec2fake.DefaultLimits()[dryType]
	f := l.Min("DescribeInstanceTypes") + l.Min("AssignPrivateIpAddresses")
	if pods > lim.IPv4PerENI-1 {
		f += l.Min("CreateNetworkInterface") + l.Min("AttachNetworkInterface") + max(l.LinkDelay, l.Min("ModifyNetworkInterfaceAttribute"))
	}
	return f
}

func dryCapacity() int {
	lim := ec2fake.DefaultLimits()[dryType]
	return lim.MaxENIs * (lim.IPv4PerENI - 1)
}

// phaseDry runs the bursts.
func (b *bench) phaseDry(ctx context.Context) error {
	lat := ec2fake.RealisticLatency()
	var calls []string
	for _, k := range slices.Sorted(maps.Keys(lat.Calls)) {
		calls = append(calls, fmt.Sprintf("%s %d ms", k, lat.Calls[k].Milliseconds()))
	}
	dr := &dryResults{Profile: fmt.Sprintf("calls (minimum): %s; jitter +0–%.0f%%; ENI link %d ms after the attach; IMDS %d ms behind",
		strings.Join(calls, ", "), lat.Jitter*100, lat.LinkDelay.Milliseconds(), lat.IMDSLag.Milliseconds())}
	b.res.Dry = dr
	warmThreads(64)
	for _, n := range b.cfg.drySizes {
		r, err := b.dryBurst(ctx, n)
		if err != nil {
			return err
		}
		dr.Runs = append(dr.Runs, r)
		b.logf("  %s: %d with an address, last after %.2f s (floor %.2f s, critical path with parallel ENIs %.2f s), %d failed %v, EC2 calls %d",
			r.Label, r.OK, r.LastOK, r.Floor, r.Critical, len(r.Failed), r.Failed, r.EC2Total)
	}
	if err := b.dryWaitCPU(ctx, dr); err != nil {
		return err
	}
	b.logf("  %s", dr.WaitCPUNote)
	if b.cfg.dryOld {
		for _, n := range b.cfg.drySizes {
			r, err := b.dryOldBurst(ctx, n)
			if err != nil {
				return err
			}
			dr.Runs = append(dr.Runs, r)
			b.logf("  %s: %d with an address, last after %.1f s, %d ADD execs, %d timer passes", r.Label, r.OK, r.LastOK, r.Execs, r.TimerPasses)
		}
	}
	return nil
}

// dryOutcome is what one pod's ADD (or ADDs, retried) came to.
type dryOutcome struct {
	at    time.Duration // from the release of the burst to its last ADD's end
	ok    bool
	msg   string        // the last CNI error message
	cpu   time.Duration // user+sys of its last ADD
	execs int
	err   error
}

// dryBurst releases n ADDs at once on a fresh node, with the default wait.
func (b *bench) dryBurst(ctx context.Context, n int) (dryRun, error) {
	d, err := b.newDryNode(fmt.Sprintf("new%d", n), n, 25)
	if err != nil {
		return dryRun{}, err
	}
	defer d.fake.Close()
	r := dryRun{Label: fmt.Sprintf("%d ADDs at once, waiting for warm (addWaitSeconds 25)", n), Pods: n,
		Floor: dryFloor(d.fake.LatencyProfile(), n).Seconds(), Critical: dryCriticalPath(d.fake.LatencyProfile(), n).Seconds()}
	out := d.burst(func(pd *pod, t0 time.Time) dryOutcome {
		x, ok, msg, err := d.add(pd)
		return dryOutcome{at: time.Since(t0), ok: ok, msg: msg, cpu: x.user + x.sys, execs: 1, err: err}
	})
	return r, d.collect(&r, out)
}

// burst runs fn for every pod at once.
func (d *dryNode) burst(fn func(pd *pod, t0 time.Time) dryOutcome) []dryOutcome {
	out := make([]dryOutcome, len(d.pods))
	start := make(chan struct{})
	var t0 time.Time
	var ready, done sync.WaitGroup
	for i, pd := range d.pods {
		pd.cid = dryCID(d.stateDir, i)
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			out[i] = fn(pd, t0)
		}()
	}
	ready.Wait()
	t0 = time.Now()
	d.mu.Lock()
	d.t0 = t0
	d.mu.Unlock()
	close(start)
	done.Wait()
	d.trace("all ADDs returned")
	return out
}

func dryCID(label string, i int) string {
	return fmt.Sprintf("%064x", uint64(os.Getpid())<<40|uint64(len(label))<<32|uint64(i)) + strconv.Itoa(i)
}

// collect fills r from the outcomes and the fake, once warm is idle.
func (d *dryNode) collect(r *dryRun, out []dryOutcome) error {
	if err := d.idle(); err != nil {
		return err
	}
	var cpus []float64
	for _, o := range out {
		if o.err != nil {
			return o.err
		}
		r.Execs += o.execs
		if o.ok {
			r.OK++
			r.LastOK = max(r.LastOK, o.at.Seconds())
			cpus = append(cpus, ms(o.cpu))
			continue
		}
		r.Failed = append(r.Failed, o.at.Seconds())
		r.FailMsg = o.msg
		if strings.Contains(o.msg, "node is full") {
			r.HardLimit++
		}
	}
	slices.Sort(r.Failed)
	r.ADDCPUP50 = summarize(cpus).P50
	r.EC2 = d.fake.Calls()
	for _, v := range r.EC2 {
		r.EC2Total += v
	}
	logName := filepath.Base(d.stateDir) + ".log"
	if log, err := os.ReadFile(filepath.Join(d.b.work, logName)); err == nil {
		r.WarmStarts = bytes.Count(log, []byte(`warm="process `))
		// Kept with the outputs: the ADDs' lines and the warm passes' output.
		_ = os.WriteFile(filepath.Join(d.b.out, logName), log, 0o644)
	}
	d.mu.Lock()
	_ = os.WriteFile(filepath.Join(d.b.out, filepath.Base(d.stateDir)+".trace"), d.traceBuf.Bytes(), 0o644)
	r.FirstEC2, r.LastLink = d.firstEC2.Seconds(), d.lastLink.Seconds()
	d.mu.Unlock()
	return nil
}

// dryOldBurst is the burst the old way: addWaitSeconds 0 (code 11 at
// once), each pod's ADD retried every 10 s as kubelet's sandbox back-off
// starts, and `eni-cni warm` from the timer every 30 s, first at 15 s (the
// mean phase of a timer against a burst). It ends when every pod has an
// address or the node is full and the rest can never have one.
func (b *bench) dryOldBurst(ctx context.Context, n int) (dryRun, error) {
	d, err := b.newDryNode(fmt.Sprintf("old%d", n), n, 0)
	if err != nil {
		return dryRun{}, err
	}
	defer d.fake.Close()
	r := dryRun{Label: fmt.Sprintf("%d ADDs, old way: code 11, retried every 10 s, warm every 30 s", n), Pods: n, Old: true,
		Floor: dryFloor(d.fake.LatencyProfile(), n).Seconds(), Critical: dryCriticalPath(d.fake.LatencyProfile(), n).Seconds()}
	target := min(n, dryCapacity())
	var got atomic.Int32
	stop := make(chan struct{})
	var stopOnce sync.Once
	end := func() { stopOnce.Do(func() { close(stop) }) }
	timerDone := make(chan int, 1)
	var timerErr error
	go func() {
		passes := 0
		wait := dryTimerPhase
		for {
			select {
			case <-stop:
				timerDone <- passes
				return
			case <-ctx.Done():
				timerDone <- passes
				return
			case <-time.After(wait):
			}
			wait = dryTimer
			env := d.env("ADD", d.pods[0])[:1] // PATH
			env = append(env, "AWS_ACCESS_KEY_ID=AKIDBENCH", "AWS_SECRET_ACCESS_KEY=bench")
			x, err := b.execIn(d.node.ns, b.cfg.eniBin, []string{"warm", "--config", d.confPath}, env, nil)
			if err == nil && x.exit != 0 {
				err = fmt.Errorf("warm: exit %d: %s", x.exit, x.stderr)
			}
			if err != nil && timerErr == nil {
				timerErr = err
			}
			passes++
		}
	}()
	limit := time.After(dryOldLimit)
	out := d.burst(func(pd *pod, t0 time.Time) dryOutcome {
		var o dryOutcome
		for {
			x, ok, msg, err := d.add(pd)
			o.execs++
			o.at, o.ok, o.msg, o.cpu, o.err = time.Since(t0), ok, msg, x.user+x.sys, err
			if ok && int(got.Add(1)) == target {
				end()
			}
			if ok || err != nil {
				return o
			}
			select {
			case <-stop:
				return o
			case <-limit:
				end()
				return o
			case <-time.After(dryRetry):
			}
		}
	})
	end()
	r.TimerPasses = <-timerDone
	if timerErr != nil {
		return r, timerErr
	}
	return r, d.collect(&r, out)
}

// dryWaitCPU measures what waiting costs an ADD: two ADDs wait 1 s and
// 5 s for a pass that does not come in time (DescribeInstanceTypes held
// for 8 s); then one takes a free address without waiting.
func (b *bench) dryWaitCPU(ctx context.Context, dr *dryResults) error {
	d, err := b.newDryNode("cpu", 4, 1)
	if err != nil {
		return err
	}
	defer d.fake.Close()
	d.fake.SetLatency("DescribeInstanceTypes", 8*time.Second)
	for i := range d.pods {
		d.pods[i].cid = dryCID(d.stateDir, i)
	}
	add := func(pd *pod, wait float64) (execResult, error) {
		var c map[string]any
		if err := json.Unmarshal(d.conf, &c); err != nil {
			return execResult{}, err
		}
		c["pool"].(map[string]any)["addWaitSeconds"] = wait
		stdin, err := json.Marshal(c)
		if err != nil {
			return execResult{}, err
		}
		return b.execIn(d.node.ns, b.cfg.eniBin, nil, d.env("ADD", pd), stdin)
	}
	// A first ADD starts the (held) pass; the two measured ones come while
	// it waits, so that neither starts a pass (which costs the starter the
	// verification of the full build) nor looks at IMDS (a demand is
	// waiting already): the difference between them is the waiting.
	var w1, w5 execResult
	var e0, e1, e5 error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, e0 = add(d.pods[3], 8)
	}()
	time.Sleep(300 * time.Millisecond)
	go func() {
		defer wg.Done()
		w5, e5 = add(d.pods[1], 5)
	}()
	time.Sleep(100 * time.Millisecond)
	w1, e1 = add(d.pods[0], 1)
	wg.Wait()
	if err := errors.Join(e0, e1, e5); err != nil {
		return err
	}
	if w1.exit == 0 || w5.exit == 0 {
		return fmt.Errorf("an ADD got an address although the pass was held back: %s %s", w1.stdout, w5.stdout)
	}
	if err := d.idle(); err != nil { // the pass ends and fills the pool
		return err
	}
	free, err := add(d.pods[2], 1)
	if err != nil {
		return err
	}
	if free.exit != 0 {
		return fmt.Errorf("ADD with a free address: exit %d: %s", free.exit, free.stdout)
	}
	c1, c5, c0 := w1.user+w1.sys, w5.user+w5.sys, free.user+free.sys
	dr.WaitCPU1s, dr.WaitCPU5s, dr.NoWaitCPU = ms(c1), ms(c5), ms(c0)
	dr.WaitCPUNote = fmt.Sprintf("CPU of an exec'ed ADD (user+sys, with the children it waits for): %.1f ms waiting 1 s, %.1f ms waiting 5 s "+
		"for a pass that does not finish in time (%.2f ms per second of waiting), %.1f ms taking a free address without waiting",
		ms(c1), ms(c5), (ms(c5)-ms(c1))/4, ms(c0))
	return nil
}

// ---------------------------------------------------------------- report

const (
	dryBegin = "<!-- BEGIN DRY POOL (make bench, or go run ./scripts/bench -only dry) -->"
	dryEnd   = "<!-- END DRY POOL -->"
)

// dryMarkdown is the dry-pool section of BENCHMARKS.md.
func dryMarkdown(dr *dryResults, when string) string {
	if dr == nil || len(dr.Runs) == 0 {
		return ""
	}
	var m strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&m, format, args...) }
	p("%s\n## A burst of pods on a dry EC2 pool\n\n", dryBegin)
	p("Run of %s. A fresh %s-shaped node (4 ENIs x 14 secondary addresses: 56 pod addresses; kubelet's maxPods 58 counts two host-network pods), ", when, dryType)
	p("state empty, default warm settings (warmIPTarget 5). The fake EC2 and IMDS answer with `ec2fake.RealisticLatency` (%s). ", dr.Profile)
	p("Every ADD is an exec of `bin/eni-cni` in the node namespace; the ADDs start `eni-cni warm` themselves (no systemd here); ")
	p("the harness makes the link of each attached ENI appear after the link delay. ")
	p("**Floor**: the sum of the minimum latencies the fake imposes on the calls a pass needs for that many addresses ")
	p("(DescribeInstanceTypes, one AssignPrivateIpAddresses on the primary ENI, then per further ENI CreateNetworkInterface + AttachNetworkInterface + its link + ModifyNetworkInterfaceAttribute). ")
	p("**Critical path**: the same with the further ENIs created at once, as warm does: DescribeInstanceTypes + AssignPrivateIpAddresses + one ENI's Create + Attach + the longer of its link and ModifyNetworkInterfaceAttribute. ")
	p("Old way: `addWaitSeconds: 0` (code 11 at once, as before), each pod retried every 10 s, warm from a 30 s timer (first at 15 s, the mean phase).\n\n")
	p("| burst | with an address | failed | last pod with an address (s) | floor (s) | last − floor (s) | critical path (s) | last − critical path (s) | ADD execs | warm started by ADDs | EC2 calls |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range dr.Runs {
		failed := "0"
		if len(r.Failed) > 0 {
			failed = fmt.Sprintf("%d (%d saying the node is full), after %s s", len(r.Failed), r.HardLimit, joinF(func(x float64) string { return fmt.Sprintf("%.2f", x) }, r.Failed...))
			if r.Old {
				failed = fmt.Sprintf("%d never get one (code 11 \"no free address\" on every retry)", len(r.Failed))
			}
		}
		starts := strconv.Itoa(r.WarmStarts)
		if r.Old {
			starts = fmt.Sprintf("– (%d timer passes)", r.TimerPasses)
		}
		p("| %s | %d | %s | %.2f | %.2f | %+.2f | %.2f | %+.2f | %d | %s | %d: %s |\n", mdEscape(r.Label), r.OK, mdEscape(failed), r.LastOK, r.Floor, r.LastOK-r.Floor,
			r.Critical, r.LastOK-r.Critical, r.Execs, starts, r.EC2Total, ec2Calls{EC2: r.EC2}.breakdown())
	}
	p("\nWhere the time of the waiting bursts goes (from the fake's request trace, `_out/bench/dry-new<N>.trace`): ")
	var parts []string
	for _, r := range dr.Runs {
		if !r.Old && r.FirstEC2 > 0 {
			parts = append(parts, fmt.Sprintf("%d ADDs: the pass's first EC2 call %.2f s after the release (ADD and warm start-up, IMDS discovery), "+
				"EC2 calls and links until the last ENI's link %.2f s (%.2f s; floor %.2f s, critical path %.2f s), the last pod wired %.2f s after that",
				r.Pods, r.FirstEC2, r.LastLink, r.LastLink-r.FirstEC2, r.Floor, r.Critical, r.LastOK-max(r.LastLink, r.FirstEC2)))
		}
	}
	p("%s.\n", strings.Join(parts, "; "))
	for _, r := range dr.Runs {
		if !r.Old && r.FailMsg != "" {
			p("\nThe failure of the %d-pod burst (CNI error, code 11): `%s`\n", r.Pods, r.FailMsg)
			break
		}
	}
	if dr.WaitCPUNote != "" {
		p("\n%s.\n", dr.WaitCPUNote)
	}
	p("%s\n", dryEnd)
	return m.String()
}

// dryTargets are the phase's targets: the last pod within floor + 1.5 s;
// in a burst larger than the node, exactly the excess fails, at once, with
// the hard-limit message.
func dryTargets(dr *dryResults) []target {
	var ts []target
	for _, r := range dr.Runs {
		if r.Old {
			continue
		}
		over := r.LastOK - r.Floor
		v, ok := verdict(over, 1.5)
		ts = append(ts, target{Target: fmt.Sprintf("dry pool, %d ADDs at once: last pod with an address − floor", r.Pods),
			Measured: fmt.Sprintf("%.2f s", over), Limit: "≤ 1.5 s", Verdict: v, Value: over, Met: ok})
		if excess := r.Pods - dryCapacity(); excess > 0 {
			ok := len(r.Failed) == excess && r.HardLimit == excess && r.OK == dryCapacity()
			v := "met"
			if !ok {
				v = "MISSED"
			}
			ts = append(ts, target{Target: fmt.Sprintf("dry pool, %d ADDs at once: exactly %d fail, with the hard-limit message", r.Pods, excess),
				Measured: fmt.Sprintf("%d failed, %d with it", len(r.Failed), r.HardLimit), Limit: fmt.Sprintf("%d", excess), Verdict: v, Met: ok})
			if len(r.Failed) > 0 {
				late := r.Failed[len(r.Failed)-1] - r.LastOK
				v, ok := verdict(late, 1.0)
				ts = append(ts, target{Target: fmt.Sprintf("dry pool, %d ADDs at once: the failures come at once (after the last address, not after the wait)", r.Pods),
					Measured: fmt.Sprintf("%+.2f s", late), Limit: "≤ 1 s", Verdict: v, Value: late, Met: ok})
			}
		}
	}
	return ts
}

// spliceDry puts the dry-pool section into the markdown file at path,
// replacing the previous one or, if there is none, before "## Notes".
func spliceDry(path, section string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	s := string(old)
	if i := strings.Index(s, dryBegin); i >= 0 {
		if j := strings.Index(s[i:], dryEnd); j >= 0 {
			s = s[:i] + strings.TrimSuffix(section, "\n") + s[i+j+len(dryEnd):]
			return os.WriteFile(path, []byte(s), 0o644)
		}
	}
	if i := strings.Index(s, "\n## Notes"); i >= 0 {
		s = s[:i+1] + section + "\n" + s[i+1:]
	} else {
		s += "\n" + section
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// runDryOnly is `-only dry`: the dry-pool phase alone, without the
// reference plugins. Its table goes to stdout and to dry.md and dry.json in
// the output directory, and its section of -md is replaced in place.
func (b *bench) runDryOnly(ctx context.Context) error {
	c := &b.cfg
	c.eniBin, c.repo, c.out = absPath(c.eniBin), absPath(c.repo), absPath(c.out)
	if c.md != "" {
		c.md = absPath(c.md)
	}
	b.out = c.out
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return err
	}
	if fi, err := os.Stat(c.eniBin); err != nil || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is missing or not executable (make build)", c.eniBin)
	}
	b.sweepOldRuns()
	var err error
	if b.work, err = os.MkdirTemp(c.workRoot, fmt.Sprintf("eni-cni-bench-%d-", os.Getpid())); err != nil {
		return err
	}
	if b.rootNS, err = netns.Get(); err != nil {
		return fmt.Errorf("open own netns: %w", err)
	}
	b.rootLinks = linkNames(nil)
	b.logf("phase: ADD bursts on a dry EC2 pool (alone)")
	if err := b.phaseDry(ctx); err != nil {
		return err
	}
	b.collectMachine()
	when := b.res.Date
	if out, err := execCommandOutput(c.eniBin, "version"); err == nil {
		when += ", " + strings.TrimSpace(out)
	}
	when += "; " + strings.Join(b.res.Machine[:1], "")
	md := dryMarkdown(b.res.Dry, when)
	js, _ := json.MarshalIndent(b.res.Dry, "", "  ")
	if err := os.WriteFile(filepath.Join(b.out, "dry.json"), js, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.out, "dry.md"), []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Print("\n", md)
	for _, t := range dryTargets(b.res.Dry) {
		fmt.Printf("target: %s: %s (limit %s): %s\n", t.Target, t.Measured, t.Limit, t.Verdict)
	}
	if c.md != "" {
		if err := spliceDry(c.md, md); err != nil {
			return err
		}
		fmt.Printf("updated the dry-pool section of %s\n", c.md)
	}
	return nil
}

func execCommandOutput(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).Output()
	return string(out), err
}
