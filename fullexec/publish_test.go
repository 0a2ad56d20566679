package fullexec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// publishedChild is this test binary run under a published name: it
// verifies itself in boot, as a timer-run copy does, says what it found,
// and with FULLEXEC_HANDOVER hands over to the lean binary when it could
// not verify itself.
func publishedChild(boot string) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Println("executable:", err)
		return 1
	}
	v := verifier{digest: digestOf, bootID: func() (string, error) { return boot, nil }, now: time.Now}
	p, err := v.verifyPublished(exe)
	if err == nil {
		fmt.Printf("verified %s lean %s\n", p.Name, p.Lean)
		return 0
	}
	fmt.Printf("not verified, lean %q: %v\n", p.Lean, err)
	if os.Getenv("FULLEXEC_HANDOVER") == "" || p.Lean == "" {
		return 3
	}
	env := []string{"FULLEXEC_HELPER=1"}
	fmt.Println(HandOver(p.Lean, os.Args, env))
	return 4
}

// published runs the copy published as name in dir, in boot, and returns
// what it printed.
func published(t *testing.T, dir, name, boot string, handOver bool) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, name), "warm")
	cmd.Env = []string{"FULLEXEC_PUBLISHED_BOOT=" + boot}
	if handOver {
		cmd.Env = append(cmd.Env, "FULLEXEC_HANDOVER=1")
	}
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// leanBinary is a stand-in for the lean binary: a copy of this test
// binary, which answers as the helper when handed over to.
func leanBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	lean := filepath.Join(t.TempDir(), "eni-cni")
	if err := os.WriteFile(lean, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return lean
}

// publishedSettled is a settled cache whose copy is published as
// "timer-warm" by lean and recorded again after the link (as the next
// lean run does), so the copy verifies itself.
func publishedSettled(t *testing.T) (b Build, dir, lean string, h *hashes) {
	t.Helper()
	b, dir, h = settled(t)
	lean = leanBinary(t)
	if err := h.open(t, dir, b).Publish("timer-warm", lean); err != nil {
		t.Fatal(err)
	}
	if got := published(t, dir, "timer-warm", h.boot, false); !strings.HasPrefix(got, "not verified") || !strings.Contains(got, "no record") {
		t.Fatalf("a copy just linked (its ctime changed after its record) verified itself: %s", got)
	}
	n := h.n
	h.open(t, dir, b)
	if h.n != n+1 {
		t.Fatalf("%d hashes after the link, want 1", h.n-n)
	}
	return b, dir, lean, h
}

// A published copy verifies itself while it is, in this boot, the file a
// lean run hashed and the lean binary is unchanged; publishing again what
// is published changes nothing.
func TestPublishedCopyVerifiesItself(t *testing.T) {
	b, dir, lean, h := publishedSettled(t)
	if got := published(t, dir, "timer-warm", h.boot, false); got != "verified timer-warm lean "+lean+"\n" {
		t.Fatalf("published copy: %s", got)
	}
	before := stat(t, filepath.Join(dir, "timer-warm"))
	if err := h.open(t, dir, b).Publish("timer-warm", lean); err != nil {
		t.Fatal(err)
	}
	if after := stat(t, filepath.Join(dir, "timer-warm")); after.Ino != before.Ino || after.Ctim != before.Ctim {
		t.Error("publishing the published copy again linked it again")
	}
	if got := published(t, dir, "timer-warm", h.boot, false); !strings.HasPrefix(got, "verified") {
		t.Errorf("after publishing again: %s", got)
	}
	// Another lean binary publishing the same copy rewrites the note, and
	// does not link again (its ctime, and so its record, stay).
	other := leanBinary(t)
	if err := h.open(t, dir, b).Publish("timer-warm", other); err != nil {
		t.Fatal(err)
	}
	if after := stat(t, filepath.Join(dir, "timer-warm")); after.Ino != before.Ino || after.Ctim != before.Ctim {
		t.Error("a note for another lean binary linked the copy again")
	}
	if got := published(t, dir, "timer-warm", h.boot, false); got != "verified timer-warm lean "+other+"\n" {
		t.Errorf("after another lean binary published it: %s", got)
	}
	// A new build cached clears the old ones but not the published name,
	// which the next publish moves.
	removeOthers(mustDir(t, dir), Build{Name: "ec2", Digest: strings.Repeat("0", 64)})
	if _, err := os.Lstat(filepath.Join(dir, "timer-warm")); err != nil {
		t.Errorf("the clean-up of a new build removed the published copy: %v", err)
	}
}

