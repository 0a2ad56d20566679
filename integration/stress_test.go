package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/gc/crifake"
)

// TestStress (`make stress`, and a 60-second run in `make test`): one
// store on a simulated EC2 node, and for ENI_CNI_STRESS (a duration) many
// processes at once doing what a node's runtime and timers do: ADD, CHECK,
// DEL of pods as runtimes do them (a failed ADD repeated or cleaned up by
// DEL, a failed DEL repeated until it succeeds, some sandboxes vanishing
// without DEL), `gc` in a tight loop during the ADD bursts (pods are
// listed by the fake CRI runtime only once their ADD returned, as
// containerd does: the whereabouts reconciler race), `warm` and `list`,
// and SIGKILLs at random moments of any of them. After every round the
// invariants of audit_test.go are checked. It prints operations, kills,
// checks and violations, and fails on any violation.
func TestStress(t *testing.T) {
	d := os.Getenv("ENI_CNI_STRESS")
	if d == "" {
		t.Skip("set ENI_CNI_STRESS to a duration (make stress)")
	}
	total, err := time.ParseDuration(d)
	if err != nil || total <= 0 {
		t.Fatalf("ENI_CNI_STRESS=%q: not a positive duration", d)
	}
	s := newStress(t)
	start := time.Now()
	for round := 1; time.Since(start) < total; round++ {
		burst := min(stressBurst, total-time.Since(start))
		s.burst(burst)
		s.settle(round)
		t.Logf("round %d (%s): %s", round, time.Since(start).Round(time.Second), s.summary())
	}
	fmt.Printf("stress: %s in %s\n", s.summary(), time.Since(start).Round(time.Second))
	for _, v := range s.violations {
		t.Error(v)
	}
}

const (
	stressBurst    = 10 * time.Second
	stressRunners  = 4
	stressKillRate = 0.12                  // of all execs
	stressGrace    = 60                    // gc --grace: the minimum; forgotten pods are aged past it between rounds
	stressKillMax  = 40 * time.Millisecond // kills land up to this long after the exec
)

// pod states, as the runtime (the test) sees them.
const (
	podAlive     = iota // ADD returned; listed
	podAbandoned        // the runtime forgot it without DEL; its namespace stays
	podGone             // DEL succeeded; unlisted
)

type stressPod struct {
	*pod
	state       int
	ip          netip.Addr
	result      []byte
	abandonedAt time.Time
	// backdated: its allocation was aged past the grace after a round, so
	// the next round's gc passes (with kills) and settle must free it.
	backdated bool
}

type stress struct {
	t         *testing.T
	en        *ec2Node
	nw        *network
	cri       *crifake.Server
	bystander *stressPod

	mu         sync.Mutex
	pods       map[*stressPod]bool
	seq        int
	ops        map[string]int
	kills      int
	busy       int // calls refused for now (code 11): not violations
	checks     int
	violations []string
}

func newStress(t *testing.T) *stress {
	en := newEC2Node(t, ec2fake.Config{InstanceType: "m5.4xlarge"})
	en.primaryLink(t)
	nw := newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": 12}, nil)
	s := &stress{t: t, en: en, nw: nw, cri: crifake.Start(t), pods: map[*stressPod]bool{}, ops: map[string]int{}}
	s.warmUntilClean()
	// A pod that lives through the whole run: the listing is never empty
	// (gc would refuse it), and it must never be disturbed.
	s.bystander = s.newPod()
	if !s.add(s.bystander, false) {
		t.Fatal("the bystander pod could not be added")
	}
	return s
}

func (s *stress) newPod() *stressPod {
	s.mu.Lock()
	s.seq++
	name := fmt.Sprintf("s%05d", s.seq)
	s.mu.Unlock()
	p := &stressPod{pod: newPod(s.t, name), state: -1}
	s.mu.Lock()
	s.pods[p] = true
	s.mu.Unlock()
	return p
}

// ---------------------------------------------------------------- running the binary

