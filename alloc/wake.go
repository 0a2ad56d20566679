package alloc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WakeFileName is rewritten in the state directory whenever addresses may
// have become available to ADDs waiting on a dry pool: `warm` recorded
// addresses or the outcome of its pass, an address was freed without
// cooldown, a waiting attachment was deleted. Waiters watch this file
// rather than state.json: every ADD and DEL of a burst saves the state,
// and waking every waiter on each of those saves would make them queue
// for the lock that the allocating ADDs need.
const WakeFileName = "wake"

// Notifier is implemented by stores that can wake ADDs waiting for an
// address.
type Notifier interface {
	Wake() error
	// Watch starts listening for wake-ups. Call it before looking at the
	// state, so that a wake-up between the look and the wait is not lost.
	Watch() (Watcher, error)
}

// Watcher delivers the wake-ups of one store.
type Watcher interface {
	// Wait returns true as soon as the store has been woken since the
	// watcher was made or Wait last returned true, false when d has
	// passed without a wake-up, and ctx's error when ctx ends first.
	Wait(ctx context.Context, d time.Duration) (bool, error)
	Close() error
}

// errNoNotifier: a store that cannot wake waiters.
var errNoNotifier = errors.New("the state store cannot wake waiting ADDs")

// Wake wakes ADDs waiting on this store for an address.
func (m *Manager) Wake() error {
	n, ok := m.Store.(Notifier)
	if !ok {
		return errNoNotifier
	}
	return n.Wake()
}

// Watch listens for wake-ups of this store.
func (m *Manager) Watch() (Watcher, error) {
	n, ok := m.Store.(Notifier)
	if !ok {
		return nil, errNoNotifier
	}
	return n.Watch()
}

// Wake rewrites the wake file; its close after writing is the event.
func (d *DiskStore) Wake() error {
	path := filepath.Join(d.dir, WakeFileName)
	stamp := strconv.FormatInt(time.Now().UnixNano(), 10) + "\n"
	err := os.WriteFile(path, []byte(stamp), 0o600)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no state directory yet: nobody can be waiting
	}
	if err != nil {
		return fmt.Errorf("wake waiting ADDs: %w", err)
	}
	return nil
}

// Watch watches the state directory with inotify for writes of the wake
// file. The waiter sleeps in poll(2): no CPU is spent until the kernel
// has an event or the time is up.
func (d *DiskStore) Watch() (Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	// IN_MOVED_TO too, for a wake file replaced by rename.
	const events = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO
	_, err = unix.InotifyAddWatch(fd, d.dir, events)
	if errors.Is(err, unix.ENOENT) {
		// As in Lock: the first user on this node creates the directory.
		if err = os.MkdirAll(d.dir, 0o700); err == nil {
			_, err = unix.InotifyAddWatch(fd, d.dir, events)
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch %s: %w", d.dir, err)
	}
	return &inotifyWatcher{fd: fd}, nil
}

type inotifyWatcher struct {
	fd  int
	buf [4096]byte
}

func (w *inotifyWatcher) Wait(ctx context.Context, d time.Duration) (bool, error) {
	deadline := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false, ctx.Err()
		}
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("wait for a wake-up: %w", err)
		}
		if n == 0 {
			continue // timed out: the loop returns at the deadline
		}
		woken, err := w.drain()
		if err != nil || woken {
			return woken, err
		}
	}
}

// drain reads the pending events and reports whether one is a write of
// the wake file (or the kernel dropped events, which may have been one).
func (w *inotifyWatcher) drain() (bool, error) {
	woken := false
	for {
		n, err := unix.Read(w.fd, w.buf[:])
		if errors.Is(err, unix.EAGAIN) || n == 0 {
			return woken, nil
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return woken, fmt.Errorf("read inotify events: %w", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			name := w.buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 || cstring(name) == WakeFileName {
				woken = true
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func (w *inotifyWatcher) Close() error { return unix.Close(w.fd) }

// PollWatcher is the watcher of a waiter that cannot be woken (inotify
// out of instances: fs.inotify.max_user_instances is shared by every
// process of the user). Its Wait sleeps at most Every and reports a
// possible wake-up, so that the waiter looks again on its own.
type PollWatcher struct{ Every time.Duration }

func (p PollWatcher) Wait(ctx context.Context, d time.Duration) (bool, error) {
	woken := d > p.Every
	t := time.NewTimer(min(d, p.Every))
	defer t.Stop()
	select {
	case <-t.C:
		return woken, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (PollWatcher) Close() error { return nil }
