package provider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/netconf"
)

func TestNeedTrigger(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	k := func(c string) alloc.Key { return alloc.Key{Network: "pods", ContainerID: c, IfName: "eth0"} }
	demand := func(trig time.Duration) alloc.Demand {
		d := alloc.Demand{Key: k("a"), Since: now.Add(-time.Second), Until: now.Add(20 * time.Second)}
		if trig != 0 {
			d.TriggeredAt = now.Add(trig)
		}
		return d
	}
	for _, tc := range []struct {
		name string
		ds   []alloc.Demand
		src  section.EC2
		want bool
	}{
		{"nobody started one", []alloc.Demand{demand(0)}, section.EC2{}, true},
		{"started 1s ago, not running yet", []alloc.Demand{demand(-time.Second)}, section.EC2{}, false},
		{"started 6s ago, never ran", []alloc.Demand{demand(-6 * time.Second)}, section.EC2{}, true},
		{"running", []alloc.Demand{demand(-8 * time.Second)}, section.EC2{PassStartedAt: now.Add(-7 * time.Second)}, false},
		{"running for too long", []alloc.Demand{demand(-90 * time.Second)}, section.EC2{PassStartedAt: now.Add(-89 * time.Second)}, true},
		{"running, its process alive", []alloc.Demand{demand(-8 * time.Second)}, section.EC2{PassStartedAt: now.Add(-7 * time.Second), PassPID: 100}, false},
		{"its process died", []alloc.Demand{demand(-2 * time.Second)}, section.EC2{PassStartedAt: now.Add(-time.Second), PassPID: 666}, true},
		{"a died pass before the last start", []alloc.Demand{demand(-time.Second)}, section.EC2{PassStartedAt: now.Add(-2 * time.Second), PassPID: 666}, false},
		{"a pass ended since", []alloc.Demand{demand(-3 * time.Second)}, section.EC2{LastPass: &section.PassOutcome{At: now.Add(-time.Second)}}, true},
		{"the pass ended before the start", []alloc.Demand{demand(-1 * time.Second)}, section.EC2{LastPass: &section.PassOutcome{At: now.Add(-2 * time.Second)}}, false},
		{"a throttled pass ended since, its pause runs", []alloc.Demand{demand(-3 * time.Second)}, section.EC2{LastPass: &section.PassOutcome{At: now.Add(-time.Second), Result: section.PassThrottled, Streak: 1}}, false},
		{"a throttled pass ended since, its pause is over", []alloc.Demand{demand(-9 * time.Second)}, section.EC2{LastPass: &section.PassOutcome{At: now.Add(-4 * time.Second), Result: section.PassThrottled, Streak: 2}}, true},
		{"the starter's demand expired", []alloc.Demand{{Key: k("a"), Until: now.Add(-time.Second), TriggeredAt: now.Add(-2 * time.Second)}, demand(0)}, section.EC2{}, true},
	} {
		st := &alloc.State{Demands: tc.ds}
		if got := needTrigger(st, &tc.src, now, func(pid int) bool { return pid != 666 }); got != tc.want {
			t.Errorf("%s: needTrigger = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestThrottledPassFailsNoWaiter: a throttled pass fails neither the ADDs
// that waited on it nor one arriving right after, however often it
// repeats; the next pass for them starts after a pause that doubles with
// each throttled pass in a row, spread over nodes by instance ID. A denied
// pass still fails them at once.
func TestThrottledPassFailsNoWaiter(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	start, until := now.Add(-10*time.Second), now.Add(15*time.Second)
	s := EC2{Cfg: &netconf.Config{}}
	for streak := 1; streak <= 10; streak++ {
		sec := &section.EC2{InstanceID: "i-0abc", LastPass: &section.PassOutcome{At: now.Add(-time.Second), Result: section.PassThrottled, Streak: streak}}
		for _, first := range []bool{true, false} {
			if why := s.hopeless(&alloc.State{}, sec, now, start, until, first); why != "" {
				t.Errorf("streak %d, first %v: failed: %s", streak, first, why)
			}
		}
		d := min(throttledCap, throttledBase<<(streak-1))
		if p := throttledPause(sec); p < d/2 || p > d {
			t.Errorf("streak %d: pause %s, want in [%s, %s]", streak, p, d/2, d)
		}
	}
	spread := map[time.Duration]bool{}
	for i := range 20 {
		sec := &section.EC2{InstanceID: fmt.Sprintf("i-%04d", i), LastPass: &section.PassOutcome{Result: section.PassThrottled, Streak: 3}}
		spread[throttledPause(sec)] = true
	}
	if len(spread) < 10 {
		t.Errorf("20 nodes throttled together pause %d distinct times", len(spread))
	}
	denied := &section.EC2{LastPass: &section.PassOutcome{At: now.Add(-time.Second), Result: section.PassDenied}}
	if s.hopeless(&alloc.State{}, denied, now, start, until, false) == "" {
		t.Error("a denied pass did not fail its waiter")
	}
	st := &alloc.State{}
	sec := &section.EC2{InstanceID: "i-0abc", LastPass: &section.PassOutcome{At: now.Add(-time.Second), Result: section.PassThrottled, Streak: 1}}
	if next := nextLook(st, sec, now, until); !next.Equal(now.Add(-time.Second).Add(throttledPause(sec))) {
		t.Errorf("next look at %s, want the pause's end", next.Sub(now))
	}
}

// TestUnitServes: the systemd unit is used only when systemd runs, the unit
// is installed and the first eni-cni conflist is this network's.
func TestUnitServes(t *testing.T) {
	root := t.TempDir()
	n := NodeWarm{systemdRun: filepath.Join(root, "run"), unitDirs: []string{filepath.Join(root, "units")}, confDir: filepath.Join(root, "net.d")}
	cfg, err := netconf.Parse([]byte(`{"cniVersion":"1.0.0","name":"pods","stateDir":"/var/lib/eni-cni"}`))
	if err != nil {
		t.Fatal(err)
	}
	if n.unitServes(cfg) {
		t.Error("no systemd: unit used")
	}
	os.MkdirAll(n.systemdRun, 0o755)
	if n.unitServes(cfg) {
		t.Error("unit not installed: unit used")
	}
	os.MkdirAll(n.unitDirs[0], 0o755)
	os.WriteFile(filepath.Join(n.unitDirs[0], WarmUnit), []byte("[Service]\n"), 0o644)
	if n.unitServes(cfg) {
		t.Error("no conflist: unit used")
	}
	os.MkdirAll(n.confDir, 0o755)
	os.WriteFile(filepath.Join(n.confDir, "10-other.conflist"), []byte(`{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"eni-cni","stateDir":"/var/lib/other"}]}`), 0o644)
	if n.unitServes(cfg) {
		t.Error("the unit warms another network: unit used")
	}
	os.WriteFile(filepath.Join(n.confDir, "05-pods.conflist"), []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni"}]}`), 0o644)
	if !n.unitServes(cfg) {
		t.Error("systemd, unit and this network's conflist first: unit not used")
	}
}

func TestWriteIfChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), warmConfName)
	if err := writeIfChanged(path, []byte("a")); err != nil {
		t.Fatal(err)
	}
	fi1, _ := os.Stat(path)
	if err := writeIfChanged(path, []byte("a")); err != nil {
		t.Fatal(err)
	}
	fi2, _ := os.Stat(path)
	if !os.SameFile(fi1, fi2) {
		t.Error("unchanged content rewritten")
	}
	if err := writeIfChanged(path, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "b" {
		t.Errorf("content %q", b)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
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
	n := NodeWarm{systemdRun: filepath.Join(root, "run"), unitDirs: []string{filepath.Join(root, "units")},
		confDir: filepath.Join(root, "net.d"), systemctl: []string{systemctl}}
	var spawned int
	n.spawn = func(*netconf.Config) (string, error) { spawned++; return "process 1", nil }
	for _, d := range []string{n.systemdRun, n.unitDirs[0], n.confDir} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(n.unitDirs[0], WarmUnit), []byte("[Service]\n"), 0o644)
	os.WriteFile(filepath.Join(n.confDir, "05-pods.conflist"), []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni"}]}`), 0o644)
	cfg, err := netconf.Parse([]byte(`{"cniVersion":"1.0.0","name":"pods","stateDir":"/var/lib/eni-cni"}`))
	if err != nil {
		t.Fatal(err)
	}
	if how, err := n.StartWarm(context.Background(), cfg, false); err != nil || !strings.Contains(how, "systemd") || spawned != 0 {
		t.Fatalf("first start: %q %v, %d spawned", how, err, spawned)
	}
	if how, err := n.StartWarm(context.Background(), cfg, true); err != nil || spawned != 1 || !strings.Contains(how, "process") {
		t.Fatalf("direct start: %q %v, %d spawned", how, err, spawned)
	}
	if b, _ := os.ReadFile(called); strings.Count(string(b), "\n") != 1 {
		t.Errorf("systemctl called %q, want once", b)
	}

	// A systemctl found only on $PATH (the runtime's environment) is never
	// run: without one at a system path the pass is spawned directly.
	n.systemctl = []string{filepath.Join(root, "no", "systemctl")}
	t.Setenv("PATH", root)
	if how, err := n.StartWarm(context.Background(), cfg, false); err != nil || spawned != 2 || !strings.Contains(how, "process") {
		t.Fatalf("start without a system systemctl: %q %v, %d spawned", how, err, spawned)
	}
	if b, _ := os.ReadFile(called); strings.Count(string(b), "\n") != 1 {
		t.Errorf("the systemctl on $PATH was run: %q", b)
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
	var s EC2
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
