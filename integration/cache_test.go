package integration

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The shipped (lean) binary runs gc and warm through its embedded full
// build, cached in stateDir/.bin (fullexec). These tests run the real
// binary; with a full build (go test without ENI_CNI_BIN) they skip.

func requireLean(t *testing.T) {
	t.Helper()
	info, err := buildinfo.ReadFile(pluginBin)
	if err != nil {
		t.Skipf("read build info of %s: %v", pluginBin, err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" && strings.Contains(s.Value, "lean") {
			return
		}
	}
	t.Skip("ENI_CNI_BIN is not the lean build (make build); the cache is the lean build's")
}

// cachedBuilds lists the cached embedded builds of nw (warm's is the ec2
// build).
func cachedBuilds(t *testing.T, nw *network) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(nw.stateDir, ".bin", "eni-cni-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// warmStatic runs `eni-cni warm` on a static network (nothing to do, but
// it runs the full build) with extra environment.
func warmStatic(t *testing.T, nw *network, env map[string]string) {
	t.Helper()
	o, err := runIn(t.Context(), nw.node.path(), env, nil, pluginBin, "warm", "--config", nw.confFile)
	if err != nil || o.exit != 0 || !strings.Contains(string(o.stdout), "nothing to do") {
		t.Fatalf("eni-cni warm: %s (%v)", o, err)
	}
}

// TestFullBuildCache: the first run caches the full build beside the
// state (root's, 0700, its digest in its name), later runs use it as it
// is, the environment cannot move it, and a planted symlink is replaced,
// never followed.
func TestFullBuildCache(t *testing.T) {
	requireLean(t)
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.0.0/28"}, nil)
	elsewhere := t.TempDir()
	warmStatic(t, nw, map[string]string{"ENI_CNI_CACHE_DIR": elsewhere})
	builds := cachedBuilds(t, nw)
	if len(builds) != 1 {
		t.Fatalf("cached builds %v, want one", builds)
	}
	file := builds[0]
	var st syscall.Stat_t
	if err := syscall.Lstat(file, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o700 || st.Uid != 0 || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		t.Errorf("%s: mode %o uid %d, want a regular file of root, 0700", file, st.Mode, st.Uid)
	}
	if sum := fileDigest(t, file); !strings.HasSuffix(file, "/eni-cni-ec2-"+sum[:16]) {
		t.Errorf("%s has digest %s, not the one its name carries", file, sum)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("ENI_CNI_CACHE_DIR from the environment was used: %v", entries)
	}

	ino := st.Ino
	warmStatic(t, nw, nil)
	if err := syscall.Lstat(file, &st); err != nil || st.Ino != ino {
		t.Errorf("the second run rewrote the cache (inode %d -> %d, %v)", ino, st.Ino, err)
	}

	evidence := filepath.Join(t.TempDir(), "evidence")
	script := filepath.Join(t.TempDir(), "evil")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+evidence+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(script, file); err != nil {
		t.Fatal(err)
	}
	warmStatic(t, nw, nil)
	if _, err := os.Stat(evidence); err == nil {
		t.Fatal("the planted symlink's script was run")
	}
	if err := syscall.Lstat(file, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		t.Errorf("the planted symlink was not replaced by the build: %v, mode %o", err, st.Mode)
	}
}

// TestFullBuildCacheRecord: once the cached build is older than the
// racy window, a run hashes it and records that beside it (root's, 0600);
// a later change in place that keeps the size and mtime still gets the
// copy replaced, never run.
func TestFullBuildCacheRecord(t *testing.T) {
	requireLean(t)
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.0.0/28"}, nil)
	warmStatic(t, nw, nil)
	builds := cachedBuilds(t, nw)
	if len(builds) != 1 {
		t.Fatalf("cached builds %v, want one", builds)
	}
	file := builds[0]
	record := filepath.Join(filepath.Dir(file), ".verified-"+file[len(file)-16:])
	time.Sleep(2100 * time.Millisecond) // fullexec's racyWindow, 2 s
	warmStatic(t, nw, nil)
	var st syscall.Stat_t
	if err := syscall.Lstat(record, &st); err != nil || st.Mode&0o7777 != 0o600 || st.Uid != 0 {
		t.Fatalf("record %s: %v, mode %o uid %d; want root's, 0600", record, err, st.Mode, st.Uid)
	}
	if err := syscall.Lstat(file, &st); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("damaged"), st.Size/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	times := []syscall.Timespec{st.Atim, st.Mtim}
	if err := syscall.UtimesNano(file, times); err != nil {
		t.Fatal(err)
	}
	warmStatic(t, nw, nil)
	var after syscall.Stat_t
	if err := syscall.Lstat(file, &after); err != nil || after.Ino == st.Ino {
		t.Errorf("the copy changed in place was kept (inode %d -> %d, %v)", st.Ino, after.Ino, err)
	}
	if sum := fileDigest(t, file); !strings.HasSuffix(file, sum[:16]) {
		t.Errorf("%s has digest %s after the run", file, sum)
	}
}

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestFullBuildCacheNoexec: with the state on a noexec mount, gc and warm
// run the full build from memory and never write its 45 MB there, run
// after run. The tmpfs is mounted in a private mount namespace (unshare)
// that dies with the shell, so the host's mounts never change.
func TestFullBuildCacheNoexec(t *testing.T) {
	requireLean(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) not installed")
	}
	n := newNode(t)
	mnt := t.TempDir()
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.0.0/28"}, nil)
	nw.setConf(t, func(c map[string]any) { c["stateDir"] = filepath.Join(mnt, "state") })
	script := fmt.Sprintf(`set -e
mount -t tmpfs -o noexec,nosuid,nodev,mode=0700 tmpfs %[1]s
for i in 1 2; do %[2]s warm --config %[3]s; done
echo "files over 1 MB: $(find %[1]s -type f -size +1M | wc -l)"
ls -la %[1]s/state %[1]s/state/.bin 2>&1 || true
`, mnt, pluginBin, nw.confFile)
	o, err := runIn(t.Context(), n.path(), nil, nil, "unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	if err != nil || o.exit != 0 {
		t.Fatalf("warm on a noexec state dir: %s (%v)", o, err)
	}
	out := string(o.stdout)
	if strings.Count(out, "nothing to do") != 2 || !strings.Contains(out, "files over 1 MB: 0") {
		t.Errorf("want two runs and no file of the build written, got:\n%s", out)
	}
}

