package alloc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/atomicfile"
	"github.com/eni-cni/eni-cni/fault"
	"github.com/eni-cni/eni-cni/lockfile"
)

// Store is where the state lives. Load and Save must only be called between
// Lock and Unlock; the lock is what makes concurrent plugin processes safe.
type Store interface {
	// Lock takes the exclusive lock, giving up with ErrLockTimeout when ctx
	// ends first.
	Lock(ctx context.Context) error
	Unlock() error
	// Load returns the saved state, or a new one if nothing was ever saved.
	Load() (*State, error)
	Save(*State) error
}

// ErrLockTimeout is returned when another process holds the lock for longer
// than the caller is willing to wait. Runtimes retry such an ADD.
var ErrLockTimeout = errors.New("timed out waiting for the state lock")

// ErrIO marks a failure to read or write the state file itself.
var ErrIO = errors.New("state file i/o")

// ErrInsecure reports a state directory, state file or lock file that
// eni-cni must not trust: a symlink, not a regular file, owned by another
// user, or writable by group or others. Whoever could have written it could
// have handed a pod's address to another or named the node's own links as
// pod veths. It is never "fixed" silently: the message says what to check.
var ErrInsecure = errors.New("state path is not safe to trust")

// maxStateSize bounds what Load reads: a node's state is tens of kilobytes
// (about 300 bytes per allocation); anything near this is not ours.
const maxStateSize = 64 << 20

// File names inside the state directory.
const (
	StateFileName = "state.json"
	LockFileName  = "state.lock"
)

// DiskStore keeps the state in dir/state.json, guarded by an flock on
// dir/state.lock.
//
// The lock is a separate file because the state file is replaced by rename
// on every save: a lock on the state file itself would be taken on an inode
// that the next save unlinks, and two processes could both "hold" it.
// flock locks belong to the open file description, so they are released when
// the process dies; a crashed plugin never wedges the node.
//
// Nothing in the directory is followed if it is a symlink: the state file
// and the lock (lockfile) are opened with O_NOFOLLOW (and O_NONBLOCK, so a
// FIFO planted there cannot hang a call that holds the lock), and a save
// (atomicfile) creates its temporary file with O_EXCL under a random name
// and renames it over the directory entry, never a symlink's target. The
// directory itself may be a symlink (an operator moving /var/lib/eni-cni to
// another disk); its target must pass the same owner and mode checks.
type DiskStore struct {
	dir  string
	held *lockfile.File
	// readOnly (SetReadOnly): Lock creates nothing, Save and SetAside
	// refuse; noLock is a read-only Lock's hold when there was no lock
	// file to take (no writer ever ran here).
	readOnly, noLock bool
	// save writes the state file; tests set its CreateTemp to inject
	// write errors (a full disk) without filling one.
	save atomicfile.Writer
	// memo is the last state Load decoded, kept when ReuseDecoded.
	memo *memo
}

// memo is a decoded state and the bytes it was decoded from.
type memo struct {
	mu  sync.Mutex
	raw []byte
	st  *State
}

// NewDiskStore returns a store in dir. The directory (mode 0700) is
// created by the first Lock, not here: read-only commands (list, status,
// doctor) load without the lock and must leave a node that never ran the
// plugin as they found it. The directory must be owned by this user and not
// writable by others; Lock checks it.
func NewDiskStore(dir string) (*DiskStore, error) {
	if dir == "" {
		return nil, errors.New("state directory is empty")
	}
	return &DiskStore{dir: dir, save: atomicfile.Writer{BeforeRename: beforeRename}}, nil
}

// beforeRename is the crash point of a save: the new state is complete and
// synced in its temporary file, not yet in place. A named function, not a
// closure: the production build then drops the point's name (and
// TestFaultPointsAbsentFromProduction checks it does).
func beforeRename() { fault.Point("save:before-rename") }

// checkDir is made by every Lock (one stat, against the milliseconds of an
// ADD): an untrusted directory fails the store's operations with
// ErrInsecure, and DEL can still tear a pod down without the store
// (plugin/plugin.go). The first writer on a node creates the directory.
func (d *DiskStore) checkDir() error {
	fi, err := os.Stat(d.dir)
	if errors.Is(err, fs.ErrNotExist) && d.readOnly {
		return err
	}
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(d.dir, 0o700); err != nil {
			return fmt.Errorf("create state directory: %w", err)
		}
		fi, err = os.Stat(d.dir)
	}
	if err != nil {
		return fmt.Errorf("state directory %s: %w", d.dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state directory %s: %w: not a directory", d.dir, ErrInsecure)
	}
	return trusted(d.dir, fi)
}

