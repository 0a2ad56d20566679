package fullexec

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hashes is a verifier that hashes for real and counts it, in a boot of
// the test's choosing, with a clock an hour ahead: files just written are
// old enough to record (TestYoungFileNotRecorded keeps the real clock).
type hashes struct {
	n    int
	boot string
}

func (h *hashes) verifier() verifier {
	return verifier{
		digest: func(f *os.File) (string, error) { h.n++; return digestOf(f) },
		bootID: func() (string, error) { return h.boot, nil },
		now:    func() time.Time { return time.Now().Add(time.Hour) },
	}
}

// open opens the build like Open, through h, and wants the cached copy.
func (h *hashes) open(t *testing.T, dir string, b Build) *Exe {
	t.Helper()
	e, err := h.verifier().open(dir, b, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if !e.Cached {
		t.Fatal("the build ran from memory, not from the cache")
	}
	return e
}

// settled caches b in a new directory and records its digest, as the
// first two runs on a node do (the first writes, the second hashes).
func settled(t *testing.T) (b Build, dir string, h *hashes) {
	t.Helper()
	b, dir, h = selfBuild(t), cacheDirIn(t), &hashes{boot: "boot-1"}
	h.open(t, dir, b)
	if h.n != 0 {
		t.Fatalf("%d hashes of the copy just written, want none", h.n)
	}
	h.open(t, dir, b)
	if h.n != 1 {
		t.Fatalf("%d hashes on the second run, want 1", h.n)
	}
	if _, err := os.Lstat(filepath.Join(dir, recordName(b))); err != nil {
		t.Fatalf("no record after the hash: %v", err)
	}
	return b, dir, h
}

func stat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// nextTick waits until a change made now gets a later ctime than path's:
// the kernel stamps files with a coarse clock, and a test that changes a
// file within the tick of its record would see a change no timestamp
// shows (the race racyWindow keeps out of production).
func nextTick(t *testing.T, path string) {
	t.Helper()
	probe := filepath.Join(filepath.Dir(path), "probe")
	defer os.Remove(probe)
	then := stat(t, path).Ctim
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		os.Remove(probe)
		if err := os.WriteFile(probe, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if now := stat(t, probe).Ctim; now.Nano() > then.Nano() {
			return
		}
	}
	t.Fatal("file timestamps did not move in 3 s")
}

// A settled cache runs without hashing, read-only commands too; without
// the record the next run hashes and records again.
func TestRecordSkipsTheHash(t *testing.T) {
	b, dir, h := settled(t)
	for range 3 {
		runs(t, h.open(t, dir, b))
	}
	e, err := h.verifier().open(dir, b, false)
	if err != nil || !e.Cached {
		t.Fatalf("read-only open: %v, cached %t", err, err == nil && e.Cached)
	}
	e.Close()
	if h.n != 1 {
		t.Errorf("%d hashes in all, want only the settling one", h.n)
	}
	rec := filepath.Join(dir, recordName(b))
	if st := stat(t, rec); st.Mode&0o7777 != 0o600 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Errorf("record mode %o, want a regular file 0600", st.Mode)
	}
	if err := os.Remove(rec); err != nil {
		t.Fatal(err)
	}
	h.open(t, dir, b)
	h.open(t, dir, b)
	if h.n != 2 {
		t.Errorf("%d hashes after the record was removed, want one more", h.n-1)
	}
}

