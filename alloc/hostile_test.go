package alloc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gofrs/flock"

	. "github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/atomicfile"
)

// Hostile and broken state directories: every case ends in a clear error
// naming the path, with nothing followed, read through or rewritten.

func validState(t *testing.T) []byte {
	t.Helper()
	st := NewState("boot-1")
	st.Allocations = []Allocation{{Key: key("live"), IP: netip.MustParseAddr("10.0.0.7"), HostVeth: "enilive"}}
	b, err := EncodeState(st)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStateFileSymlinkNotFollowed(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	target := filepath.Join(outside, "elsewhere.json")
	want := validState(t)
	if err := os.WriteFile(target, want, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, StateFileName)); err != nil {
		t.Fatal(err)
	}
	m := newDiskManager(t, dir, "10.0.0.0/24")
	_, _, err := m.Allocate(context.Background(), req("a"))
	if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "symlink") || !strings.Contains(err.Error(), StateFileName) {
		t.Fatalf("err = %v, want ErrInsecure saying the state file is a symlink", err)
	}
	if got, _ := os.ReadFile(target); !bytes.Equal(got, want) {
		t.Error("the symlink's target was changed")
	}
	if fi, err := os.Lstat(filepath.Join(dir, StateFileName)); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the symlink itself was replaced: %v %v", fi, err)
	}
	// A save (repair writes without loading) replaces the link, never its target.
	s, _ := NewDiskStore(dir)
	if err := s.Save(NewState("boot-1")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(target); !bytes.Equal(got, want) {
		t.Error("a save wrote through the symlink")
	}
}

func TestLockFileSymlinkNotFollowed(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	target := filepath.Join(outside, "created-by-us")
	if err := os.Symlink(target, filepath.Join(dir, LockFileName)); err != nil {
		t.Fatal(err)
	}
	m := newDiskManager(t, dir, "10.0.0.0/24")
	_, _, err := m.Allocate(context.Background(), req("a"))
	if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), LockFileName) {
		t.Fatalf("err = %v, want ErrInsecure naming the lock file", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("locking created the symlink's target outside the state dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, StateFileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Error("a state file was written without the lock")
	}
}

// A FIFO at the state or lock path would block open() for ever, with the
// lock held; O_NONBLOCK and the regular-file check make it an error.
func TestFIFOAtStatePaths(t *testing.T) {
	for _, name := range []string{StateFileName, LockFileName} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := syscall.Mkfifo(filepath.Join(dir, name), 0o600); err != nil {
				t.Fatal(err)
			}
			m := newDiskManager(t, dir, "10.0.0.0/24")
			done := make(chan error, 1)
			go func() { _, _, err := m.Allocate(context.Background(), req("a")); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), name) {
					t.Fatalf("err = %v, want ErrInsecure: %s is not a regular file", err, name)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a FIFO at the state path hung the call")
			}
		})
	}
}

func TestStatePathModes(t *testing.T) {
	t.Run("state file writable by others", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, StateFileName)
		os.WriteFile(path, validState(t), 0o600)
		os.Chmod(path, 0o666)
		m := newDiskManager(t, dir, "10.0.0.0/24")
		_, _, err := m.Allocate(context.Background(), req("a"))
		if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "mode 0666") || !strings.Contains(err.Error(), path) {
			t.Fatalf("err = %v, want ErrInsecure naming %s and its mode", err, path)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o666 {
			t.Error("the mode was changed behind the operator's back")
		}
	})
	t.Run("state dir writable by others", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		os.Mkdir(dir, 0o700)
		os.Chmod(dir, 0o777)
		m := newDiskManager(t, dir, "10.0.0.0/24")
		_, _, err := m.Allocate(context.Background(), req("a"))
		if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "mode 0777") {
			t.Fatalf("err = %v, want ErrInsecure for a world-writable state dir", err)
		}
	})
	t.Run("state dir is a file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		os.WriteFile(dir, nil, 0o600)
		s, err := NewDiskStore(dir)
		if err == nil {
			err = s.Lock(context.Background())
		}
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Fatalf("err = %v, want an error naming %s", err, dir)
		}
	})
	t.Run("state dir is a symlink to a good dir", func(t *testing.T) {
		real := t.TempDir()
		link := filepath.Join(t.TempDir(), "state")
		os.Symlink(real, link)
		m := newDiskManager(t, link, "10.0.0.0/24")
		if _, _, err := m.Allocate(context.Background(), req("a")); err != nil {
			t.Fatalf("an operator's symlinked state dir: %v", err)
		}
	})
}

func TestStatePathOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	const nobody = 65534
	for _, name := range []string{StateFileName, LockFileName, ""} {
		t.Run("owner of "+map[string]string{"": "dir"}[name]+name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			os.Mkdir(dir, 0o700)
			path := dir
			if name != "" {
				path = filepath.Join(dir, name)
				os.WriteFile(path, validState(t), 0o600)
			}
			if err := os.Chown(path, nobody, nobody); err != nil {
				t.Fatal(err)
			}
			s, err := NewDiskStore(dir)
			if err == nil {
				m := &Manager{Store: s, Pool: mustRanges(t, "10.0.0.0/24"), BootID: "boot-1", LockTimeout: time.Second}
				_, _, err = m.Allocate(context.Background(), req("a"))
			}
			if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "owned by uid 65534") || !strings.Contains(err.Error(), path) {
				t.Fatalf("err = %v, want ErrInsecure naming %s and its owner", err, path)
			}
		})
	}
}

func TestStateFileTooLarge(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, StateFileName)
	f, _ := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	f.Truncate(MaxStateSize + 1) // sparse: costs nothing on disk
	f.Close()
	m := newDiskManager(t, dir, "10.0.0.0/24")
	_, _, err := m.Allocate(context.Background(), req("a"))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v, want ErrCorrupt: too large", err)
	}
}

// failingFile fails its first write like a full disk would.
type failingFile struct {
	*os.File
	err error
}

func (f failingFile) Write(p []byte) (int, error) { return 0, f.err }

// A save that cannot be written (a full disk, a read-only file system)
// fails the operation with ErrIO; the file is as it was and no temporary
// file is left.
func TestSaveWriteErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		create func(dir, pattern string) (atomicfile.File, error)
	}{
		{"disk full on write", func(dir, pattern string) (atomicfile.File, error) {
			f, err := os.CreateTemp(dir, pattern)
			return failingFile{f, syscall.ENOSPC}, err
		}},
		{"read-only file system", func(dir, pattern string) (atomicfile.File, error) {
			return nil, &fs.PathError{Op: "open", Path: filepath.Join(dir, pattern), Err: syscall.EROFS}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m := newDiskManager(t, dir, "10.0.0.0/24")
			ctx := context.Background()
			if _, _, err := m.Allocate(ctx, req("first")); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(filepath.Join(dir, StateFileName))
			m.Store.(*DiskStore).SetCreateTemp(tc.create)
			_, _, err := m.Allocate(ctx, req("second"))
			if !errors.Is(err, ErrIO) || !strings.Contains(err.Error(), StateFileName) {
				t.Fatalf("err = %v, want ErrIO naming the state file", err)
			}
			after, _ := os.ReadFile(filepath.Join(dir, StateFileName))
			if !bytes.Equal(before, after) {
				t.Error("state changed although the save failed")
			}
			assertNoTempFiles(t, dir)
		})
	}
}

func TestLockTimeoutNamesHolder(t *testing.T) {
	dir := t.TempDir()
	m := newDiskManager(t, dir, "10.0.0.0/24")
	m.LockTimeout = 100 * time.Millisecond
	other := flock.New(filepath.Join(dir, LockFileName))
	if err := other.Lock(); err != nil {
		t.Fatal(err)
	}
	defer other.Unlock()
	_, _, err := m.Allocate(context.Background(), req("a"))
	want := fmt.Sprintf("held by pid %d (", os.Getpid())
	if !errors.Is(err, ErrLockTimeout) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), filepath.Join(dir, LockFileName)) {
		t.Fatalf("err = %v, want a timeout naming the lock file and %q", err, want)
	}
}