// TestEmbeddedBuildsSideBySide: warm caches the ec2 build and gc the full
// one, each beside the other: once each is recorded, neither run replaces
// or hashes again the other's copy (each would otherwise unpack and hash
// on every other timer run).
func TestEmbeddedBuildsSideBySide(t *testing.T) {
	requireLean(t)
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.0.0/28"}, nil)
	gc := func() {
		t.Helper()
		// The lean build caches the full build before it execs it.
		o, err := runIn(t.Context(), n.path(), nil, nil, pluginBin, "gc", "--config", nw.confFile, "--help")
		if err != nil || o.exit != 0 || !strings.Contains(string(o.stderr), "Usage of gc") {
			t.Fatalf("eni-cni gc --help: %s (%v)", o, err)
		}
	}
	warmStatic(t, nw, nil)
	gc()
	builds := cachedBuilds(t, nw)
	if len(builds) != 2 || !strings.Contains(builds[0], "/eni-cni-ec2-") || !strings.Contains(builds[1], "/eni-cni-full-") {
		t.Fatalf("cached builds %v, want the ec2 and the full build", builds)
	}
	time.Sleep(2100 * time.Millisecond) // fullexec's racyWindow, 2 s
	warmStatic(t, nw, nil)
	gc()
	var files []string
	for _, b := range builds {
		files = append(files, b, filepath.Join(filepath.Dir(b), ".verified-"+b[len(b)-16:]))
	}
	inodes := func() []uint64 {
		var ino []uint64
		for _, f := range files {
			var st syscall.Stat_t
			if err := syscall.Lstat(f, &st); err != nil {
				t.Fatal(err)
			}
			ino = append(ino, st.Ino)
		}
		return ino
	}
	before := inodes()
	warmStatic(t, nw, nil)
	gc()
	warmStatic(t, nw, nil)
	if after := inodes(); !slices.Equal(before, after) {
		t.Errorf("%v: inodes %v, then %v after more runs of each", files, before, after)
	}
}

// TestWarmTimerRunsPublishedBuild: the lean binary's timer runs (warm, gc)
// publish the cached ec2 build as stateDir/.bin/timer-warm, which the warm
// timer runs directly. Once a lean run has hashed it as it is, it runs
// warm itself; when the lean binary that published it was replaced (an
// upgrade), it hands over to that binary, which runs the pass and
// publishes again; without its note it runs nothing and says so.
func TestWarmTimerRunsPublishedBuild(t *testing.T) {
	requireLean(t)
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.0.0/28"}, nil)
	data, err := os.ReadFile(pluginBin)
	if err != nil {
		t.Fatal(err)
	}
	lean := filepath.Join(t.TempDir(), "eni-cni")
	if err := os.WriteFile(lean, data, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(argv ...string) output {
		t.Helper()
		o, err := runIn(t.Context(), n.path(), nil, nil, append(argv, "--config", nw.confFile)...)
		if err != nil {
			t.Fatalf("%v: %v", argv, err)
		}
		return o
	}
	timer := filepath.Join(nw.stateDir, ".bin", "timer-warm")
	if o := run(lean, "gc", "--help"); o.exit != 0 {
		t.Fatalf("gc --help: %s", o)
	}
	if o := run(timer, "warm"); o.exit != 0 || !strings.Contains(string(o.stderr), "handing over to "+lean) {
		t.Fatalf("the copy gc published, before a lean run hashed it as linked: %s", o)
	}
	time.Sleep(2100 * time.Millisecond) // fullexec's racyWindow, 2 s
	if o := run(lean, "warm"); o.exit != 0 {
		t.Fatalf("lean warm: %s", o)
	}
	o := run(timer, "warm")
	if o.exit != 0 || !strings.Contains(string(o.stdout), "nothing to do") || len(o.stderr) != 0 {
		t.Fatalf("the published copy, verified: %s", o)
	}
	// An upgrade: a new file at the lean binary's path.
	if err := os.WriteFile(lean+".new", data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(lean+".new", lean); err != nil {
		t.Fatal(err)
	}
	o = run(timer, "warm")
	if o.exit != 0 || !strings.Contains(string(o.stdout), "nothing to do") || !strings.Contains(string(o.stderr), "changed since it published") {
		t.Fatalf("the published copy after the lean binary was replaced: %s", o)
	}
	if err := os.Remove(filepath.Join(nw.stateDir, ".bin", ".published-timer-warm")); err != nil {
		t.Fatal(err)
	}
	o = run(timer, "warm")
	if o.exit == 0 || strings.Contains(string(o.stdout), "nothing to do") || !strings.Contains(string(o.stderr), "no note") {
		t.Fatalf("the published copy without its note: %s", o)
	}
}
