// Package atomicfile replaces files so that a reader, or a node that loses
// power, sees either the old content or the new one, never a part of one.
//
// A write goes to a temporary file in the target's directory (named
// <base>.tmp-<random>, see TempPrefix), which gets its mode, the data and an
// fsync, and is then renamed over the target; the directory is synced so
// the rename itself survives a crash. On any failure before the rename the
// temporary file is removed and the target is as it was.
//
// Dangers: the target is replaced, not written through: a symlink at the
// path is itself replaced (its target is left alone), and hard links to the
// old file keep the old content. The directory must be writable and on one
// file system with the target. A process killed mid-write leaves its
// temporary file behind; callers that care sweep names with TempPrefix.
package atomicfile

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// File is the temporary file a write goes through: an *os.File, or a test's
// wrapper of one that fails like a full disk.
type File interface {
	io.Writer
	Chmod(fs.FileMode) error
	Sync() error
	Close() error
	Name() string
}

// Writer replaces files atomically. The zero Writer is ready to use.
type Writer struct {
	// CreateTemp makes the temporary file as os.CreateTemp does (nil:
	// os.CreateTemp); tests inject write errors through it.
	CreateTemp func(dir, pattern string) (File, error)
	// BeforeRename, if set, runs when the temporary file is complete and
	// synced, just before it replaces the target (a crash point).
	BeforeRename func()
	// NoSync skips both fsyncs, for files whose loss in a power cut is
	// harmless (a record of counters that may start again): readers
	// still never see a part of a file, but after a crash the target may
	// hold the old content, or be empty on file systems that do not
	// flush a file renamed over another. The syncs were most of the CPU
	// of such a write.
	NoSync bool
}

// WriteFile replaces path with data, mode perm, with the zero Writer.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Writer{}.WriteFile(path, data, perm)
}

// TempPrefix is how the names of path's temporary files begin.
func TempPrefix(path string) string { return filepath.Base(path) + ".tmp-" }

// WriteFile replaces path with data, mode perm.
func (w Writer) WriteFile(path string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := w.createTemp(dir, TempPrefix(path)+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if !w.NoSync {
		if err = f.Sync(); err != nil {
			return err
		}
	}
	if err = f.Close(); err != nil {
		return err
	}
	if w.BeforeRename != nil {
		w.BeforeRename()
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	// The new content is in place and visible: a failed directory sync
	// only means the rename might not survive a power loss, and reporting
	// it would tell the caller that a write failed which did not.
	if !w.NoSync {
		_ = SyncDir(dir)
	}
	return nil
}

func (w Writer) createTemp(dir, pattern string) (File, error) {
	if w.CreateTemp != nil {
		return w.CreateTemp(dir, pattern)
	}
	return os.CreateTemp(dir, pattern)
}

// SyncDir makes the entries of dir durable: a rename or a new link in it
// survives a power loss once SyncDir returns nil.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
