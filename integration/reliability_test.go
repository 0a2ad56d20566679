package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/gc/crifake"
)

// cli runs `eni-cni <cmd> --config <nw> args...` in the node namespace.
func (nw *network) cli(t *testing.T, cmd string, args ...string) output {
	t.Helper()
	argv := append([]string{pluginBin, cmd, "--config", nw.confFile}, args...)
	o, err := runIn(t.Context(), nw.node.path(), nil, nil, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// delOut runs DEL for p with an empty CNI_NETNS and returns the output.
func (nw *network) delOut(t *testing.T, p *pod) output {
	t.Helper()
	env := cniEnv("DEL", p)
	env["CNI_NETNS"] = ""
	return nw.run(t, env, nw.config(t))
}

// TestLostStateRepair: the state file of a node with pods disappears (a
// removed directory, a changed stateDir). ADD and STATUS refuse, pointing
// at `eni-cni repair`, instead of handing a live pod's address to a new
// one; DEL still tears its pod down; repair rebuilds the allocations from
// the node and the runtime's listing (a pod whose interface has an unusual name found
// through its namespace), after which ADD gives out a free address.
func TestLostStateRepair(t *testing.T) {
	n := newNode(t)
	nw := newNetwork(t, n, "1.1.0", []string{"10.99.7.0/29"}, nil)
	pods := newPods(t, 4)
	pods[2].ifName = "podnic7" // not a name repair guesses: found through the namespace
	atts := []attached{nw.addDirect(t, pods[0]), nw.addDirect(t, pods[1]), nw.addDirect(t, pods[2])}
	if err := os.Remove(nw.statePath()); err != nil {
		t.Fatal(err)
	}

	o := nw.addOut(t, pods[3])
	wantCNIError(t, "ADD with the state lost", o, 5, "state file lost", "eni-cni repair", atts[0].ip.String())
	pods[3].assertUnwired(t)
	if nw.stateBytes(t) != nil {
		t.Error("a refused ADD wrote a state file")
	}
	wantCNIError(t, "STATUS with the state lost", nw.run(t, cniEnv("STATUS", nil), nw.config(t)), 50, "eni-cni repair")
	if o := nw.cli(t, "gc", "--cri-endpoint", crifake.Start(t).Endpoint(), "--force"); o.exit == 0 || !strings.Contains(string(o.stderr), "state file lost") {
		t.Errorf("gc with the state lost: want a refusal (every live veth would look like a leftover), got %s", o)
	}
	assertWired(t, n, pods[1], atts[1].ip, atts[1].veth)

	if o := nw.delOut(t, pods[0]); o.exit != 0 {
		t.Fatalf("DEL with the state lost: want exit 0 after tearing down by name, got %s", o)
	}
	n.assertNoHostSide(t, atts[0].ip, atts[0].veth)

	cri := crifake.Start(t)
	cri.SetSandboxes(readySandboxes(pods[1], pods[2], newPod(t, "hostnet"))...)
	o = nw.cli(t, "repair", "--cri-endpoint", cri.Endpoint(), "--dry-run")
	if o.exit != 0 || !strings.Contains(string(o.stdout), "would record "+atts[2].ip.String()) || nw.stateBytes(t) != nil {
		t.Fatalf("repair --dry-run: %s (state written: %t)", o, nw.stateBytes(t) != nil)
	}
	o = nw.cli(t, "repair", "--cri-endpoint", cri.Endpoint())
	if o.exit != 0 {
		t.Fatalf("repair: %s", o)
	}
	got := nw.list(t).byContainer()
	for _, a := range atts[1:] {
		l, ok := got[a.pod.containerID]
		if !ok || l.IP != a.ip.String() || l.IfName != a.pod.ifName || l.HostVeth != a.veth || l.PodName != a.pod.name {
			t.Errorf("repair rebuilt %s as %+v, want %s on %s (%s)\n%s", a.pod.name, l, a.ip, a.pod.ifName, a.veth, o.stdout)
		}
	}
	if len(got) != 2 {
		t.Errorf("after repair: %d allocations, want 2", len(got))
	}
	res, _ := nw.add(t, pods[3])
	for _, a := range atts[1:] {
		if resultIP(t, res) == a.ip {
			t.Errorf("ADD after repair got %s, the address of live pod %s", a.ip, a.pod.name)
		}
	}
	for _, a := range atts[1:] {
		assertWired(t, n, a.pod, a.ip, a.veth)
	}
	if o := nw.run(t, cniEnv("STATUS", nil), nw.config(t)); o.exit != 0 {
		t.Errorf("STATUS after repair: %s", o)
	}
}

// TestCorruptStateDelAndRepair: with a corrupt state file DEL still tears
// its pod down (so it does not stay Terminating), ADD keeps failing with
// code 5, and repair sets the file aside and rebuilds.
func TestCorruptStateDelAndRepair(t *testing.T) {
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.8.0/29"}, map[string]any{"logFile": filepath.Join(t.TempDir(), "eni.log")})
	pods := newPods(t, 3)
	atts := []attached{nw.addDirect(t, pods[0]), nw.addDirect(t, pods[1])}
	garbage := []byte(`{"version":1,"allocations":[{"network":`)
	if err := os.WriteFile(nw.statePath(), garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	if o := nw.delOut(t, pods[0]); o.exit != 0 {
		t.Fatalf("DEL on a corrupt store: %s", o)
	}
	n.assertNoHostSide(t, atts[0].ip, atts[0].veth)
	log, _ := os.ReadFile(nw.conf["logFile"].(string))
	if !bytes.Contains(log, []byte("level=ERROR")) || !bytes.Contains(log, []byte("without the store")) {
		t.Errorf("DEL without the store is not logged as an error:\n%s", log)
	}
	wantCNIError(t, "ADD on a corrupt store", nw.addOut(t, pods[2]), 5, "corrupt", nw.statePath())
	if !bytes.Equal(nw.stateBytes(t), garbage) {
		t.Fatal("the corrupt file was rewritten")
	}
	cri := crifake.Start(t)
	cri.SetSandboxes(readySandboxes(pods[1])...)
	if o := nw.cli(t, "repair", "--cri-endpoint", cri.Endpoint()); o.exit != 0 {
		t.Fatalf("repair: %s", o)
	}
	kept, _ := filepath.Glob(nw.statePath() + ".bad-*")
	if len(kept) != 1 {
		t.Fatalf("bad file kept as %v", kept)
	}
	if b, _ := os.ReadFile(kept[0]); !bytes.Equal(b, garbage) {
		t.Error("the kept file differs from the corrupt one")
	}
	if l := nw.list(t); len(l.Allocations) != 1 || l.Allocations[0].IP != atts[1].ip.String() {
		t.Errorf("after repair: %+v, want only %s", l.Allocations, atts[1].ip)
	}
	nw.add(t, pods[2])
}

// TestAddRefusesAnotherPodsRoute: the node routes the address ADD picked
// to another live veth (here: a second network with an overlapping pool
// and its own state; Setup used RouteReplace and moved the live pod's /32).
// ADD fails with code 11 and leaves that pod alone; the retry takes
// another address.
func TestAddRefusesAnotherPodsRoute(t *testing.T) {
	n := newNode(t)
	a := newNetwork(t, n, "1.0.0", []string{"10.99.9.1-10.99.9.3"}, nil)
	b := newNetwork(t, n, "1.0.0", []string{"10.99.9.1-10.99.9.3"}, nil)
	// b has run before (an empty state file): otherwise its first ADD
	// would see a's pod in its pool and refuse as for a lost state.
	if err := os.MkdirAll(b.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.statePath(), []byte(`{"version":1,"allocations":[],"cooling":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	pa, pb := newPod(t, "a"), newPod(t, "b")
	live := a.addDirect(t, pa)
	o := b.addOut(t, pb)
	wantCNIError(t, "ADD onto another pod's route", o, 11, "already routed", live.veth)
	assertWired(t, n, pa, live.ip, live.veth)
	pb.assertUnwired(t)
	res, _ := b.add(t, pb)
	if ip := resultIP(t, res); ip == live.ip {
		t.Errorf("retry got %s again", ip)
	}
	assertWired(t, n, pa, live.ip, live.veth)
}

// TestStatePathSymlinks: the state file and the lock as symlinks out of
// the state dir are refused (code 5), and nothing is written through them.
func TestStatePathSymlinks(t *testing.T) {
	for _, name := range []string{"state.json", "state.lock"} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			nw := newNetwork(t, n, "1.0.0", []string{"10.99.10.0/29"}, nil)
			if err := os.MkdirAll(nw.stateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(t.TempDir(), "outside")
			if err := os.Symlink(target, filepath.Join(nw.stateDir, name)); err != nil {
				t.Fatal(err)
			}
			p := newPod(t, "p")
			wantCNIError(t, "ADD with "+name+" a symlink", nw.addOut(t, p), 5, "symlink")
			p.assertUnwired(t)
			if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("something was written through the symlink to %s", target)
			}
		})
	}
}

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory and
// unmounts it when the test ends.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file into dir until the file system is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			return path
		}
	}
}

// TestStateDiskFullAndReadOnly: the state directory on a full and then on
// a read-only file system. ADD fails with code 5 naming the cause, and
// leaves nothing: no veth, no pod interface, the state file as it was, no
// temporary file. DEL on the read-only store fails (the runtime retries)
// and keeps the allocation, then succeeds once the file system is back.
func TestStateDiskFullAndReadOnly(t *testing.T) {
	n := newNode(t)
	mnt := mountTmpfs(t, 256<<10)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.11.0/29"}, map[string]any{"stateDir": filepath.Join(mnt, "state")})
	nw.stateDir = filepath.Join(mnt, "state")
	pods := newPods(t, 3)
	first := nw.addDirect(t, pods[0])
	vethsBefore := n.vethNames(t)

	check := func(what string, o output, cause string) {
		t.Helper()
		before := nw.stateBytes(t)
		wantCNIError(t, what, o, 5, nw.statePath(), cause)
		pods[1].assertUnwired(t)
		if after := n.vethNames(t); strings.Join(after, ",") != strings.Join(vethsBefore, ",") {
			t.Errorf("%s: node veths %v, want %v", what, after, vethsBefore)
		}
		if !bytes.Equal(nw.stateBytes(t), before) {
			t.Errorf("%s: state file changed", what)
		}
		if tmp, _ := filepath.Glob(nw.statePath() + ".tmp-*"); len(tmp) != 0 {
			t.Errorf("%s: temporary files left: %v", what, tmp)
		}
	}

	filler := fill(t, mnt)
	check("ADD on a full disk", nw.addOut(t, pods[1]), "no space left")
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	if err := unix.Mount("", mnt, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", mnt, err)
	}
	check("ADD on a read-only file system", nw.addOut(t, pods[1]), "read-only file system")
	o := nw.delOut(t, pods[0])
	wantCNIError(t, "DEL on a read-only file system", o, 5, "read-only file system")
	if err := unix.Mount("", mnt, "", unix.MS_REMOUNT, ""); err != nil {
		t.Fatalf("remount %s read-write: %v", mnt, err)
	}
	if l := nw.list(t); len(l.Allocations) != 1 || l.Allocations[0].IP != first.ip.String() {
		t.Fatalf("after the failed DEL: %+v, want the allocation of %s kept", l.Allocations, first.ip)
	}
	if o := nw.delOut(t, pods[0]); o.exit != 0 {
		t.Fatalf("DEL retried on a writable file system: %s", o)
	}
	n.assertNoHostSide(t, first.ip, first.veth)
	nw.add(t, pods[1])
}

// TestLockHeldByStuckProcess: another process holds the state lock and
// does not let go. ADD gives up after lockTimeoutSeconds with code 11,
// naming the lock file and the holder's PID, and changes nothing.
func TestLockHeldByStuckProcess(t *testing.T) {
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.12.0/29"}, map[string]any{"lockTimeoutSeconds": 1})
	pods := newPods(t, 2)
	nw.add(t, pods[0])
	lock := filepath.Join(nw.stateDir, "state.lock")
	holder := exec.Command("flock", "--exclusive", lock, "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatalf("start flock: %v", err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	deadline := time.Now().Add(5 * time.Second)
	for !heldInProcLocks(t, holder.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("flock did not take the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := nw.stateBytes(t)
	start := time.Now()
	o := nw.addOut(t, pods[1])
	wantCNIError(t, "ADD with the lock held", o, 11, "timed out waiting for the state lock", lock, fmt.Sprintf("held by pid %d (flock", holder.Process.Pid))
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("ADD waited %s with lockTimeoutSeconds 1", d)
	}
	pods[1].assertUnwired(t)
	if !bytes.Equal(before, nw.stateBytes(t)) {
		t.Error("state changed")
	}
}

func heldInProcLocks(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b, []byte(fmt.Sprintf(" %d ", pid)))
}