// run execs the plugin in the node namespace; with kill, it may SIGKILL it
// at a random moment. Returns the output, and whether it was killed.
func (s *stress) run(what string, kill bool, env map[string]string, stdin []byte, args ...string) (output, bool) {
	cmd := exec.Command("nsenter", append([]string{"--net=" + s.en.path(), "--", pluginBin}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = strings.NewReader(string(stdin))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		s.violation("start %s: %v", what, err)
		return output{exit: -1}, false
	}
	var timer *time.Timer
	if kill && rand.Float64() < stressKillRate {
		// nsenter execs the plugin (no fork for a net namespace): this PID
		// is the plugin, a process this test started.
		timer = time.AfterFunc(rand.N(stressKillMax), func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		err = <-done
		s.violation("%s hung for 2 minutes", what)
	}
	if timer != nil {
		timer.Stop()
	}
	o := output{stdout: []byte(stdout.String()), stderr: []byte(stderr.String())}
	var ee *exec.ExitError
	killed := false
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			killed = ws.Signal() == syscall.SIGKILL
			o.exit = -1
		} else {
			o.exit = ee.ExitCode()
		}
	} else if err != nil {
		o.exit = -1
	}
	s.mu.Lock()
	s.ops[what]++
	if killed {
		s.kills++
	}
	s.mu.Unlock()
	return o, killed
}

