package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/eni-cni/eni-cni/atomicfile"
)

// sameFile reports whether path already holds data with mode perm, so a
// second install can say "unchanged" and write nothing.
func sameFile(path string, data []byte, perm fs.FileMode) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != perm || fi.Size() != int64(len(data)) {
		return false
	}
	have, err := os.ReadFile(path)
	return err == nil && bytes.Equal(have, data)
}

// writeAtomic replaces path with data (atomicfile), creating its
// directory: a runtime that execs the plugin or reads the conflist
// meanwhile sees the old file or the new one, never a part of one; a crash
// leaves at worst a temporary file, never a truncated binary under the
// real name.
func writeAtomic(path string, data []byte, perm fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, perm)
}

// fileStep writes data to the node path p (below the root) unless it is
// already there.
func fileStep(l Layout, p string, data []byte, perm fs.FileMode, what string) Step {
	full := l.In(p)
	if sameFile(full, data, perm) {
		return Note("unchanged %s (%s)", full, what)
	}
	return Step{
		Desc: fmt.Sprintf("write %s (%s, mode %04o)", full, what, perm),
		Do:   doNoCtx(func() error { return writeAtomic(full, data, perm) }),
	}
}

// doNoCtx adapts a change that needs no context to Step.Do.
func doNoCtx(f func() error) func(context.Context) error {
	return func(context.Context) error { return f() }
}

// symlinkStep makes the node path link point at target, an absolute node
// path: systemctl enable writes the same, and it resolves inside the image
// or on the node, whatever root it was written under.
func symlinkStep(l Layout, link, target string) Step {
	full := l.In(link)
	if have, err := os.Readlink(full); err == nil && have == target {
		return Note("unchanged %s -> %s", full, target)
	}
	return Step{
		Desc: fmt.Sprintf("link %s -> %s", full, target),
		Do: doNoCtx(func() error {
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				return err
			}
			if err := os.Remove(full); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return os.Symlink(target, full)
		}),
	}
}

// removeStep removes the node path p if it exists (a file, a symlink or,
// with all, a directory tree).
func removeStep(l Layout, p string, all bool, what string) Step {
	full := l.In(p)
	if _, err := os.Lstat(full); errors.Is(err, fs.ErrNotExist) {
		return Note("absent %s (%s)", full, what)
	}
	return Step{
		Desc:       fmt.Sprintf("remove %s (%s)", full, what),
		BestEffort: true,
		Do: doNoCtx(func() error {
			if all {
				return os.RemoveAll(full)
			}
			if err := os.Remove(full); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		}),
	}
}
