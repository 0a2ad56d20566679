package lockfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func open(t *testing.T, path string) *File {
	t.Helper()
	f, err := Open(path, os.O_CREATE|os.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestCreatesPrivateRegularFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	open(t, path)
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v %v, want a regular file of mode 0600", fi, err)
	}
}

func TestMissingWithoutCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	if _, err := Open(path, os.O_RDONLY); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want ErrNotExist", err)
	}
	if _, err := os.Lstat(path); err == nil {
		t.Error("created without O_CREATE")
	}
}

func TestSymlinkRefused(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim")
	path := filepath.Join(dir, "x.lock")
	os.Symlink(victim, path)
	_, err := Open(path, os.O_CREATE|os.O_RDWR)
	if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "symlink") || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want ErrUnsafe naming %s, a symlink", err, path)
	}
	if _, err := os.Lstat(victim); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the symlink's target was created: %v", err)
	}
}

// A FIFO planted at the path would block open(2) for ever without
// O_NONBLOCK, whichever way it is opened.
func TestFIFODoesNotBlock(t *testing.T) {
	for name, flag := range map[string]int{"read": os.O_RDONLY, "create": os.O_CREATE | os.O_RDONLY, "read-write": os.O_RDWR} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.lock")
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := Open(path, flag); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "not a regular file") {
					t.Fatalf("err = %v, want ErrUnsafe: not a regular file", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a FIFO at the lock path blocked Open")
			}
		})
	}
}

func TestDirectoryRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	os.Mkdir(path, 0o700)
	if _, err := Open(path, os.O_RDONLY); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("err = %v, want ErrUnsafe: not a regular file", err)
	}
}

func TestWritableByOthersRefused(t *testing.T) {
	for _, perm := range []fs.FileMode{0o620, 0o602, 0o666} {
		path := filepath.Join(t.TempDir(), "x.lock")
		os.WriteFile(path, nil, 0o600)
		os.Chmod(path, perm)
		_, err := Open(path, os.O_CREATE|os.O_RDONLY)
		if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), fmt.Sprintf("mode %04o lets group or others write", perm)) {
			t.Fatalf("mode %04o: err = %v, want ErrUnsafe naming the mode", perm, err)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != perm {
			t.Errorf("the mode was changed to %04o", fi.Mode().Perm())
		}
	}
	// Readable by others is fine: nobody else can change what it is.
	path := filepath.Join(t.TempDir(), "x.lock")
	os.WriteFile(path, nil, 0o644)
	os.Chmod(path, 0o644)
	open(t, path)
}

func TestOtherOwnerRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	path := filepath.Join(t.TempDir(), "x.lock")
	os.WriteFile(path, nil, 0o600)
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, os.O_CREATE|os.O_RDONLY)
	if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "owned by uid 65534") || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want ErrUnsafe naming %s and its owner", err, path)
	}
}

// Two opens of one path exclude each other as two processes would; Close
// and Unlock release.
func TestExclusion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	a, b := open(t, path), open(t, path)
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryLock(); ok || err != nil {
		t.Fatalf("second TryLock while held: %v %v, want false", ok, err)
	}
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock after Unlock: %v %v", ok, err)
	}
	b.Close()
	if ok, err := a.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock after the holder's Close: %v %v", ok, err)
	}
}

func TestSharedLocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	a, b, w := open(t, path), open(t, path), open(t, path)
	if err := a.RLock(); err != nil {
		t.Fatal(err)
	}
	if err := b.RLock(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := w.TryLock(); ok {
		t.Fatal("exclusive lock taken while shared ones are held")
	}
}

// LockContext gives up when ctx ends, with ctx's error, and the wait it
// abandons releases the lock once it gets it.
func TestLockContextTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	holder := open(t, path)
	// Not open(): after the timeout the abandoned wait owns the file and
	// closes it; a cleanup closing it too raced that wait (-race saw it).
	waiter, err := Open(path, os.O_CREATE|os.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Lock(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = waiter.LockContext(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want DeadlineExceeded naming %s", err, path)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("gave up after %s", d)
	}
	holder.Unlock()
	third := open(t, path)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := third.LockContext(ctx); err != nil {
		t.Fatalf("the abandoned wait kept the lock: %v", err)
	}
}

func TestLockContextWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	holder, waiter := open(t, path), open(t, path)
	holder.Lock()
	// The flock hand-over is no synchronisation the race detector sees:
	// wait for the unlocking goroutine before cleanup closes holder.
	unlocked := make(chan struct{})
	time.AfterFunc(50*time.Millisecond, func() { holder.Unlock(); close(unlocked) })
	if err := waiter.LockContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-unlocked
	if ok, _ := holder.TryLock(); ok {
		t.Error("the waiter's lock is not held")
	}
}

// An upgrade must not refuse the lock files earlier releases left: they
// created state.lock, imds.lock, runs.lock and logFile.lock through
// gofrs/flock (mode 0600, less the umask) and the counters file with
// mode 0600, and their state-lock check let a file readable by others
// (0644) pass. Refusing any of these would fail every CNI call on the node.
func TestAcceptsLockFilesOfEarlierReleases(t *testing.T) {
	dir := t.TempDir()
	for name, mode := range map[string]fs.FileMode{"0600": 0o600, "0644": 0o644, "0400": 0o400, "0640": 0o640} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, nil, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path, os.O_CREATE|os.O_RDONLY)
		if err != nil {
			t.Errorf("mode %s: %v", name, err)
			continue
		}
		if ok, err := f.TryLock(); !ok || err != nil {
			t.Errorf("mode %s: lock: %v %v", name, ok, err)
		}
		f.Close()
	}
}