func mustDir(t *testing.T, dir string) *os.File {
	t.Helper()
	d, err := OpenTrustedDir(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// Whatever makes the copy other than what a lean run verified in this
// boot makes it hand over to the lean binary, which runs the command.
func TestPublishedCopyHandsOver(t *testing.T) {
	cases := []struct {
		name, why string
		change    func(t *testing.T, dir, lean string)
		boot      string
	}{
		{"another boot", "no record", nil, "boot-2"},
		{"record removed", "no record", func(t *testing.T, dir, _ string) {
			m, _ := filepath.Glob(filepath.Join(dir, recordPrefix+"*"))
			if len(m) != 1 {
				t.Fatalf("records %v, want one", m)
			}
			os.Remove(m[0])
		}, ""},
		{"copy changed in place", "no record", func(t *testing.T, dir, _ string) {
			nextTick(t, filepath.Join(dir, "timer-warm"))
			if err := os.Chmod(filepath.Join(dir, "timer-warm"), 0o700); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"lean binary replaced", "changed since", func(t *testing.T, _, lean string) {
			data, _ := os.ReadFile(lean)
			renameOver(t, lean, data)
		}, ""},
		{"lean binary touched", "changed since", func(t *testing.T, _, lean string) {
			nextTick(t, lean)
			now := time.Now()
			if err := os.Chtimes(lean, now, now); err != nil {
				t.Fatal(err)
			}
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, dir, lean, h := publishedSettled(t)
			if c.change != nil {
				c.change(t, dir, lean)
			}
			boot := h.boot
			if c.boot != "" {
				boot = c.boot
			}
			got := published(t, dir, "timer-warm", boot, true)
			if !strings.HasPrefix(got, "not verified, lean \""+lean+"\"") || !strings.Contains(got, c.why) || !strings.HasSuffix(got, "helper warm\n") {
				t.Errorf("want a hand-over (%s) to %s running warm; got:\n%s", c.why, lean, got)
			}
		})
	}
}

// Without a trusted note there is no lean binary to hand over to: the copy
// says so and runs nothing. A copy not at its published name any more
// hands over.
func TestPublishedCopyWithoutNote(t *testing.T) {
	_, dir, lean, h := publishedSettled(t)
	note := filepath.Join(dir, PublishedPrefix+"timer-warm")
	data, _ := os.ReadFile(note)
	writeRecord(t, note, string(data), 0o666) // writable by others: not trusted
	if got := published(t, dir, "timer-warm", h.boot, true); !strings.HasPrefix(got, "not verified, lean \"\"") || strings.Contains(got, "helper") {
		t.Errorf("an untrusted note: %s", got)
	}
	os.Remove(note)
	if got := published(t, dir, "timer-warm", h.boot, true); !strings.HasPrefix(got, "not verified, lean \"\"") || !strings.Contains(got, "no note") {
		t.Errorf("no note: %s", got)
	}
	_ = lean
}

// Names the clean-up would take for a build, a record or a temporary file,
// or that are not a plain name, are refused; so is a lean binary that is
// not an absolute path.
func TestPublishRefuses(t *testing.T) {
	b, dir, h := settled(t)
	e := h.open(t, dir, b)
	for _, name := range []string{"", ".hidden", "eni-cni-warm", "a/b"} {
		if err := e.Publish(name, leanBinary(t)); err == nil {
			t.Errorf("Publish(%q) succeeded", name)
		}
	}
	if err := e.Publish("timer-warm", "eni-cni"); err == nil {
		t.Error("a relative lean path was accepted")
	}
	mem, err := Memory(b)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if err := mem.Publish("timer-warm", leanBinary(t)); err == nil {
		t.Error("a build in memory was published")
	}
}

// Where the kernel refused to run a cached copy, the published names go:
// the timer's fallback to the lean binary runs only while the name is
// missing, and a name the kernel will not run would fail every tick.
func TestNoExecUnpublishes(t *testing.T) {
	b, dir, h := settled(t)
	e := h.open(t, dir, b)
	if err := e.Publish("timer-warm", leanBinary(t)); err != nil {
		t.Fatal(err)
	}
	e.MarkNoExec(&os.PathError{Op: "fork/exec", Path: e.Path(), Err: unix.EACCES})
	for _, n := range []string{"timer-warm", PublishedPrefix + "timer-warm"} {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			t.Errorf("%s is still there after a refused exec", n)
		}
	}
}

// A cache whose mount became noexec after a copy was published (a remount,
// a new fstab) unpublishes it on the next run that finds it so: the timer
// cannot run the copy, and its fallback to the lean binary runs only while
// the name is missing (ConditionPathExists=!), so a copy left there would
// stop every warm pass. The remount is made in a private mount namespace
// of a child (unshare).
func TestNoexecRemountUnpublishes(t *testing.T) {
	inPrivateMounts(t, "FULLEXEC_REMOUNT_DIR", "remount ok")
}

// remountChild publishes a cached copy in dir, remounts dir noexec (in
// the private namespace) and checks the next Open runs from memory and
// leaves no published name.
func remountChild(dir string) int {
	fail := func(format string, args ...any) int {
		fmt.Printf("remount failed: "+format+"\n", args...)
		return 1
	}
	self, _ := os.Executable()
	data, err := os.ReadFile(self)
	if err != nil {
		return fail("%v", err)
	}
	sum := sha256.Sum256(data)
	b := Build{Data: data, Digest: hex.EncodeToString(sum[:])}
	cache := filepath.Join(dir, "state", ".bin")
	e, err := Open(cache, b)
	if err != nil || !e.Cached {
		return fail("open before the remount: cached %v, %v", e != nil && e.Cached, err)
	}
	if err := e.Publish("timer-warm", self); err != nil {
		return fail("publish: %v", err)
	}
	e.Close()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fail("bind: %v", err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOEXEC, ""); err != nil {
		return fail("remount noexec: %v", err)
	}
	if e, err = Open(cache, b); err != nil || e.Cached {
		return fail("open on the noexec mount: cached %v, %v", e != nil && e.Cached, err)
	}
	e.Close()
	for _, n := range []string{"timer-warm", PublishedPrefix + "timer-warm"} {
		if _, err := os.Lstat(filepath.Join(cache, n)); err == nil {
			return fail("%s is still there on the noexec mount", n)
		}
	}
	fmt.Println("remount ok")
	return 0
}

// Publishing again the copy the name already holds, with a new note (the
// lean binary ran from another path, or two lean runs published at once):
// rename(2) of a link onto a link of the same file does nothing, so the
// temporary link must be removed, not left as a third name of 45 MB.
func TestRepublishLeavesNoTemporaryLink(t *testing.T) {
	b, dir, h := settled(t)
	e := h.open(t, dir, b)
	for _, lean := range []string{leanBinary(t), leanBinary(t)} {
		if err := e.Publish("timer-warm", lean); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), "."+filePrefix) {
			t.Errorf("%s left in the cache", en.Name())
		}
	}
	if st := stat(t, filepath.Join(dir, "timer-warm")); st.Nlink != 2 {
		t.Errorf("the copy has %d links, want 2 (its name and the published one)", st.Nlink)
	}
}
