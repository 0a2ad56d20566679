package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/pool"
)

// waitForDemand blocks until k's demand is in the store.
func (n *dryNode) waitForDemand(k alloc.Key) {
	n.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.state().FindDemand(k) < 0 {
		if time.Now().After(deadline) {
			n.t.Fatalf("no demand of %v recorded", k)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDryPoolWaiterSurvivesWallClockJump: the wall clock jumps forward
// (NTP stepping a node that booted with a wrong clock) while an ADD waits:
// its demand, whose deadline is a wall-clock time in the store, is
// expired by the next save. The ADD's own wait is on the monotonic clock:
// it must not take that for a DEL of its attachment, and gets the address
// warm adds.
func TestDryPoolWaiterSurvivesWallClockJump(t *testing.T) {
	n := newDryNode(t, "t3.medium", "")
	n.hold = make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(n.hold)
		}
	}()
	p, _ := n.plugin()
	var jump atomic.Int64
	p.mgr.Now = func() time.Time { return time.Now().Add(time.Duration(jump.Load())) }
	done := make(chan error, 1)
	go func() {
		_, err := p.add(context.Background(), att("jumped"))
		done <- err
	}()
	n.waitForDemand(alloc.Key{Network: "pods", ContainerID: "jumped", IfName: "eth0"})
	jump.Store(int64(time.Hour))
	// Anything that wakes the waiter makes it look (and save) again.
	if err := p.mgr.Wake(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	close(n.hold)
	released = true
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ADD after a forward jump of the wall clock: %v, want the address warm added", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ADD did not end")
	}
}

// TestDryPoolDELThenAddressesArrive: DEL withdraws a waiting ADD's demand,
// and warm's addresses arrive before the ADD looks again. The ADD must
// stop (its sandbox is gone), not take an address and wire a dead sandbox.
func TestDryPoolDELThenAddressesArrive(t *testing.T) {
	n := newDryNode(t, "t3.medium", "")
	n.hold = make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(n.hold)
		}
	}()
	p, w := n.plugin()
	done := make(chan error, 1)
	go func() {
		_, err := p.add(context.Background(), att("gone"))
		done <- err
	}()
	k := alloc.Key{Network: "pods", ContainerID: "gone", IfName: "eth0"}
	n.waitForDemand(k)
	// DEL's withdrawal, without its wake-up reaching the waiter first:
	// the next thing the waiter sees is warm's wake-up with addresses.
	other, _ := n.plugin()
	if err := other.mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		return st.DropDemand(k), nil
	}); err != nil {
		t.Fatal(err)
	}
	close(n.hold)
	released = true
	select {
	case err := <-done:
		if !errors.Is(err, errWithdrawn) {
			t.Errorf("ADD whose attachment was deleted: %v, want %v", err, errWithdrawn)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ADD did not end")
	}
	n.wg.Wait()
	if st := n.state(); st.Find(k) >= 0 || len(w.wired) != 0 {
		t.Errorf("the deleted attachment got an address: allocations %+v, wired %v", st.Allocations, w.wired)
	}
}

// dyingWarm's first start is a pass that marks itself started for the
// waiting ADDs and is then killed (SIGKILL, OOM): it never records an
// outcome nor wakes anyone. Later starts run real passes.
type dyingWarm struct {
	n       *dryNode
	deadPID int
	died    atomic.Bool
}

func (d *dyingWarm) startWarm(ctx context.Context, cfg *config, direct bool) (string, error) {
	if d.died.CompareAndSwap(false, true) {
		p, _ := d.n.plugin()
		err := p.mgr.Update(ctx, func(st *alloc.State) (bool, error) {
			if st.EC2 == nil {
				st.EC2 = &pool.EC2{}
			}
			st.EC2.PassStartedAt, st.EC2.PassPID = time.Now().UTC(), d.deadPID
			return true, nil
		})
		return "a pass that dies", err
	}
	return d.n.startWarm(ctx, cfg, direct)
}

// TestDryPoolWarmKilledMidPass: the pass an ADD started is killed after it
// marked itself running. The waiting ADD must not take the mark for a
// running pass for a minute (passStall, beyond its whole wait): it sees
// the pass's process is gone at its next look, starts another, and gets an
// address within its wait.
func TestDryPoolWarmKilledMidPass(t *testing.T) {
	n := newDryNode(t, "t3.medium", `,"addWaitSeconds":12`)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	p, _ := n.plugin()
	src := p.source.(ec2Source)
	src.warm = &dyingWarm{n: n, deadPID: gone.Process.Pid}
	p.source = src
	if _, err := p.add(context.Background(), att("survivor")); err != nil {
		t.Fatalf("ADD whose warm pass was killed: %v", err)
	}
}

// lostUnit is systemd whose unit accepts every start and runs nothing (its
// start limit hit, its ConditionPathExists failing): `systemctl start
// --no-block` succeeds all the same. Only a process of its own runs a pass.
type lostUnit struct {
	n      *dryNode
	viaSD  atomic.Int32
	direct atomic.Int32
}