// trusted checks that only this user can have written what fi describes.
func trusted(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("%s: %w: owned by uid %d, not by uid %d that runs eni-cni (chown it, or check who wrote it)", path, ErrInsecure, st.Uid, uid)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%s: %w: mode %04o lets group or others write it (want 0700 for the directory, 0600 for files)", path, ErrInsecure, perm)
	}
	return nil
}

// Dir is the state directory.
func (d *DiskStore) Dir() string { return d.dir }

// SetReadOnly makes the store fit for a dry run, which must leave the node
// as it found it: Lock neither creates the state directory nor the lock
// file (without them there is no state and no writer to wait for, so it
// holds nothing), and Save and SetAside fail with ErrReadOnly.
func (d *DiskStore) SetReadOnly() { d.readOnly = true }

// Path is the state file's path, for messages.
func (d *DiskStore) Path() string { return filepath.Join(d.dir, StateFileName) }

func (d *DiskStore) lockPath() string { return filepath.Join(d.dir, LockFileName) }

// LockExists reports whether the lock file is there (created by the first
// Lock of a writer; never removed).
func (d *DiskStore) LockExists() bool {
	_, err := os.Lstat(d.lockPath())
	return err == nil
}

// Lock waits in the kernel (a blocking flock) rather than polling: with
// dozens of ADDs at once on a small node, pollers steal the CPU the holder
// needs to finish, and the queue collapses into timeouts. The wait is
// bounded by ctx; a waiter that gives up leaves a goroutine that releases
// the lock as soon as it gets it.
//
// On a timeout the message names the lock file and, from /proc/locks, the
// process that holds it, so a stuck holder can be found and dealt with.
func (d *DiskStore) Lock(ctx context.Context) error {
	if d.held != nil || d.noLock {
		return fmt.Errorf("lock %s: already held by this store", d.lockPath())
	}
	err := d.checkDir()
	if d.readOnly && errors.Is(err, fs.ErrNotExist) {
		d.noLock = true
		return nil
	}
	if err != nil {
		return err
	}
	start := time.Now()
	flag := os.O_CREATE | os.O_RDONLY
	if d.readOnly {
		flag = os.O_RDONLY
	}
	lf, err := lockfile.Open(d.lockPath(), flag)
	if d.readOnly && errors.Is(err, fs.ErrNotExist) {
		d.noLock = true
		return nil
	}
	if errors.Is(err, lockfile.ErrUnsafe) {
		return fmt.Errorf("lock: %w", insecureLock{err})
	}
	if err != nil {
		return fmt.Errorf("lock %s: %w", d.lockPath(), err)
	}
	err = lf.LockContext(ctx)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("lock %s: %w (waited %s%s)", d.lockPath(), ErrLockTimeout,
			time.Since(start).Round(time.Millisecond), describeHolders(d.lockPath()))
	}
	if err != nil {
		lf.Close()
		return fmt.Errorf("lock %s: %w", d.lockPath(), err)
	}
	d.held = lf
	return nil
}

// insecureLock is lockfile's refusal of the state lock as ErrInsecure,
// in ErrInsecure's words (code 5 "state path is not safe to trust", which
// operators are told to look for), not lockfile's, and without saying
// twice that the path is not safe.
type insecureLock struct{ error }

func (e insecureLock) Error() string {
	return strings.Replace(e.error.Error(), lockfile.ErrUnsafe.Error(), ErrInsecure.Error(), 1)
}
func (e insecureLock) Unwrap() error      { return e.error }
func (insecureLock) Is(target error) bool { return target == ErrInsecure }

func (d *DiskStore) Unlock() error {
	if d.noLock {
		d.noLock = false
		return nil
	}
	if d.held == nil {
		return fmt.Errorf("unlock %s: not locked", d.lockPath())
	}
	lf := d.held
	d.held = nil
	if err := lf.Close(); err != nil {
		return fmt.Errorf("unlock %s: %w", d.lockPath(), err)
	}
	return nil
}

