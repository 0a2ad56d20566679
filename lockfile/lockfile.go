// Package lockfile opens the files eni-cni takes flock(2) locks on, in
// directories where a planted file must not turn a root process against
// the node. A lock file is opened without following a symlink
// (O_NOFOLLOW), without blocking on a FIFO put in its place (O_NONBLOCK),
// never inherited by a child (O_CLOEXEC) and created with mode 0600; it is
// then checked on the open descriptor: a regular file, owned by the user
// that runs this process, not writable by group or others. Anything else
// is ErrUnsafe and never locked.
//
// The locks are flock(2) locks: they belong to the open file description,
// so two Opens of one path in one process exclude each other as two
// processes do, and a process that dies releases its locks with its
// descriptors; a crashed plugin never wedges the node. Close releases the
// lock.
//
// Locks are advisory: they exclude only processes that take them too.
// Lock and LockContext block in the kernel rather than poll, so that many
// waiters do not steal the CPU the holder needs to finish.
package lockfile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrUnsafe reports a lock path that must not be trusted: a symlink, not
// a regular file, owned by another user, or writable by group or others.
// Whoever could write it could hold the lock against us or have us lock
// (and, for a file that also holds data, write) something else.
var ErrUnsafe = errors.New("not safe to trust")

// File is an open lock file. Its embedded *os.File is there for files that
// hold data under their own lock (read and write them while locked).
type File struct{ *os.File }

// Open opens the lock file at path with flag: os.O_RDONLY or os.O_RDWR,
// plus os.O_CREATE to create it (mode 0600) if it is missing. Without
// O_CREATE a missing file is an error matching fs.ErrNotExist.
func Open(path string, flag int) (*File, error) {
	flag |= unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	f, err := os.OpenFile(path, flag, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s: %w: it is a symlink", path, ErrUnsafe)
	}
	if err != nil {
		return nil, err
	}
	if err := check(f); err != nil {
		f.Close()
		return nil, err
	}
	return &File{f}, nil
}

// check refuses what only this user must have written but might not have.
func check(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: %w: not a regular file (%s)", f.Name(), ErrUnsafe, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: %w: owned by uid %d, not by uid %d that runs eni-cni (chown it, or check who wrote it)", f.Name(), ErrUnsafe, st.Uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%s: %w: mode %04o lets group or others write it (want 0600)", f.Name(), ErrUnsafe, perm)
	}
	return nil
}

// Lock takes the exclusive lock, waiting for as long as it is held.
func (f *File) Lock() error { return f.flock(unix.LOCK_EX) }

// RLock takes a shared lock, waiting while an exclusive one is held.
func (f *File) RLock() error { return f.flock(unix.LOCK_SH) }

// TryLock takes the exclusive lock if nobody holds it; false if somebody
// does.
func (f *File) TryLock() (bool, error) {
	err := f.flock(unix.LOCK_EX | unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// LockContext takes the exclusive lock, giving up with an error matching
// ctx.Err() when ctx ends first. Then it closes f (do not use it again):
// the wait it abandons releases the lock as soon as it gets it.
func (f *File) LockContext(ctx context.Context) error {
	if ok, err := f.TryLock(); ok || err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f.Lock() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		go func() {
			<-done
			f.Close()
		}()
		return fmt.Errorf("lock %s: %w", f.Name(), ctx.Err())
	}
}

// Unlock releases the lock and keeps the file open.
func (f *File) Unlock() error { return f.flock(unix.LOCK_UN) }

func (f *File) flock(how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
