package integration

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/eni-cni/eni-cni/fault"
	"github.com/eni-cni/eni-cni/gc/crifake"
)

// TestDelStalledNeverUnroutesAReusedAddress is the kernel's form of the
// unit test of the same race (TestDelNeverUnroutesAReusedAddress): a DEL
// is stopped (SIGSTOP, as a loaded node stalls it) after its look-up and
// before its unroute; the runtime repeats the DEL, the cooldown passes and
// a new pod is given the address. When the stalled DEL goes on, the new
// pod's `to`/`from` rules, which the kernel finds by address alone, must
// still be there: CHECK and the audit of the node say so.
func TestDelStalledNeverUnroutesAReusedAddress(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := buildFaultBinary(t, root)
	n := newNode(t)
	// Two addresses: the dead pod's and the bystander's, so the new pod
	// can only be given the dead pod's.
	w := &walkWorld{
		bin: bin, node: n, cri: crifake.Start(t),
		nw:      newNetwork(t, n, "1.0.0", []string{"10.99.0.0/30"}, nil),
		exp:     expectation{alive: map[*pod]netip.Addr{}},
		results: map[*pod][]byte{},
	}
	dead, fresh := newPod(t, "dead"), newPod(t, "fresh")
	deadIP := w.mustAdd(t, dead)
	w.bystander = newPod(t, "bystander")
	w.mustAdd(t, w.bystander)

	stalled := startStopped(t, w, dead)
	// The runtime repeats the DEL. If the stalled DEL holds the state
	// lock, the repeat waits for it (lockTimeoutSeconds is 10 s).
	repeat := make(chan output, 1)
	go func() {
		o, err := w.exec(t, "", cniEnv("DEL", dead), w.nw.config(t))
		if err != nil {
			t.Error(err)
		}
		repeat <- o
	}()
	resumed := false
	select {
	case o := <-repeat:
		// It did not wait: the address is released while the stalled
		// DEL still means to unroute it. A new pod takes it.
		if o.exit != 0 {
			t.Fatalf("repeated DEL: %s", o)
		}
		w.forget(dead)
		w.nw.endCooldowns(t)
		if got := w.mustAdd(t, fresh); got != deadIP {
			t.Fatalf("the new pod got %s, not the dead pod's %s: the race was not staged", got, deadIP)
		}
	case <-time.After(2 * time.Second):
		resumed = true
		stalled.resume(t)
		if o := <-repeat; o.exit != 0 {
			t.Fatalf("repeated DEL after the stalled one: %s", o)
		}
		w.forget(dead)
		w.nw.endCooldowns(t)
		if got := w.mustAdd(t, fresh); got != deadIP {
			t.Fatalf("the new pod got %s, not the dead pod's %s: the race was not staged", got, deadIP)
		}
	}
	if !resumed {
		stalled.resume(t)
	}
	if o := stalled.wait(t); o.exit != 0 {
		t.Fatalf("the stalled DEL: %s", o)
	}
	if !hasRuleTo(t, w.node, deadIP) {
		t.Errorf("the rule `to %s` of the new pod is gone: the stalled DEL of the dead pod deleted it", deadIP)
	}
	w.audit(t, "after the stalled DEL", false)
}

// stoppedCall is a plugin call stopped at a crash point.
type stoppedCall struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan error
}

// startStopped starts DEL of p stopped at del:after-lookup and waits
// until it is stopped there.
func startStopped(t *testing.T, w *walkWorld, p *pod) *stoppedCall {
	t.Helper()
	c := &stoppedCall{done: make(chan error, 1)}
	c.cmd = exec.Command("nsenter", "--net="+w.node.path(), "--", w.bin)
	c.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), fault.Env + "=del:after-lookup", fault.ActionEnv + "=stop"}
	for k, v := range cniEnv("DEL", p) {
		c.cmd.Env = append(c.cmd.Env, k+"="+v)
	}
	c.cmd.Stdin = bytes.NewReader(w.nw.config(t))
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := c.cmd.Process.Pid
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		// Only if the test ended before resuming it: it is ours, by PID.
		if c.cmd.ProcessState == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGCONT)
			<-c.done
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		// The state follows the command name in parentheses.
		if i := bytes.LastIndexByte(b, ')'); err == nil && i > 0 && i+2 < len(b) && b[i+2] == 'T' {
			return c
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("DEL did not stop at del:after-lookup (stat %q, %v; stderr %q)", b, err, c.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *stoppedCall) resume(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(c.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// wait collects the resumed call's output.
func (c *stoppedCall) wait(t *testing.T) output {
	t.Helper()
	err := <-c.done
	o := output{stdout: c.stdout.Bytes(), stderr: c.stderr.Bytes()}
	if ee, ok := err.(*exec.ExitError); ok {
		o.exit = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o
}

// hasRuleTo: the node has a `to ip` rule.
func hasRuleTo(t *testing.T, n *node, ip netip.Addr) bool {
	t.Helper()
	rules, err := n.h.RuleList(netlink.FAMILY_V4)
	if err != nil {
		t.Fatalf("list rules: %v", err)
	}
	for _, r := range rules {
		if r.Dst != nil && r.Dst.IP.Equal(ip.AsSlice()) {
			return true
		}
	}
	return false
}

// TestDelStalledUnderTheLockIsNamed: DEL now unroutes under the state lock,
// so a DEL stuck there (netlink stalled, the process stopped) holds every
// other call of the store. They must wait no longer than
// lockTimeoutSeconds and fail with code 11 naming the lock file and the
// stuck DEL's PID, so that an operator can find it; nothing they do is
// half-made, and the DEL, once it goes on, finishes. STATUS, which reads
// without the lock, still answers.
func TestDelStalledUnderTheLockIsNamed(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := buildFaultBinary(t, root)
	n := newNode(t)
	w := &walkWorld{
		bin: bin, node: n, cri: crifake.Start(t),
		nw:      newNetwork(t, n, "1.1.0", []string{"10.99.0.0/29"}, map[string]any{"lockTimeoutSeconds": 2}),
		exp:     expectation{alive: map[*pod]netip.Addr{}},
		results: map[*pod][]byte{},
	}
	dead, waiter := newPod(t, "dead"), newPod(t, "waiter")
	w.mustAdd(t, dead)
	stalled := startStopped(t, w, dead)
	pid := stalled.cmd.Process.Pid
	// STATUS reads without the lock: the node stays Ready.
	if o := w.nw.run(t, cniEnv("STATUS", nil), w.nw.config(t)); o.exit != 0 {
		t.Errorf("STATUS behind a stalled DEL: %s", o)
	}
	o := w.add(t, waiter)
	wantCNIError(t, "ADD behind a stalled DEL", o, 11, "timed out waiting for the state lock",
		filepath.Join(w.nw.stateDir, "state.lock"), "held by pid "+strconv.Itoa(pid))
	stalled.resume(t)
	if o := stalled.wait(t); o.exit != 0 {
		t.Fatalf("the stalled DEL, resumed: %s", o)
	}
	w.forget(dead)
	w.audit(t, "after the stalled DEL and the ADD that timed out", false)
	w.mustAdd(t, waiter)
}