// Load reads the state file. A missing file gives a new state marked
// Missing (see Manager.OnMissing); anything that cannot be parsed or
// trusted is an error naming the file, and the file stays as it is.
func (d *DiskStore) Load() (*State, error) {
	path := d.Path()
	data, err := d.ReadRaw()
	if errors.Is(err, fs.ErrNotExist) {
		return MissingState(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state %s: %w", path, err)
	}
	if st := d.memo.get(data); st != nil {
		return st, nil
	}
	st, err := DecodeState(data)
	if err != nil {
		return nil, fmt.Errorf("read state %s: %w", path, err)
	}
	d.memo.put(data, st)
	return st, nil
}

// ReuseDecoded makes Load decode the file only when its bytes differ from
// those it last decoded, and hand out a copy of that state otherwise. A
// warm pass on a settled node looks at the store about ten times, each
// under the lock and each reading the file whole, so it still sees every
// change another process saves; decoding it was most of those looks.
func (d *DiskStore) ReuseDecoded() {
	if d.memo == nil {
		d.memo = &memo{}
	}
}

// get returns a copy of the state decoded from raw, or nil.
func (m *memo) get(raw []byte) *State {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.st == nil || !bytes.Equal(m.raw, raw) {
		return nil
	}
	return m.st.Clone()
}

// put keeps a copy of st, decoded from raw: the caller changes its own.
func (m *memo) put(raw []byte, st *State) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.raw, m.st = raw, st.Clone()
}

// ReadRaw returns the bytes of the state file after checking that it is a
// regular file of ours; fs.ErrNotExist if there is none. `eni-cni repair`
// uses it to salvage what it can from a file Load refuses.
func (d *DiskStore) ReadRaw() ([]byte, error) {
	path := d.Path()
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, err
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%w: it is a symlink (eni-cni never follows one out of the state directory)", ErrInsecure)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrIO, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIO, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: not a regular file (%s)", ErrInsecure, fi.Mode().Type())
	}
	if err := trusted(path, fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxStateSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIO, err)
	}
	if len(data) > maxStateSize {
		return nil, fmt.Errorf("%w: larger than %d MiB", ErrCorrupt, maxStateSize>>20)
	}
	return data, nil
}

// SetAside keeps the state file as state.json.bad-<UTC time> and returns
// that path. `eni-cni repair` keeps a file it cannot use this way: it is
// never deleted, an operator may want what is in it. The file is hard-linked
// (copied and synced where the file system has no hard links), not renamed:
// the state file stays in place until the rebuilt state is saved over it,
// so a save that fails (a full disk) leaves it as it was, for the next
// repair to salvage from, rather than a store with no file at all.
func (d *DiskStore) SetAside(now time.Time) (string, error) {
	if d.readOnly {
		return "", fmt.Errorf("set %s aside: %w", d.Path(), ErrReadOnly)
	}
	base := d.Path() + ".bad-" + now.UTC().Format("20060102T150405Z")
	for i := 0; ; i++ {
		dst := base
		if i > 0 {
			dst = fmt.Sprintf("%s.%d", base, i)
		}
		err := os.Link(d.Path(), dst) // link(2) does not follow a symlink at the source
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			err = copyAside(d.Path(), dst)
			if errors.Is(err, fs.ErrExist) {
				continue
			}
		}
		if err != nil {
			return "", fmt.Errorf("set %s aside: %w", d.Path(), err)
		}
		_ = atomicfile.SyncDir(d.dir)
		return dst, nil
	}
}

// copyAside copies the regular file src to the new file dst and syncs it.
func copyAside(src, dst string) (err error) {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s)", src, fi.Mode().Type())
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(dst)
		}
	}()
	if _, err = io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err = out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Save replaces the state file atomically: a reader, or a node that loses
// power, sees either the old file or the new one, never a mix.
func (d *DiskStore) Save(st *State) error {
	if d.readOnly {
		return fmt.Errorf("save state %s: %w", d.Path(), ErrReadOnly)
	}
	data, err := EncodeState(st)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if err := d.save.WriteFile(d.Path(), data, 0o600); err != nil {
		return fmt.Errorf("save state %s: %w: %w", d.Path(), ErrIO, err)
	}
	return nil
}

// CleanTemp removes temporary files that a process killed in the middle of
// Save left behind. Call it with the lock held (gc does, every pass).
func (d *DiskStore) CleanTemp() {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), atomicfile.TempPrefix(StateFileName)) {
			os.Remove(filepath.Join(d.dir, e.Name()))
		}
	}
}