func (s *stress) violation(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

// cniCode returns the CNI error code of a failed call (0 if none parses).
func cniCode(o output) uint {
	var e types.Error
	if json.Unmarshal(o.stdout, &e) != nil {
		return 0
	}
	return e.Code
}

// ---------------------------------------------------------------- the runtime's part

// add runs ADD as a runtime does: a failed or killed ADD is repeated a
// couple of times, then given up with DEL (until DEL succeeds). Returns
// whether the pod runs.
func (s *stress) add(p *stressPod, kill bool) bool {
	conf := s.nw.config(s.t)
	for range 3 {
		o, killed := s.run("ADD", kill, cniEnv("ADD", p.pod), conf)
		if !killed && o.exit == 0 {
			res, err := current.NewResult(o.stdout)
			if err != nil {
				s.violation("ADD %s: exit 0 with a bad result: %v %q", p.name, err, o.stdout)
				break
			}
			p.ip = resultIP(s.t, res.(*current.Result))
			p.result = o.stdout
			s.setState(p, podAlive)
			return true
		}
		if !killed && cniCode(o) == types.ErrTryAgainLater {
			s.mu.Lock()
			s.busy++
			s.mu.Unlock()
		}
	}
	s.del(p, kill)
	return false
}

// del runs DEL until it succeeds, as kubelet retries StopPodSandbox.
func (s *stress) del(p *stressPod, kill bool) {
	conf := s.nw.config(s.t)
	for i := 0; ; i++ {
		o, killed := s.run("DEL", kill && i < 5, cniEnv("DEL", p.pod), conf)
		if !killed && o.exit == 0 {
			break
		}
		if i == 20 {
			s.violation("DEL %s failed 20 times, last: %s", p.name, o)
			break
		}
	}
	s.setState(p, podGone)
}

// check runs CHECK of a running pod; a failure (other than a kill or a
// busy store) is a violation, returned as "" when there is none.
func (s *stress) check(p *stressPod, kill bool) string {
	conf := s.nw.config(s.t, func(c map[string]any) { c["prevResult"] = json.RawMessage(p.result) })
	o, killed := s.run("CHECK", kill, cniEnv("CHECK", p.pod), conf)
	switch {
	case killed, o.exit == 0:
	case cniCode(o) == types.ErrTryAgainLater:
		s.mu.Lock()
		s.busy++
		s.mu.Unlock()
	default:
		return fmt.Sprintf("CHECK of running pod %s (%s): %s", p.name, p.ip, o)
	}
	return ""
}

// setState records p's state and lists the running pods with the fake
// runtime: a pod appears once its ADD returned, and leaves when DEL
// succeeded or the runtime forgot it.
func (s *stress) setState(p *stressPod, state int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.state = state
	if state == podAbandoned {
		p.abandonedAt = time.Now()
	}
	var sbs []*runtimeapi.PodSandbox
	for q := range s.pods {
		if q.state == podAlive {
			sbs = append(sbs, sandboxOf(q.pod, true))
		}
	}
	s.cri.SetSandboxes(sbs...)
}

// runner is one stream of pods: it keeps up to three running, and at
// random starts one, checks one, deletes one or forgets one.
func (s *stress) runner(until time.Time, alive []*stressPod) {
	for time.Now().Before(until) {
		switch r := rand.IntN(10); {
		case r < 4 && len(alive) < 3:
			p := s.newPod()
			if s.add(p, true) {
				alive = append(alive, p)
			}
		case r < 6 && len(alive) > 0:
			if v := s.check(alive[rand.IntN(len(alive))], true); v != "" {
				s.violation("%s", v)
			}
		case r < 9 && len(alive) > 0:
			i := rand.IntN(len(alive))
			s.del(alive[i], true)
			alive = append(alive[:i], alive[i+1:]...)
		case r == 9 && len(alive) > 0 && rand.IntN(3) == 0:
			i := rand.IntN(len(alive))
			s.setState(alive[i], podAbandoned) // the sandbox vanished; gc's job
			alive = append(alive[:i], alive[i+1:]...)
		default:
			s.run("list", true, nil, nil, "list", "--json", "--config", s.nw.confFile)
		}
	}
}

// burst runs the runners, gc in a tight loop, warm and the hypervisor for
// d, then waits for every call to end.
func (s *stress) burst(d time.Duration) {
	until := time.Now().Add(d)
	var wg sync.WaitGroup
	alive := s.runnerPods()
	for i := range stressRunners {
		wg.Go(func() { s.runner(until, alive[i]) })
	}
	wg.Go(func() {
		for time.Now().Before(until) {
			s.run("gc", true, nil, nil, "gc", "--config", s.nw.confFile, "--cri-endpoint", s.cri.Endpoint(), "--grace", fmt.Sprintf("%ds", stressGrace))
		}
	})
	wg.Go(func() {
		for time.Now().Before(until) {
			s.run("warm", true, ec2Creds, nil, "warm", "--config", s.nw.confFile)
			time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
		}
	})
	stop := make(chan struct{})
	hyper := make(chan struct{})
	go func() { defer close(hyper); s.hypervisor(stop) }()
	wg.Wait()
	close(stop)
	<-hyper
}

// runnerPods deals the running pods (but the bystander) out to the
// runners of the next round.
func (s *stress) runnerPods() [][]*stressPod {
	out := make([][]*stressPod, stressRunners)
	i := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.pods {
		if p.state == podAlive && p != s.bystander {
			out[i%stressRunners] = append(out[i%stressRunners], p)
			i++
		}
	}
	return out
}

// hypervisor gives each ENI the fake attaches its link on the node.
func (s *stress) hypervisor(stop chan struct{}) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		s.en.linkAttached(s.t)
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// warmUntilClean runs warm without kills until a pass succeeds.
func (s *stress) warmUntilClean() {
	stop := make(chan struct{})
	hyper := make(chan struct{})
	go func() { defer close(hyper); s.hypervisor(stop) }()
	defer func() { close(stop); <-hyper }()
	for i := 0; ; i++ {
		o, _ := s.run("warm", false, ec2Creds, nil, "warm", "--config", s.nw.confFile)
		if o.exit == 0 {
			return
		}
		if i == 5 {
			s.violation("warm failed 5 times without kills: %s", o)
			return
		}
	}
}

// ---------------------------------------------------------------- after each round

// settle runs what the timers would (gc, then warm, without kills) and
// checks every invariant.
func (s *stress) settle(round int) {
	if o, _ := s.run("gc", false, nil, nil, "gc", "--config", s.nw.confFile, "--cri-endpoint", s.cri.Endpoint(), "--grace", fmt.Sprintf("%ds", stressGrace)); o.exit != 0 {
		s.violation("round %d: gc without kills failed: %s", round, o)
	}
	s.warmUntilClean()
	if s.pendingWithoutID() {
		// A warm killed between CreateNetworkInterface's reply and its
		// record: by design the ENI it may have created is looked for
		// only once older than the leak sweep's age (5 min), so that no
		// pass still on its way to attaching one loses it. Let that time
		// pass, as the fault walk does; the next pass must then delete
		// the leaked ENI and drop the record (auditEC2 checks both).
		agePending(s.t, s.nw, s.en, 10*time.Minute)
		s.warmUntilClean()
	}
	e := expectation{alive: map[*pod]netip.Addr{}, eniLinks: s.en.linkNames(), noTemp: true}
	var alive, gone, abandoned []*stressPod
	s.mu.Lock()
	for p := range s.pods {
		switch p.state {
		case podAlive:
			e.alive[p.pod] = p.ip
			alive = append(alive, p)
		case podGone:
			e.gone = append(e.gone, p.pod)
			gone = append(gone, p)
		case podAbandoned:
			abandoned = append(abandoned, p)
		}
	}
	s.mu.Unlock()
	f := auditNetwork(s.t, pluginBin, s.nw, e)
	auditEC2(s.t, s.nw, s.en.fake, f)
	s.auditAbandoned(f, abandoned)
	for _, p := range alive {
		v := s.check(p, false)
		f.check(v == "", "%s", v)
	}
	s.mu.Lock()
	s.checks += f.checks
	for _, v := range f.violations {
		s.violations = append(s.violations, fmt.Sprintf("round %d: %s", round, v))
	}
	s.mu.Unlock()
	s.backdateAbandoned()
	// Deleted pods are done with: their namespaces go, as a runtime's do.
	for _, p := range gone {
		_ = p.remove()
		s.mu.Lock()
		delete(s.pods, p)
		s.mu.Unlock()
	}
}

// pendingWithoutID reports a pending ENI record without the ENI's ID in
// the store.
func (s *stress) pendingWithoutID() bool {
	var st struct {
		EC2 struct {
			Pending []struct {
				ID string `json:"id"`
			} `json:"pending"`
		} `json:"ec2"`
	}
	if err := json.Unmarshal(s.nw.stateBytes(s.t), &st); err != nil {
		s.violation("read the store: %v", err)
		return false
	}
	for _, p := range st.EC2.Pending {
		if p.ID == "" {
			return true
		}
	}
	return false
}

// auditAbandoned: a sandbox the runtime forgot is freed by gc once its
// allocation is older than the grace; until then it stays wired (the
// host audit checks that). Freed ones count as deleted from then on.
func (s *stress) auditAbandoned(f *findings, abandoned []*stressPod) {
	var st diskState
	if err := json.Unmarshal(s.nw.stateBytes(s.t), &st); err != nil {
		f.check(false, "state: %v", err)
		return
	}
	held := map[string]bool{}
	for _, a := range st.Allocations {
		held[a.ContainerID] = true
	}
	for _, p := range abandoned {
		if !held[p.containerID] {
			l := p.links(s.t)
			f.check(len(l) == 1 && l[0] == "lo", "forgotten pod %s was freed but has links %v", p.name, l)
			s.setState(p, podGone)
			continue
		}
		// Aged past the grace after the previous round: that round's gc
		// passes or this settle's gc must have freed it.
		f.check(!p.backdated, "forgotten pod %s (%s) still holds its address %s after the grace", p.name, short(p.containerID), p.ip)
	}
}

// backdateAbandoned ages the allocations of the pods forgotten in this
// round past the grace, so the next round's gc passes free them, killed at
// random as any other call. (The grace cannot be set below its minimum;
// the store's clocks are moved instead, between rounds, when no plugin
// process runs.)
func (s *stress) backdateAbandoned() {
	var st diskState
	if err := json.Unmarshal(s.nw.stateBytes(s.t), &st); err != nil {
		s.violation("state: %v", err)
		return
	}
	held := map[string]bool{}
	for _, a := range st.Allocations {
		held[a.ContainerID] = true
	}
	var aged []*pod
	s.mu.Lock()
	for p := range s.pods {
		if p.state == podAbandoned && !p.backdated && held[p.containerID] {
			p.backdated = true
			aged = append(aged, p.pod)
		}
	}
	s.mu.Unlock()
	if len(aged) > 0 {
		s.nw.backdate(s.t, 2*time.Duration(stressGrace)*time.Second, aged...)
	}
}

func (s *stress) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	verbs := make([]string, 0, len(s.ops))
	n := 0
	for v, c := range s.ops {
		verbs = append(verbs, fmt.Sprintf("%s %d", v, c))
		n += c
	}
	sort.Strings(verbs)
	return fmt.Sprintf("%d operations (%s), %d kills, %d refused for now (code 11), %d checks, %d violations",
		n, strings.Join(verbs, ", "), s.kills, s.busy, s.checks, len(s.violations))
}
