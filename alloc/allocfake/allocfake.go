// Package allocfake is an in-memory alloc.Store for tests, beside the
// interface it fakes and apart from the production code. It round-trips
// every save through the state file's own encoding (alloc.EncodeState,
// alloc.DecodeState), so tests see what the disk would hold, and it wakes
// waiting ADDs (alloc.Notifier) as DiskStore does.
package allocfake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
)

// Store is an in-memory alloc.Store and alloc.Notifier.
type Store struct {
	wake wake
	mu   sync.Mutex
	held chan struct{}
	data []byte
	// Saves counts the saves that succeeded.
	Saves int
	// SaveFn, if set, runs first in every Save; its error fails the save
	// (a full disk, an I/O error).
	SaveFn func(*alloc.State) error
}

var (
	_ alloc.Store    = (*Store)(nil)
	_ alloc.Notifier = (*Store)(nil)
)

// NewStore returns an empty store: its first Load is alloc.MissingState.
func NewStore() *Store {
	return &Store{held: make(chan struct{}, 1)}
}

// Lock takes the store's lock, giving up with alloc.ErrLockTimeout when
// ctx ends first.
func (m *Store) Lock(ctx context.Context) error {
	select {
	case m.held <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lock memstore: %w", alloc.ErrLockTimeout)
	}
}

func (m *Store) Unlock() error {
	select {
	case <-m.held:
		return nil
	default:
		return errors.New("unlock memstore: not locked")
	}
}

func (m *Store) Load() (*alloc.State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		return alloc.MissingState(), nil
	}
	return alloc.DecodeState(m.data)
}

func (m *Store) Save(st *alloc.State) error {
	if m.SaveFn != nil {
		if err := m.SaveFn(st); err != nil {
			return err
		}
	}
	data, err := alloc.EncodeState(st)
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
func (m *Store) Bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]byte(nil), m.data...)
}

// SetBytes makes data what the store holds, unchecked, as a state file
// written by another version or by hand would be.
func (m *Store) SetBytes(data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data = append([]byte(nil), data...)
}

// wake is the store's wake-up broadcast: a generation counter and a
// channel closed on every wake.
type wake struct {
	mu  sync.Mutex
	gen uint64
	ch  chan struct{}
}

func (w *wake) current() (uint64, chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.gen, w.ch
}

// Wake wakes every watcher of the store.
func (m *Store) Wake() error {
	m.wake.mu.Lock()
	defer m.wake.mu.Unlock()
	m.wake.gen++
	if m.wake.ch != nil {
		close(m.wake.ch)
	}
	m.wake.ch = make(chan struct{})
	return nil
}

// Watch listens for the store's wake-ups from now on.
func (m *Store) Watch() (alloc.Watcher, error) {
	gen, _ := m.wake.current()
	return &watcher{w: &m.wake, seen: gen}, nil
}

type watcher struct {
	w    *wake
	seen uint64
}

func (mw *watcher) Wait(ctx context.Context, d time.Duration) (bool, error) {
	gen, ch := mw.w.current()
	if gen != mw.seen {
		mw.seen = gen
		return true, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		mw.seen, _ = mw.w.current()
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (mw *watcher) Close() error { return nil }
