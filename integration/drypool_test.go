package integration

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/flock"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// The dry-pool tests run ADDs on an ec2 pool with no free address through
// the binary: each ADD records its demand, starts `eni-cni warm` as a
// detached process (no systemd here) and waits for it. The ADDs get the
// environment a runtime would pass, plus dummy credentials, which the warm
// they start inherits. The fake plays the hypervisor: the link of each ENI
// warm attaches appears on the node after the fake's link delay.

// dryEnv is the environment of the ADDs and DELs of the dry-pool tests.
func dryEnv(cmd string, p *pod) map[string]string {
	env := cniEnv(cmd, p)
	maps.Copy(env, ec2Creds)
	return env
}

// newDryNode is a node on the fake with the latency profile given (nil:
// none) whose ENI links appear on their own after the attach.
func newDryNode(t *testing.T, cfg ec2fake.Config) *ec2Node {
	t.Helper()
	en := newEC2Node(t, cfg)
	en.primaryLink(t)
	en.fake.OnLink(func(e ec2fake.ENI) { en.addENILink(t, e) })
	return en
}

// newDryNetwork is an ec2 network whose warm passes are waited for before
// the test's directories go (a pass started by an ADD outlives it).
func newDryNetwork(t *testing.T, en *ec2Node, pool map[string]any) *network {
	t.Helper()
	nw := newEC2Network(t, en, "1.0.0", pool, map[string]any{})
	nw.setConf(t, func(c map[string]any) { c["logFile"] = filepath.Join(filepath.Dir(nw.stateDir), "eni-cni.log") })
	t.Cleanup(func() { nw.waitWarmIdle(t) })
	return nw
}

// waitWarmIdle waits until no warm process an ADD started for this network
// runs (they run `eni-cni warm --config <stateDir>/warm.conf`) and none
// holds warm.lock.
func (nw *network) waitWarmIdle(t *testing.T) {
	t.Helper()
	conf := filepath.Join(nw.stateDir, "warm.conf")
	lock := flock.New(filepath.Join(nw.stateDir, "warm.lock"))
	deadline := time.Now().Add(90 * time.Second)
	for {
		free := true
		if _, err := os.Stat(lock.Path()); err == nil {
			if ok, err := lock.TryLock(); err == nil && ok {
				lock.Unlock()
			} else {
				free = false
			}
		}
		if free && !processRunsWith(conf) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("a warm pass of %s still runs after 90s", nw.stateDir)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processRunsWith reports whether a process has arg on its command line.
func processRunsWith(arg string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(arg+"\x00")) {
			return true
		}
	}
	return false
}

// dryState is the part of state.json these tests read.
type dryState struct {
	Allocations []struct {
		ContainerID string     `json:"containerID"`
		IP          netip.Addr `json:"ip"`
	} `json:"allocations"`
	Demands []struct {
		ContainerID string    `json:"containerID"`
		Until       time.Time `json:"until"`
		TriggeredAt time.Time `json:"triggeredAt"`
	} `json:"demands"`
	EC2 *struct {
		LastPass *struct {
			Result  string    `json:"result"`
			At      time.Time `json:"at"`
			Message string    `json:"message"`
		} `json:"lastPass"`
	} `json:"ec2"`
}

func (nw *network) dryState(t *testing.T) dryState {
	t.Helper()
	var st dryState
	if b := nw.stateBytes(t); b != nil {
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("state: %v", err)
		}
	}
	return st
}

// addAll runs ADD for every pod at once and returns the outputs in order.
func (nw *network) addAll(t *testing.T, pods []*pod) []output {
	t.Helper()
	outs := make([]output, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := runIn(t.Context(), nw.node.path(), dryEnv("ADD", p), nw.config(t), pluginBin)
			if err != nil {
				t.Error(err)
			}
			outs[i] = o
		}()
	}
	wg.Wait()
	return outs
}

