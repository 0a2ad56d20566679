// Package logfile owns eni-cni's log file: appends from many short-lived
// plugin processes at once, capped in size with numbered rotation
// (path.1 is the newest rotated file). Each process opens the file with
// O_APPEND, so lines never interleave; rotation happens under an flock on
// path+".lock", and a process whose file was rotated away under it
// reopens the path before writing.
package logfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/eni-cni/eni-cni/lockfile"
)

// Writer appends to a size-capped log file. It is safe for one process's
// goroutines; other processes coordinate through the lock file.
type Writer struct {
	path    string
	maxSize int64 // 0: never rotate
	keep    int   // rotated files kept
	mu      sync.Mutex
	f       *os.File
}

// Open opens path for appending, creating it (0600) if needed. A file
// larger than maxSize is rotated on the next write; keep rotated files
// (path.1 … path.keep) are kept.
func Open(path string, maxSize int64, keep int) (*Writer, error) {
	f, err := openAppend(path)
	if err != nil {
		return nil, err
	}
	return &Writer{path: path, maxSize: maxSize, keep: max(keep, 1), f: f}, nil
}

// openAppend opens the log without following a symlink, and only if it is
// a regular file: we run as root, and a link planted where the log goes (a
// directory others can write) would have us append to any file it names.
func openAppend(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open log %s: not a regular file", path)
	}
	return f, nil
}

// Write appends p (one log record) as one write.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.maxSize > 0 {
		if fi, err := w.f.Stat(); err == nil && fi.Size() > 0 && fi.Size()+int64(len(p)) > w.maxSize {
			// A failed rotation must not fail the CNI call: the record
			// goes to the file we have.
			_ = w.rotate(len(p))
		}
	}
	return w.f.Write(p)
}

// rotate, under the lock: if the path still names our file and it is
// still too full, shift path.N-1 → path.N … path → path.1 and start a new
// file; if another process rotated already, just reopen the path.
func (w *Writer) rotate(need int) error {
	// Like the log itself, the lock is never opened through a symlink.
	lock, err := lockfile.Open(w.path+".lock", os.O_CREATE|os.O_RDONLY)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := lock.Lock(); err != nil {
		return err
	}
	ours, err := w.f.Stat()
	if err != nil {
		return err
	}
	cur, err := os.Stat(w.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return w.reopen()
	case err != nil:
		return err
	case !os.SameFile(ours, cur):
		return w.reopen()
	case cur.Size() == 0 || cur.Size()+int64(need) <= w.maxSize:
		return nil
	}
	for i := w.keep - 1; i >= 1; i-- {
		if err := os.Rename(fmt.Sprintf("%s.%d", w.path, i), fmt.Sprintf("%s.%d", w.path, i+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(w.path, w.path+".1"); err != nil {
		return err
	}
	return w.reopen()
}

func (w *Writer) reopen() error {
	f, err := openAppend(w.path)
	if err != nil {
		return err
	}
	w.f.Close()
	w.f = f
	return nil
}

// Close closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Close()
}