func TestLockHoldersParse(t *testing.T) {
	locks := []byte(`1: POSIX  ADVISORY  WRITE 88 00:19:4242 0 EOF
2: FLOCK  ADVISORY  WRITE 1234 08:01:131090 0 EOF
2: -> FLOCK  ADVISORY  WRITE 1240 08:01:131090 0 EOF
3: OFDLCK ADVISORY  READ  -1 08:01:131090 0 EOF
4: FLOCK  ADVISORY  WRITE 77 08:01:99 0 EOF
5: FLOCK  ADVISORY  WRITE 555 fd:10:131090 0 EOF
`)
	got := LockHolders(locks, 8, 1, 131090)
	if len(got) != 1 || got[0] != 1234 {
		t.Errorf("holders %v, want [1234] (not the waiter, not other files)", got)
	}
	if got := LockHolders(locks, 0xfd, 0x10, 131090); len(got) != 1 || got[0] != 555 {
		t.Errorf("hex device numbers: %v, want [555]", got)
	}
}

// TestAllocationOutsidePool: an allocation of an address the pool no
// longer has (the ranges were changed) is kept for its pod, counted apart,
// never handed to another pod, and freed by its DEL.
func TestAllocationOutsidePool(t *testing.T) {
	m, s, _ := newManager(t, "10.0.0.1-10.0.0.2")
	st := NewState("boot-1")
	st.Allocations = []Allocation{{Key: key("old"), IP: netip.MustParseAddr("10.9.9.9"), HostVeth: "eniold"}}
	if err := s.Save(st); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, existed, err := m.Allocate(ctx, req("old"))
	if err != nil || !existed || a.IP.String() != "10.9.9.9" {
		t.Fatalf("repeated ADD of the old pod: %v %v %v", a.IP, existed, err)
	}
	for _, cid := range []string{"n1", "n2"} {
		if a, _, err := m.Allocate(ctx, req(cid)); err != nil || a.IP.String() == "10.9.9.9" {
			t.Fatalf("new pod %s: %v %v", cid, a.IP, err)
		}
	}
	_, c, _ := m.Snapshot(ctx)
	if c != (Counts{Total: 2, Free: 0, Allocated: 2, Outside: 1}) {
		t.Errorf("counts %+v", c)
	}
	if _, found, err := m.Release(ctx, key("old"), netip.Addr{}); err != nil || !found {
		t.Fatalf("DEL of the old pod: %v %v", found, err)
	}
}

// A refused state lock says what every other refusal of the state path
// says, and what docs/operations.md tells operators to look for (code 5
// "state path is not safe to trust"): a symlink, a FIFO, a group-writable
// lock. Before lockfile took over the open, the lock's refusals said it
// too; lockfile's own wording must not replace it.
func TestLockRefusalSaysStatePathNotSafe(t *testing.T) {
	for name, plant := range map[string]func(path string) error{
		"symlink": func(p string) error { return os.Symlink(filepath.Join(t.TempDir(), "x"), p) },
		"fifo":    func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"mode":    func(p string) error { return errors.Join(os.WriteFile(p, nil, 0o600), os.Chmod(p, 0o666)) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := plant(filepath.Join(dir, LockFileName)); err != nil {
				t.Fatal(err)
			}
			m := newDiskManager(t, dir, "10.0.0.0/24")
			_, _, err := m.Allocate(context.Background(), req("a"))
			if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), ErrInsecure.Error()) || !strings.Contains(err.Error(), LockFileName) {
				t.Fatalf("err = %v, want ErrInsecure saying %q and naming the lock", err, ErrInsecure)
			}
		})
	}
}
