package fullexec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The build under test is this test binary itself: run with FULLEXEC_HELPER
// set it only prints its arguments, so a test sees which code ran.
func TestMain(m *testing.M) {
	if boot := os.Getenv("FULLEXEC_PUBLISHED_BOOT"); boot != "" {
		os.Exit(publishedChild(boot))
	}
	if os.Getenv("FULLEXEC_HELPER") != "" {
		fmt.Printf("helper %s\n", strings.Join(os.Args[1:], " "))
		os.Exit(0)
	}
	if dir := os.Getenv("FULLEXEC_NOEXEC_DIR"); dir != "" {
		os.Exit(noexecChild(dir))
	}
	if dir := os.Getenv("FULLEXEC_REMOUNT_DIR"); dir != "" {
		os.Exit(remountChild(dir))
	}
	os.Exit(m.Run())
}

func selfBuild(t testing.TB) Build {
	t.Helper()
	path, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return Build{Data: data, Digest: hex.EncodeToString(sum[:])}
}

// runs execs e as a child and wants the helper's answer.
func runs(t *testing.T, e *Exe) {
	t.Helper()
	cmd := exec.Command(e.Path(), "hello")
	cmd.Env = append(os.Environ(), "FULLEXEC_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "helper hello\n" {
		t.Fatalf("run %s (cached %t): %v, output %q", e.Path(), e.Cached, err, out)
	}
}

func mustOpen(t *testing.T, dir string, b Build) *Exe {
	t.Helper()
	e, err := Open(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func cacheDirIn(t *testing.T) string { return filepath.Join(t.TempDir(), "state", ".bin") }

// The first run writes the cache (creating its directories 0700), later
// runs use it as it is.
func TestCachedWrittenOnceAndReused(t *testing.T) {
	b, dir := selfBuild(t), cacheDirIn(t)
	e := mustOpen(t, dir, b)
	if !e.Cached {
		t.Fatalf("first Open: not cached")
	}
	runs(t, e)
	file := filepath.Join(dir, b.name())
	ino := inode(t, file)
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, mode %v; want 0700", d, err, fi.Mode())
		}
	}
	e2 := mustOpen(t, dir, b)
	if !e2.Cached || inode(t, file) != ino {
		t.Errorf("second Open: cached %t, inode %d -> %d; want the same file used again", e2.Cached, ino, inode(t, file))
	}
	runs(t, e2)
}

