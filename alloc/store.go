package alloc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gofrs/flock"

	"github.com/eni-cni/eni-cni/fault"
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
type DiskStore struct {
	dir  string
	held *flock.Flock
}

// NewDiskStore returns a store in dir. The directory (mode 0700) is
// created by the first Lock, not here: read-only commands (list, status,
// doctor) load without the lock and must leave a node that never ran the
// plugin as they found it.
func NewDiskStore(dir string) (*DiskStore, error) {
	if dir == "" {
		return nil, errors.New("state directory is empty")
	}
	return &DiskStore{dir: dir}, nil
}

// Dir is the state directory.
func (d *DiskStore) Dir() string { return d.dir }

// Path is the state file's path, for messages.
func (d *DiskStore) Path() string { return filepath.Join(d.dir, StateFileName) }

func (d *DiskStore) lockPath() string { return filepath.Join(d.dir, LockFileName) }

// Lock waits in the kernel (a blocking flock) rather than polling: with
// dozens of ADDs at once on a small node, pollers steal the CPU the holder
// needs to finish, and the queue collapses into timeouts. The wait is
// bounded by ctx; a waiter that gives up leaves a goroutine that releases
// the lock as soon as it gets it.
func (d *DiskStore) Lock(ctx context.Context) error {
	if d.held != nil {
		return fmt.Errorf("lock %s: already held by this store", d.lockPath())
	}
	fl := flock.New(d.lockPath(), flock.SetPermissions(0o600))
	ok, err := fl.TryLock()
	if errors.Is(err, fs.ErrNotExist) {
		// The first writer on this node creates the directory; checking
		// only on failure keeps a stat off every ADD.
		if err := os.MkdirAll(d.dir, 0o700); err != nil {
			return fmt.Errorf("create state directory: %w", err)
		}
		ok, err = fl.TryLock()
	}
	if err != nil {
		return fmt.Errorf("lock %s: %w", d.lockPath(), err)
	} else if ok {
		d.held = fl
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- fl.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("lock %s: %w", d.lockPath(), err)
		}
		d.held = fl
		return nil
	case <-ctx.Done():
		go func() {
			if err := <-done; err == nil {
				fl.Unlock()
			}
		}()
		return fmt.Errorf("lock %s: %w", d.lockPath(), ErrLockTimeout)
	}
}

func (d *DiskStore) Unlock() error {
	if d.held == nil {
		return fmt.Errorf("unlock %s: not locked", d.lockPath())
	}
	fl := d.held
	d.held = nil
	if err := fl.Unlock(); err != nil {
		return fmt.Errorf("unlock %s: %w", d.lockPath(), err)
	}
	return nil
}

// Load reads the state file. A missing file is a node that never ran the
// plugin; anything else that cannot be parsed is an error naming the file,
// and the file stays as it is.
func (d *DiskStore) Load() (*State, error) {
	path := d.Path()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return NewState(""), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state %s: %w: %w", path, ErrIO, err)
	}
	st, err := decodeState(data)
	if err != nil {
		return nil, fmt.Errorf("read state %s: %w", path, err)
	}
	return st, nil
}

// Save replaces the state file atomically: a reader, or a node that loses
// power, sees either the old file or the new one, never a mix.
func (d *DiskStore) Save(st *State) error {
	data, err := encodeState(st)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if err := writeFileAtomic(d.Path(), data); err != nil {
		return fmt.Errorf("save state %s: %w: %w", d.Path(), ErrIO, err)
	}
	return nil
}

// writeFileAtomic writes data to a temporary file in the same directory,
// syncs it, renames it over path and syncs the directory so the rename
// itself survives a crash. On failure the temporary file is removed.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	fault.Point("save:before-rename")
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	// The new state is in place and visible; a failed directory sync only
	// means the rename might not survive a power loss, after which the
	// boot ID changes and allocations are dropped anyway. Reporting it as
	// a failed save would make callers undo what is already saved.
	_ = syncDir(dir)
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// CleanTemp removes temporary files that a process killed in the middle of
// Save left behind. Call it with the lock held (gc does, every pass).
func (d *DiskStore) CleanTemp() {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), StateFileName+".tmp-") {
			os.Remove(filepath.Join(d.dir, e.Name()))
		}
	}
}

// MemStore is an in-memory Store for tests. It round-trips through the same
// encoding as DiskStore so tests see what the disk would hold.
type MemStore struct {
	mu     sync.Mutex
	held   chan struct{}
	data   []byte
	Saves  int
	SaveFn func(*State) error // optional failure injection
}

func NewMemStore() *MemStore {
	return &MemStore{held: make(chan struct{}, 1)}
}

func (m *MemStore) Lock(ctx context.Context) error {
	select {
	case m.held <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lock memstore: %w", ErrLockTimeout)
	}
}

func (m *MemStore) Unlock() error {
	select {
	case <-m.held:
		return nil
	default:
		return errors.New("unlock memstore: not locked")
	}
}

func (m *MemStore) Load() (*State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		return NewState(""), nil
	}
	return decodeState(m.data)
}

func (m *MemStore) Save(st *State) error {
	if m.SaveFn != nil {
		if err := m.SaveFn(st); err != nil {
			return err
		}
	}
	data, err := encodeState(st)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data = data
	m.Saves++
	return nil
}

// Bytes returns what the store holds, for byte-for-byte comparisons.
func (m *MemStore) Bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]byte(nil), m.data...)
}