// Any change to the cached file after its record, even one that restores
// its size and mtime, is checked again: hashed, unless what fstat shows
// fails it already; what fails is replaced, never run.
func TestChangedFileIsVerifiedAgain(t *testing.T) {
	cases := []struct {
		name     string
		hashed   bool // the change needs the hash to be seen
		replaced bool // the change makes the copy fail: a new file is written
		change   func(t *testing.T, path string, b Build)
	}{
		{"modified in place, size and mtime restored", true, true, func(t *testing.T, path string, b Build) {
			before := stat(t, path)
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{b.Data[len(b.Data)/2] ^ 0xff}, int64(len(b.Data)/2)); err != nil {
				t.Fatal(err)
			}
			f.Close()
			mtime := []unix.Timespec{before.Atim, before.Mtim}
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, mtime, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated", false, true, func(t *testing.T, path string, b Build) {
			if err := os.Truncate(path, int64(len(b.Data)/2)); err != nil {
				t.Fatal(err)
			}
		}},
		{"chmod to world-writable", false, true, func(t *testing.T, path string, b Build) {
			if err := os.Chmod(path, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
		{"chmod that keeps it usable", true, false, func(t *testing.T, path string, b Build) {
			if err := os.Chmod(path, 0o500); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced by another file", true, true, func(t *testing.T, path string, b Build) {
			renameOver(t, path, []byte("#!/bin/sh\nexit 0\n"+string(make([]byte, len(b.Data)-17))))
		}},
		{"replaced by a genuine copy", true, false, func(t *testing.T, path string, b Build) {
			renameOver(t, path, b.Data)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, dir, h := settled(t)
			path := filepath.Join(dir, b.name())
			nextTick(t, filepath.Join(dir, recordName(b)))
			c.change(t, path, b)
			changed := stat(t, path).Ino
			runs(t, h.open(t, dir, b))
			want := 1
			if c.hashed {
				want++
			}
			if h.n != want {
				t.Errorf("%d hashes after the change, want %d", h.n-1, want-1)
			}
			if replaced := stat(t, path).Ino != changed; replaced != c.replaced {
				t.Errorf("replaced %t, want %t", replaced, c.replaced)
			}
			// A copy that passed its hash was recorded by it; one Open
			// wrote is hashed once, on the next run.
			h.open(t, dir, b)
			if c.replaced {
				want++
			}
			if h.n != want {
				t.Errorf("%d hashes in all, want %d", h.n, want)
			}
		})
	}
}

// renameOver puts data at path as a new file of the same size and mode,
// as root could: a new inode under the old name.
func renameOver(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// A record that does not vouch for the very file opened, or that someone
// else could have written, is not trusted: the file (damaged here) is
// hashed, replaced and never run. The control, a faithful record of the
// damaged file in its place, shows that the record alone decides.
func TestForgedRecordNotTrusted(t *testing.T) {
	cases := []struct {
		name    string
		root    bool
		trusted bool
		plant   func(t *testing.T, rec string, b Build, st unix.Stat_t)
	}{
		{"control: faithful, root's, 0600", false, true, func(t *testing.T, rec string, b Build, st unix.Stat_t) {
			writeRecord(t, rec, recordOf(b, "boot-1", st), 0o600)
		}},
		{"another digest", false, false, func(t *testing.T, rec string, b Build, st unix.Stat_t) {
			b.Digest = "00000000000000000000000000000000000000000000000000000000000000ff"
			writeRecord(t, rec, recordOf(b, "boot-1", st), 0o600)
		}},
		{"another inode", false, false, func(t *testing.T, rec string, b Build, st unix.Stat_t) {
			st.Ino++
			writeRecord(t, rec, recordOf(b, "boot-1", st), 0o600)
		}},
		{"another ctime", false, false, func(t *testing.T, rec string, b Build, st unix.Stat_t) {
			st.Ctim.Nsec ^= 1
			writeRecord(t, rec, recordOf(b, "boot-1", st), 0o600)
		}},
		{"another boot", false, false, func(t *testing.T, rec string, b Build, st unix.Stat_t) {
			writeRecord(t, rec, recordOf(b, "boot-0", st), 0o600)
		}},
		{"world-writable", false, false, func(t *testing.T, rec string, b Build, st unix.Stat_t) {
			writeRecord(t, rec, recordOf(b, "boot-1", st), 0o666)
		}},
		{"group-writable", false, false, func(t *testing.T, rec string, b Build, st unix.Stat_t) {
			writeRecord(t, rec, recordOf(b, "boot-1", st), 0o620)
		}},
		{"a symlink to a faithful one", false, false, func(t *testing.T, rec string, b Build, st unix.Stat_t) {
			target := filepath.Join(t.TempDir(), "record")
			writeRecord(t, target, recordOf(b, "boot-1", st), 0o600)
			if err := os.Symlink(target, rec); err != nil {
				t.Fatal(err)
			}
		}},
		{"owned by nobody", true, false, func(t *testing.T, rec string, b Build, st unix.Stat_t) {
			writeRecord(t, rec, recordOf(b, "boot-1", st), 0o600)
			if err := os.Chown(rec, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
		{"a fifo", false, false, func(t *testing.T, rec string, _ Build, _ unix.Stat_t) {
			if err := unix.Mkfifo(rec, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			b, dir, h := settled(t)
			path, rec := filepath.Join(dir, b.name()), filepath.Join(dir, recordName(b))
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("damaged"), int64(len(b.Data)/2)); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err := os.Remove(rec); err != nil {
				t.Fatal(err)
			}
			damaged := stat(t, path)
			c.plant(t, rec, b, damaged)
			e, err := h.verifier().open(dir, b, true)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if trusted := h.n == 1 && stat(t, path).Ino == damaged.Ino; trusted != c.trusted {
				t.Fatalf("record trusted %t (%d hashes), want %t", trusted, h.n-1, c.trusted)
			}
			if !c.trusted {
				runs(t, e)
			}
		})
	}
}

func writeRecord(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// A file whose ctime is not older than the hash by racyWindow is hashed
// again next run, not recorded: a write just after the hash could carry
// the same timestamp.
func TestYoungFileNotRecorded(t *testing.T) {
	b, dir := selfBuild(t), cacheDirIn(t)
	h := &hashes{boot: "boot-1"}
	v := h.verifier()
	v.now = time.Now
	for range 3 {
		if _, err := v.open(dir, b, true); err != nil {
			t.Fatal(err)
		}
	}
	if h.n != 2 {
		t.Errorf("%d hashes, want 2 (the first run writes the copy)", h.n)
	}
	if _, err := os.Lstat(filepath.Join(dir, recordName(b))); err == nil {
		t.Error("a file younger than racyWindow was recorded")
	}
}

// A record holds for one boot; read-only commands hash without recording.
func TestRecordPerBootAndNotReadOnly(t *testing.T) {
	b, dir, h := settled(t)
	h.boot = "boot-2"
	e, err := h.verifier().open(dir, b, false)
	if err != nil || !e.Cached {
		t.Fatalf("read-only open: %v", err)
	}
	e.Close()
	h.open(t, dir, b)
	h.open(t, dir, b)
	if h.n != 3 {
		t.Errorf("%d hashes after the reboot, want 2 (read-only, then the recording run)", h.n-1)
	}
	h.boot = ""
	h.open(t, dir, b)
	if h.n != 4 {
		t.Errorf("without a boot ID: %d hashes, want the record ignored", h.n-3)
	}
}