// Each hostile or damaged cache entry is replaced by a verified copy of
// the build, never run.
func TestHostileCacheEntryIsReplacedNotRun(t *testing.T) {
	b := selfBuild(t)
	evil := []byte("#!/bin/sh\ntouch \"$EVIDENCE\"\n")
	cases := []struct {
		name  string
		root  bool
		plant func(t *testing.T, path string)
	}{
		{"symlink to a script", false, func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "evil")
			if err := os.WriteFile(target, evil, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink to the genuine build", false, func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "genuine")
			if err := os.WriteFile(target, b.Data, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"right size, wrong digest", false, func(t *testing.T, path string) {
			bad := bytes.Clone(b.Data)
			bad[len(bad)/2] ^= 0xff
			if err := os.WriteFile(path, bad, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"a script", false, func(t *testing.T, path string) {
			if err := os.WriteFile(path, evil, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"genuine but group-writable", false, func(t *testing.T, path string) { plantGenuine(t, path, b, 0o770) }},
		{"genuine but world-writable", false, func(t *testing.T, path string) { plantGenuine(t, path, b, 0o707) }},
		{"genuine but not executable", false, func(t *testing.T, path string) { plantGenuine(t, path, b, 0o600) }},
		{"genuine but owned by nobody", true, func(t *testing.T, path string) {
			plantGenuine(t, path, b, 0o700)
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
		{"a fifo", false, func(t *testing.T, path string) {
			if err := unix.Mkfifo(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			dir := cacheDirIn(t)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, b.name())
			c.plant(t, path)
			planted := inode(t, path)
			evidence := filepath.Join(t.TempDir(), "evidence")
			t.Setenv("EVIDENCE", evidence)
			e := mustOpen(t, dir, b)
			runs(t, e)
			if _, err := os.Stat(evidence); err == nil {
				t.Fatal("the planted file was run")
			}
			if !e.Cached {
				t.Fatal("the build ran from memory: the entry should have been replaced")
			}
			var st unix.Stat_t
			if err := unix.Lstat(path, &st); err != nil {
				t.Fatal(err)
			}
			if st.Ino == planted || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o777 != 0o700 || int(st.Uid) != os.Geteuid() {
				t.Errorf("after Open: inode %d (planted %d), mode %o, uid %d; want a new regular 0700 file of ours", st.Ino, planted, st.Mode, st.Uid)
			}
		})
	}
}

func plantGenuine(t *testing.T, path string, b Build, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b.Data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// A cache directory that others could write into, or one reached through
// a symlink, is not used at all: the build runs from memory and nothing is
// written there.
func TestUntrustedCacheDirIsNotUsed(t *testing.T) {
	b := selfBuild(t)
	cases := []struct {
		name  string
		root  bool
		setup func(t *testing.T, dir string) (watch string)
	}{
		{"cache dir world-writable", false, func(t *testing.T, dir string) string {
			mkdir(t, dir, 0o777)
			return dir
		}},
		{"cache dir group-writable", false, func(t *testing.T, dir string) string {
			mkdir(t, dir, 0o770)
			return dir
		}},
		{"cache dir sticky and world-writable", false, func(t *testing.T, dir string) string {
			mkdir(t, dir, 0o1777)
			return dir
		}},
		{"state dir group-writable", false, func(t *testing.T, dir string) string {
			mkdir(t, filepath.Dir(dir), 0o770)
			return filepath.Dir(dir)
		}},
		{"cache dir a symlink", false, func(t *testing.T, dir string) string {
			mkdir(t, filepath.Dir(dir), 0o700)
			target := t.TempDir()
			if err := os.Symlink(target, dir); err != nil {
				t.Fatal(err)
			}
			return target
		}},
		{"state dir a symlink", false, func(t *testing.T, dir string) string {
			target := t.TempDir()
			if err := os.Symlink(target, filepath.Dir(dir)); err != nil {
				t.Fatal(err)
			}
			return target
		}},
		{"cache dir owned by nobody", true, func(t *testing.T, dir string) string {
			mkdir(t, dir, 0o700)
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		{"state dir owned by nobody", true, func(t *testing.T, dir string) string {
			mkdir(t, dir, 0o700)
			if err := os.Chown(filepath.Dir(dir), 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			dir := cacheDirIn(t)
			watch := c.setup(t, dir)
			e := mustOpen(t, dir, b)
			if e.Cached {
				t.Fatalf("Open used the cache in %s", dir)
			}
			runs(t, e)
			assertNoFiles(t, watch)
		})
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

// assertNoFiles fails if any regular file exists under dir.
func assertNoFiles(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			t.Errorf("%s was written", path)
		}
		return nil
	})
}

// Caching a new build removes the copies of other builds, their markers,
// records and temporary files of runs that died; a live run's temporary file stays.
func TestOtherBuildsRemoved(t *testing.T) {
	b, dir := selfBuild(t), cacheDirIn(t)
	mkdir(t, dir, 0o700)
	old := []string{filePrefix + "full-0123456789abcdef", filePrefix + "ec2-0123456789abcdef", ".noexec-0123456789abcdef", ".verified-0123456789abcdef",
		"." + filePrefix + b.short() + "-999999999", "." + filePrefix + b.short() + ".verified-999999999"}
	live := "." + filePrefix + "fedcba9876543210-1" // PID 1 runs
	for _, n := range append(old, live) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mustOpen(t, dir, b)
	for _, n := range old {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s survived", n)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, live)); err != nil {
		t.Errorf("the temporary file of a live run was removed: %v", err)
	}
}

// The other builds of the same binary are current: caching one must not
// remove the others' copies, records or markers (each would then unpack and
// hash again on every other run), while an old version's go, and so does
// a file carrying a current digest under another build's name.
func TestSiblingBuildsStay(t *testing.T) {
	b, dir := selfBuild(t), cacheDirIn(t)
	mkdir(t, dir, 0o700)
	sibling := "fedcba98765432100123456789abcdef0123456789abcdef0123456789abcdef"
	b.Siblings = []Build{{Name: "ec2", Digest: sibling}}
	keep := []string{filePrefix + "ec2-fedcba9876543210", ".verified-fedcba9876543210", ".noexec-fedcba9876543210"}
	old := []string{filePrefix + "ec2-0123456789abcdef", ".verified-0123456789abcdef",
		filePrefix + "full-fedcba9876543210", filePrefix + "ec2-" + b.short(), filePrefix + "x-" + b.short()}
	for _, n := range append(keep, old...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mustOpen(t, dir, b)
	for _, n := range keep {
		if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
			t.Errorf("the sibling build's %s was removed: %v", n, err)
		}
	}
	for _, n := range old {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s survived", n)
		}
	}
}

// Once the kernel refused to run the cached copy, later runs use memory
// and write nothing.
func TestNoExecMarkerStopsWrites(t *testing.T) {
	b, dir := selfBuild(t), cacheDirIn(t)
	e := mustOpen(t, dir, b)
	e.MarkNoExec(&os.PathError{Op: "fork/exec", Path: e.Path(), Err: syscall.EACCES})
	if err := os.Remove(filepath.Join(dir, b.name())); err != nil {
		t.Fatal(err)
	}
	e2 := mustOpen(t, dir, b)
	if e2.Cached {
		t.Fatal("Open used the cache after a refused exec")
	}
	if _, err := os.Lstat(filepath.Join(dir, b.name())); err == nil {
		t.Error("the build was written again")
	}
	runs(t, e2)
	// Other errors (a missing interpreter, a full table) are no refusal.
	e2.MarkNoExec(syscall.ENOMEM)
}

// The memfd is close-on-exec and sealed; ELF builds run from it through
// /proc/self/fd, scripts cannot (their interpreter would need the fd the
// exec just closed) — a limit that does not concern the full build.
func TestMemorySealedAndCloseOnExec(t *testing.T) {
	b := selfBuild(t)
	e, err := Memory(b)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fd := int(e.f.Fd())
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	want := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if err != nil || seals&want != want {
		t.Errorf("seals %#x (%v), want %#x", seals, err, want)
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("fd flags %#x (%v): not close-on-exec", flags, err)
	}
	if _, err := unix.Pwrite(fd, []byte("x"), 0); !errors.Is(err, unix.EPERM) {
		t.Errorf("write to the sealed memfd: %v, want EPERM", err)
	}
	if err := unix.Ftruncate(fd, 1); !errors.Is(err, unix.EPERM) {
		t.Errorf("truncate of the sealed memfd: %v, want EPERM", err)
	}
	runs(t, e)

	script, err := Memory(Build{Data: []byte("#!/bin/sh\necho script\n"), Digest: strings.Repeat("0", 64)})
	if err != nil {
		t.Fatal(err)
	}
	defer script.Close()
	if out, err := exec.Command(script.Path()).CombinedOutput(); err == nil {
		t.Errorf("a script ran from a close-on-exec memfd (%q): the limit this package documents is gone", out)
	}
}

// A cache on a noexec mount is noticed before anything is written: the
// build runs from memory and the 45 MB are never written. The mount is
// made in a private mount namespace of a child (unshare), so the host's
// mount table never changes.
func TestNoexecMount(t *testing.T) {
	inPrivateMounts(t, "FULLEXEC_NOEXEC_DIR", "noexec ok")
}

// inPrivateMounts runs this test binary as a child in a private mount
// namespace (unshare), with env set to a new directory, and wants ok in
// what it prints: mounts made there never reach the host's table.
func inPrivateMounts(t *testing.T, env, ok string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) not installed")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", self, "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), ok) {
		t.Fatalf("child in its own mount namespace: %v\n%s", err, out)
	}
}

// noexecChild mounts a noexec tmpfs on dir (in the private namespace) and
// checks two Opens there run from memory without writing the cache.
func noexecChild(dir string) int {
	fail := func(format string, args ...any) int {
		fmt.Printf("noexec failed: "+format+"\n", args...)
		return 1
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
		return fail("mount: %v", err)
	}
	path, _ := os.Executable()
	data, err := os.ReadFile(path)
	if err != nil {
		return fail("%v", err)
	}
	sum := sha256.Sum256(data)
	b := Build{Data: data, Digest: hex.EncodeToString(sum[:])}
	for i := range 2 {
		e, err := Open(filepath.Join(dir, "state", ".bin"), b)
		if err != nil {
			return fail("open %d: %v", i, err)
		}
		if e.Cached {
			return fail("open %d used the cache on a noexec mount", i)
		}
		cmd := exec.Command(e.Path(), "x")
		cmd.Env = append(os.Environ(), "FULLEXEC_HELPER=1", "FULLEXEC_NOEXEC_DIR=")
		if out, err := cmd.CombinedOutput(); err != nil || string(out) != "helper x\n" {
			return fail("run %d: %v %q", i, err, out)
		}
		e.Close()
	}
	var written []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			written = append(written, p)
		}
		return nil
	})
	if len(written) > 0 {
		return fail("files written on the noexec mount: %v", written)
	}
	fmt.Println("noexec ok")
	return 0
}

// Read-only commands use a verified copy that is there, and otherwise run
// from memory without creating directories or writing anything.
func TestOpenReadOnly(t *testing.T) {
	b, dir := selfBuild(t), cacheDirIn(t)
	e, err := OpenReadOnly(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Cached {
		t.Fatal("read-only Open used a cache that does not exist")
	}
	if _, err := os.Stat(filepath.Dir(dir)); err == nil {
		t.Error("read-only Open created the state directory")
	}
	runs(t, e)
	mustOpen(t, dir, b) // a writing command caches it
	e2, err := OpenReadOnly(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if !e2.Cached {
		t.Error("read-only Open did not use the verified cache")
	}
	plantGenuine(t, filepath.Join(dir, b.name()), b, 0o777)
	e3, err := OpenReadOnly(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	defer e3.Close()
	if e3.Cached {
		t.Error("read-only Open used a world-writable copy")
	}
}