func (l *lostUnit) startWarm(ctx context.Context, cfg *config, direct bool) (string, error) {
	if !direct {
		l.viaSD.Add(1)
		return "systemd unit " + warmUnit, nil
	}
	l.direct.Add(1)
	return l.n.startWarm(ctx, cfg, direct)
}

// TestDryPoolUnitStartRunsNothing: the start through systemd ran no pass;
// the next start (at the waiter's next look) is a process of its own, and
// the ADD gets its address within its wait.
func TestDryPoolUnitStartRunsNothing(t *testing.T) {
	n := newDryNode(t, "t3.medium", `,"addWaitSeconds":12`)
	p, _ := n.plugin()
	src := p.source.(ec2Source)
	lu := &lostUnit{n: n}
	src.warm = lu
	p.source = src
	if _, err := p.add(context.Background(), att("x")); err != nil {
		t.Fatalf("ADD after a start that ran nothing: %v", err)
	}
	if lu.viaSD.Load() != 1 || lu.direct.Load() != 1 {
		t.Errorf("starts through systemd %d, direct %d; want 1 and 1", lu.viaSD.Load(), lu.direct.Load())
	}
}

// TestNodeWarmDirect: direct starts bypass an installed, serving unit.
func TestNodeWarmDirect(t *testing.T) {
	root := t.TempDir()
	called := filepath.Join(root, "systemctl-called")
	systemctl := filepath.Join(root, "systemctl")
	if err := os.WriteFile(systemctl, []byte("#!/bin/sh\necho \"$@\" >> "+called+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	n := nodeWarm{systemdRun: filepath.Join(root, "run"), unitDirs: []string{filepath.Join(root, "units")},
		confDir: filepath.Join(root, "net.d"), systemctl: systemctl}
	var spawned int
	n.spawn = func(*config) (string, error) { spawned++; return "process 1", nil }
	for _, d := range []string{n.systemdRun, n.unitDirs[0], n.confDir} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(n.unitDirs[0], warmUnit), []byte("[Service]\n"), 0o644)
	os.WriteFile(filepath.Join(n.confDir, "05-pods.conflist"), []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni"}]}`), 0o644)
	cfg, err := parseConfig([]byte(`{"cniVersion":"1.0.0","name":"pods","stateDir":"/var/lib/eni-cni"}`))
	if err != nil {
		t.Fatal(err)
	}
	if how, err := n.startWarm(context.Background(), cfg, false); err != nil || !strings.Contains(how, "systemd") || spawned != 0 {
		t.Fatalf("first start: %q %v, %d spawned", how, err, spawned)
	}
	if how, err := n.startWarm(context.Background(), cfg, true); err != nil || spawned != 1 || !strings.Contains(how, "process") {
		t.Fatalf("direct start: %q %v, %d spawned", how, err, spawned)
	}
	if b, _ := os.ReadFile(called); strings.Count(string(b), "\n") != 1 {
		t.Errorf("systemctl called %q, want once", b)
	}
}

// noInotify is the node's store when inotify is out of instances
// (fs.inotify.max_user_instances, 128 by default, is shared by every root
// process: kubelet, containerd, systemd).
type noInotify struct{ *alloc.DiskStore }

func (noInotify) Watch() (alloc.Watcher, error) {
	return nil, fmt.Errorf("inotify: %w", unix.EMFILE)
}

// TestDryPoolWaitsWithoutInotify: a waiting ADD that cannot watch the
// state directory still waits, looking again on its own, instead of
// failing for a wake-up mechanism.
func TestDryPoolWaitsWithoutInotify(t *testing.T) {
	n := newDryNode(t, "t3.medium", `,"addWaitSeconds":15`)
	p, _ := n.plugin()
	p.mgr.Store = noInotify{p.mgr.Store.(*alloc.DiskStore)}
	if _, err := p.add(context.Background(), att("x")); err != nil {
		t.Fatalf("ADD on a dry pool without inotify: %v", err)
	}
}

// TestProcessAliveZombie: a pass killed but not yet reaped by its parent
// (the ADD that started it) is not running.
func TestProcessAliveZombie(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	var s ec2Source
	if !s.processAlive(pid) {
		t.Error("a running process is not alive")
	}
	cmd.Process.Kill()
	deadline := time.Now().Add(5 * time.Second)
	for !zombie(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s.processAlive(pid) {
		t.Error("a killed, unreaped process is alive")
	}
	cmd.Wait()
	if s.processAlive(pid) {
		t.Error("a reaped process is alive")
	}
}

// TestDryPoolFailedPassFromTheFuture: the wall clock was stepped back
// after a warm pass failed, so its outcome is stamped "later" than now.
// It is not a fresh failure: the ADD starts a pass and gets its address
// rather than failing at once, for as long as the step, with the old
// reason.
func TestDryPoolFailedPassFromTheFuture(t *testing.T) {
	n := newDryNode(t, "t3.medium", `,"addWaitSeconds":15`)
	p, _ := n.plugin()
	err := p.mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		st.EC2 = &pool.EC2{LastPass: &pool.PassOutcome{At: time.Now().Add(time.Hour).UTC(), Result: pool.PassThrottled}}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.add(context.Background(), att("x")); err != nil {
		t.Fatalf("ADD after a backward clock step: %v", err)
	}
}

// TestDryPoolWaitEndsWhilePassRuns: the wait ends while the pass started
// for it still runs (EC2 slow, an ENI link slow to appear): the message
// says so, and which process, rather than that no pass finished.
func TestDryPoolWaitEndsWhilePassRuns(t *testing.T) {
	n := newDryNode(t, "t3.medium", `,"addWaitSeconds":1`)
	n.fake.SetLatency("DescribeInstanceTypes", 3*time.Second)
	p, _ := n.plugin()
	_, err := p.add(context.Background(), att("slow"))
	ce := toCNIError(err)
	want := fmt.Sprintf("(pid %d) still runs", os.Getpid())
	if ce == nil || !strings.Contains(ce.Msg, want) {
		t.Errorf("error %v, want it to say %q", err, want)
	}
}

// TestDryPoolOneDemandPerAttachment: an ADD of an attachment whose earlier
// ADD was killed while waiting (its demand still in force) replaces that
// demand rather than adding a second: warm sizes for one pod, and nothing
// of either is left once the ADD has its address.
func TestDryPoolOneDemandPerAttachment(t *testing.T) {
	n := newDryNode(t, "t3.medium", `,"addWaitSeconds":15`)
	p, _ := n.plugin()
	k := alloc.Key{Network: "pods", ContainerID: "again", IfName: "eth0"}
	now := time.Now().UTC()
	if err := p.mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		st.Demands = append(st.Demands, alloc.Demand{Key: k, Since: now, Until: now.Add(15 * time.Second)})
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.add(context.Background(), att("again")); err != nil {
		t.Fatal(err)
	}
	if d := n.state().Demands; len(d) != 0 {
		t.Errorf("demands left after the ADD got its address: %+v", d)
	}
}

// reusedWarm's first start is a pass that marks itself started for the
// waiting ADDs and is killed; by the time the waiters look, its PID has
// been given to another process (PIDs wrap: pid_max is 32768 on many
// kernels, and a busy node forks thousands a minute). Later starts run
// real passes.
type reusedWarm struct {
	n    *dryNode
	died atomic.Bool
}

func (r *reusedWarm) startWarm(ctx context.Context, cfg *config, direct bool) (string, error) {
	if r.died.CompareAndSwap(false, true) {
		marked := time.Now().UTC()
		time.Sleep(1500 * time.Millisecond)
		other := exec.Command("sleep", "60")
		if err := other.Start(); err != nil {
			return "", err
		}
		r.n.t.Cleanup(func() { other.Process.Kill(); other.Wait() })
		p, _ := r.n.plugin()
		err := p.mgr.Update(ctx, func(st *alloc.State) (bool, error) {
			if st.EC2 == nil {
				st.EC2 = &pool.EC2{}
			}
			st.EC2.PassStartedAt, st.EC2.PassPID = marked, other.Process.Pid
			return true, nil
		})
		return "a pass whose PID is reused", err
	}
	return r.n.startWarm(ctx, cfg, direct)
}

// TestDryPoolWarmPIDReused: the pass an ADD started is killed after it
// marked itself running, and its PID now runs another process. That
// process began after the mark, so it is not the pass: the waiting ADD
// starts another pass and gets an address within its wait, instead of
// trusting the mark for passStall (a minute, beyond its whole wait).
func TestDryPoolWarmPIDReused(t *testing.T) {
	n := newDryNode(t, "t3.medium", `,"addWaitSeconds":12`)
	p, _ := n.plugin()
	src := p.source.(ec2Source)
	src.warm = &reusedWarm{n: n}
	p.source = src
	if _, err := p.add(context.Background(), att("survivor")); err != nil {
		t.Fatalf("ADD whose warm pass was killed and its PID reused: %v", err)
	}
}

// TestProcessAge: a process's age from /proc, on the boot clock: a process
// started now is younger than this test's own.
func TestProcessAge(t *testing.T) {
	self, ok := processAge(os.Getpid())
	if !ok || self < 0 {
		t.Fatalf("own age: %s %v", self, ok)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	young, ok := processAge(cmd.Process.Pid)
	if !ok || young < -passStartSlack || young > 5*time.Second || young > self+passStartSlack {
		t.Errorf("a process started now is %s old (ok %v); this test's is %s", young, ok, self)
	}
	if _, ok := processAge(1 << 30); ok {
		t.Error("age of a process that does not exist")
	}
}
