package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/netconf"
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
	p.Mgr.Now = func() time.Time { return time.Now().Add(time.Duration(jump.Load())) }
	done := make(chan error, 1)
	go func() {
		_, err := p.add(context.Background(), att("jumped"))
		done <- err
	}()
	n.waitForDemand(alloc.Key{Network: "pods", ContainerID: "jumped", IfName: "eth0"})
	jump.Store(int64(time.Hour))
	// Anything that wakes the waiter makes it look (and save) again.
	if err := p.Mgr.Wake(); err != nil {
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
	if err := other.Mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		return st.DropDemand(k), nil
	}); err != nil {
		t.Fatal(err)
	}
	close(n.hold)
	released = true
	select {
	case err := <-done:
		if !errors.Is(err, provider.ErrWithdrawn) {
			t.Errorf("ADD whose attachment was deleted: %v, want %v", err, provider.ErrWithdrawn)
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

func (d *dyingWarm) StartWarm(ctx context.Context, cfg *netconf.Config, direct bool) (string, error) {
	if d.died.CompareAndSwap(false, true) {
		p, _ := d.n.plugin()
		err := p.Mgr.Update(ctx, func(st *alloc.State) (bool, error) {
			if st.EC2 == nil {
				st.EC2 = &section.EC2{}
			}
			st.EC2.PassStartedAt, st.EC2.PassPID = time.Now().UTC(), d.deadPID
			return true, nil
		})
		return "a pass that dies", err
	}
	return d.n.StartWarm(ctx, cfg, direct)
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
	src := p.provider.(provider.EC2)
	src.Warm = &dyingWarm{n: n, deadPID: gone.Process.Pid}
	p.provider = src
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

func (l *lostUnit) StartWarm(ctx context.Context, cfg *netconf.Config, direct bool) (string, error) {
	if !direct {
		l.viaSD.Add(1)
		return "systemd unit " + provider.WarmUnit, nil
	}
	l.direct.Add(1)
	return l.n.StartWarm(ctx, cfg, direct)
}

// TestDryPoolUnitStartRunsNothing: the start through systemd ran no pass;
// the next start (at the waiter's next look) is a process of its own, and
// the ADD gets its address within its wait.
func TestDryPoolUnitStartRunsNothing(t *testing.T) {
	n := newDryNode(t, "t3.medium", `,"addWaitSeconds":12`)
	p, _ := n.plugin()
	src := p.provider.(provider.EC2)
	lu := &lostUnit{n: n}
	src.Warm = lu
	p.provider = src
	if _, err := p.add(context.Background(), att("x")); err != nil {
		t.Fatalf("ADD after a start that ran nothing: %v", err)
	}
	if lu.viaSD.Load() != 1 || lu.direct.Load() != 1 {
		t.Errorf("starts through systemd %d, direct %d; want 1 and 1", lu.viaSD.Load(), lu.direct.Load())
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
	p.Mgr.Store = noInotify{p.Mgr.Store.(*alloc.DiskStore)}
	if _, err := p.add(context.Background(), att("x")); err != nil {
		t.Fatalf("ADD on a dry pool without inotify: %v", err)
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
	err := p.Mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		st.EC2 = &section.EC2{LastPass: &section.PassOutcome{At: time.Now().Add(time.Hour).UTC(), Result: section.PassThrottled}}
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
	n.fake.SetLatency("AssignPrivateIpAddresses", 3*time.Second)
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
	if err := p.Mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
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

func (r *reusedWarm) StartWarm(ctx context.Context, cfg *netconf.Config, direct bool) (string, error) {
	if r.died.CompareAndSwap(false, true) {
		marked := time.Now().UTC()
		time.Sleep(1500 * time.Millisecond)
		other := exec.Command("sleep", "60")
		if err := other.Start(); err != nil {
			return "", err
		}
		r.n.t.Cleanup(func() { other.Process.Kill(); other.Wait() })
		p, _ := r.n.plugin()
		err := p.Mgr.Update(ctx, func(st *alloc.State) (bool, error) {
			if st.EC2 == nil {
				st.EC2 = &section.EC2{}
			}
			st.EC2.PassStartedAt, st.EC2.PassPID = marked, other.Process.Pid
			return true, nil
		})
		return "a pass whose PID is reused", err
	}
	return r.n.StartWarm(ctx, cfg, direct)
}

// TestDryPoolWarmPIDReused: the pass an ADD started is killed after it
// marked itself running, and its PID now runs another process. That
// process began after the mark, so it is not the pass: the waiting ADD
// starts another pass and gets an address within its wait, instead of
// trusting the mark for passStall (a minute, beyond its whole wait).
func TestDryPoolWarmPIDReused(t *testing.T) {
	n := newDryNode(t, "t3.medium", `,"addWaitSeconds":12`)
	p, _ := n.plugin()
	src := p.provider.(provider.EC2)
	src.Warm = &reusedWarm{n: n}
	p.provider = src
	if _, err := p.add(context.Background(), att("survivor")); err != nil {
		t.Fatalf("ADD whose warm pass was killed and its PID reused: %v", err)
	}
}