// logLines returns the plugin log's lines containing s.
func (nw *network) logLines(t *testing.T, s string) []string {
	t.Helper()
	b, err := os.ReadFile(nw.conf["logFile"].(string))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// TestEC2DryPoolBurst: 12 pods at once on a fresh t3.medium (3 ENIs x 5
// addresses) all get addresses from one warm pass started by one of them,
// sized by their demand: one AssignPrivateIpAddresses on the primary ENI and
// a second ENI created and attached in the same pass, its link set up
// before its addresses were handed out. The warm pass leaves no demand.
func TestEC2DryPoolBurst(t *testing.T) {
	lat := ec2fake.RealisticLatency()
	lat.Calls = map[string]time.Duration{ec2fake.AllActions: 50 * time.Millisecond}
	lat.LinkDelay = 300 * time.Millisecond
	en := newDryNode(t, ec2fake.Config{Latency: &lat})
	nw := newDryNetwork(t, en, map[string]any{"warmIPTarget": 2})
	pods := newPods(t, 12)
	start := time.Now()
	outs := nw.addAll(t, pods)
	t.Logf("12 ADDs at once on a dry pool: last done after %s", time.Since(start).Round(time.Millisecond))
	seen := map[netip.Addr]bool{}
	eniOf := en.eniOf()
	var onSecondary int
	for i, o := range outs {
		if o.exit != 0 {
			t.Errorf("ADD %s: %s", pods[i].name, o)
			continue
		}
		var res struct {
			IPs []struct{ Address string } `json:"ips"`
		}
		if err := json.Unmarshal(o.stdout, &res); err != nil || len(res.IPs) != 1 {
			t.Fatalf("ADD %s result %s: %v", pods[i].name, o.stdout, err)
		}
		ip := netip.MustParsePrefix(res.IPs[0].Address).Addr()
		e, ok := eniOf[ip]
		if !ok || seen[ip] {
			t.Errorf("ADD %s got %s: assigned by EC2 %v, duplicate %v", pods[i].name, ip, ok, seen[ip])
		}
		seen[ip] = true
		if e.DeviceIndex > 0 {
			onSecondary++
			if r, ok := en.fromRule(t, ip); !ok || r.Table != e.DeviceIndex+1 {
				t.Errorf("pod %s on %s (device %d): from rule %v %v", pods[i].name, e.ID, e.DeviceIndex, r, ok)
			}
		}
	}
	if onSecondary != 7 {
		t.Errorf("%d pods on a second ENI, want 7 (5 on the primary)", onSecondary)
	}
	nw.waitWarmIdle(t)
	calls := en.fake.Calls()
	if calls["AssignPrivateIpAddresses"] != 1 || calls["CreateNetworkInterface"] != 2 || calls["AttachNetworkInterface"] != 2 {
		t.Errorf("EC2 calls %s, want one assign on the primary ENI and two ENIs created (12 + warmIPTarget 2 = 14)", formatCalls(calls))
	}
	st := nw.dryState(t)
	if len(st.Demands) != 0 || len(st.Allocations) != 12 {
		t.Errorf("state: %d allocations, demands %+v", len(st.Allocations), st.Demands)
	}
	if st.EC2 == nil || st.EC2.LastPass == nil || st.EC2.LastPass.Result != "done" {
		t.Errorf("last pass %+v, want done", st.EC2)
	}
	// ADDs that arrive after the pass's last look at the demand start
	// another; passes never overlap (TestEC2DryPoolOneWarmPass).
	started := nw.logLines(t, "warm=\"process ")
	if len(started) < 1 {
		t.Errorf("no ADD logged starting warm")
	}
	t.Logf("%d ADDs started a warm pass", len(started))
	for _, p := range pods {
		nw.del(t, p, p.path())
	}
	en.assertNoPods(t)
}

// TestEC2DryPoolWarmDenied: a warm pass that IAM denies makes the waiting
// ADD fail within its wait with code 11 and the reason; nothing is wired,
// allocated or demanded, and the next ADD fails at once without starting a
// pass.
func TestEC2DryPoolWarmDenied(t *testing.T) {
	en := newDryNode(t, ec2fake.Config{})
	en.fake.InjectFault("AssignPrivateIpAddresses", ec2fake.Fault{Code: "UnauthorizedOperation", Message: "You are not authorized to perform this operation."})
	nw := newDryNetwork(t, en, map[string]any{"addWaitSeconds": 20})
	p := newPod(t, "denied")
	start := time.Now()
	o := nw.run(t, dryEnv("ADD", p), nw.config(t))
	t.Logf("ADD failed after %s", time.Since(start).Round(time.Millisecond))
	wantCNIError(t, "ADD with warm denied", o, 11, "no free address", "denied by IAM", "UnauthorizedOperation")
	p.assertUnwired(t)
	st := nw.dryState(t)
	if len(st.Allocations) != 0 || len(st.Demands) != 0 {
		t.Errorf("state after the failed wait: %+v", st)
	}
	before := en.fake.Calls()["AssignPrivateIpAddresses"]
	q := newPod(t, "denied-2")
	o = nw.run(t, dryEnv("ADD", q), nw.config(t))
	wantCNIError(t, "ADD right after", o, 11, "denied by IAM")
	nw.waitWarmIdle(t)
	if after := en.fake.Calls()["AssignPrivateIpAddresses"]; after != before {
		t.Errorf("an ADD right after a denied pass started another (%d -> %d assign calls)", before, after)
	}
	en.assertNoPods(t)
}

// TestEC2DryPoolHardLimit: once every ENI the type allows is full, an ADD
// fails at once (no warm started, no demand) with code 11, saying the node
// is full and what kubelet's maxPods should be (t3.medium: 3 x 5 + 2 = 17).
func TestEC2DryPoolHardLimit(t *testing.T) {
	en := newDryNode(t, ec2fake.Config{})
	nw := newDryNetwork(t, en, map[string]any{"warmIPTarget": 50})
	o, _ := en.warmAttaching(t, nw) // all 3 ENIs, 15 addresses
	if o.exit != 0 {
		t.Fatalf("warm: %s", o)
	}
	pods := newPods(t, 15)
	for i, o := range nw.addAll(t, pods) {
		if o.exit != 0 {
			t.Fatalf("ADD %s: %s", pods[i].name, o)
		}
	}
	calls := en.fake.Calls()
	p := newPod(t, "one-too-many")
	o = nw.run(t, dryEnv("ADD", p), nw.config(t))
	wantCNIError(t, "ADD on a full node", o, 11, "node is full", "15 pod addresses", "maxPods to 17")
	p.assertUnwired(t)
	if d := callsDelta(calls, en.fake.Calls()); len(d) != 0 {
		t.Errorf("ADD on a full node made a warm pass call EC2: %s", formatCalls(d))
	}
	if st := nw.dryState(t); len(st.Demands) != 0 {
		t.Errorf("demand recorded on a full node: %+v", st.Demands)
	}
	for _, p := range pods {
		nw.del(t, p, "")
	}
}

// TestEC2DryPoolDELOfWaitingADD: DEL of the attachment while its ADD
// waits (the runtime gave up on it) withdraws the demand: the ADD stops
// with code 11, takes no address and wires nothing, and DEL succeeds.
func TestEC2DryPoolDELOfWaitingADD(t *testing.T) {
	en := newDryNode(t, ec2fake.Config{})
	en.fake.SetLatency("DescribeNetworkInterfaces", 3*time.Second) // the pass is slow to start
	nw := newDryNetwork(t, en, nil)
	p := newPod(t, "given-up")
	done := make(chan output, 1)
	go func() {
		o, err := runIn(t.Context(), nw.node.path(), dryEnv("ADD", p), nw.config(t), pluginBin)
		if err != nil {
			t.Error(err)
		}
		done <- o
	}()
	waitFor(t, "the ADD's demand", func() bool { return len(nw.dryState(t).Demands) == 1 })
	env := dryEnv("DEL", p)
	if o := nw.run(t, env, nw.config(t)); o.exit != 0 {
		t.Fatalf("DEL of the waiting attachment: %s", o)
	}
	select {
	case o := <-done:
		wantCNIError(t, "the waiting ADD after DEL", o, 11, "deleted (DEL) while its ADD waited")
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting ADD did not stop after DEL")
	}
	nw.waitWarmIdle(t)
	st := nw.dryState(t)
	if len(st.Allocations) != 0 || len(st.Demands) != 0 {
		t.Errorf("state: %+v", st)
	}
	p.assertUnwired(t)
	en.assertNoPods(t)
}

// TestEC2DryPoolKilledADD: an ADD killed with SIGKILL while it waits
// leaves only its demand, which expires: no allocation, no wiring; the
// pass it started still runs; the first save after the demand's deadline
// drops it.
func TestEC2DryPoolKilledADD(t *testing.T) {
	en := newDryNode(t, ec2fake.Config{})
	en.fake.SetLatency("AssignPrivateIpAddresses", time.Second)
	nw := newDryNetwork(t, en, map[string]any{"addWaitSeconds": 3})
	p := newPod(t, "killed")
	cmd := exec.Command("nsenter", "--net="+nw.node.path(), "--", pluginBin)
	for k, v := range dryEnv("ADD", p) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"))
	cmd.Stdin = bytes.NewReader(nw.config(t))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ADD's demand", func() bool { return len(nw.dryState(t).Demands) == 1 })
	// nsenter execs the plugin: this PID is the waiting ADD.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	st := nw.dryState(t)
	if len(st.Allocations) != 0 || len(st.Demands) != 1 || st.Demands[0].ContainerID != p.containerID {
		t.Fatalf("after SIGKILL: %+v, want only the demand", st)
	}
	p.assertUnwired(t)
	en.assertNoPods(t)
	until := st.Demands[0].Until
	// A pass (the one the ADD may have started before it was killed, or
	// the timer's) still sizes for the demand and reports to it.
	if o := nw.warm(t); o.exit != 0 {
		t.Fatalf("warm after the kill: %s", o)
	}
	waitFor(t, "the outcome of a pass for the killed ADD's demand", func() bool {
		st := nw.dryState(t)
		return st.EC2 != nil && st.EC2.LastPass != nil
	})
	if st := nw.dryState(t); st.EC2.LastPass.Result != "done" || len(st.Demands) != 1 {
		t.Errorf("after the pass started by the killed ADD: %+v", st)
	}
	nw.waitWarmIdle(t)
	time.Sleep(time.Until(until) + 100*time.Millisecond)
	q := newPod(t, "next")
	if o := nw.run(t, dryEnv("ADD", q), nw.config(t)); o.exit != 0 {
		t.Fatalf("ADD after the killed one: %s", o)
	}
	if st := nw.dryState(t); len(st.Demands) != 0 || len(st.Allocations) != 1 {
		t.Errorf("after the deadline and a save: %+v, want the expired demand gone", st)
	}
	nw.del(t, q, "")
}

// TestEC2DryPoolOneWarmPass: two warm passes started at once (two triggers,
// or a trigger and the timer) make one pass: the second finds warm.lock
// taken and exits 0; EC2 sees the calls of one pass.
func TestEC2DryPoolOneWarmPass(t *testing.T) {
	en := newDryNode(t, ec2fake.Config{})
	en.fake.SetLatency("DescribeNetworkInterfaces", 500*time.Millisecond)
	nw := newDryNetwork(t, en, nil)
	outs := make([]output, 2)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = nw.warm(t)
		}()
	}
	wg.Wait()
	skipped := 0
	for _, o := range outs {
		if o.exit != 0 {
			t.Errorf("warm: %s", o)
		}
		if bytes.Contains(o.stdout, []byte("another pass is running")) {
			skipped++
		}
	}
	if skipped != 1 {
		t.Errorf("%d of 2 concurrent passes skipped, want 1:\n%s\n%s", skipped, outs[0], outs[1])
	}
	if c := en.fake.Calls(); c["DescribeInstanceTypes"] != 0 || c["AssignPrivateIpAddresses"] != 1 {
		t.Errorf("EC2 calls %s, want those of one pass", formatCalls(c))
	}
}

// waitFor polls cond for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
