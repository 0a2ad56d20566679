// Package lockfiletest plants what a caller of package lockfile must
// refuse in place of its lock file, for the tests of every caller: each
// must show it opens its lock through lockfile, not that lockfile works
// (lockfile's own tests do that).
package lockfiletest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Elsewhere is the name, beside the lock, that the planted symlink points
// at: it must not exist after the caller refused the lock.
const Elsewhere = "elsewhere"

// Unsafe returns a planter per hazard: a symlink (to Elsewhere), a FIFO
// (whose open would block without O_NONBLOCK), and a regular file others
// may write.
func Unsafe() map[string]func(t testing.TB, path string) {
	return map[string]func(t testing.TB, path string){
		"symlink": func(t testing.TB, p string) {
			if err := os.Symlink(filepath.Join(filepath.Dir(p), Elsewhere), p); err != nil {
				t.Fatal(err)
			}
		},
		"fifo": func(t testing.TB, p string) {
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"world-writable": func(t testing.TB, p string) {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, 0o666); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// FollowedSymlink reports whether the planted symlink's target was
// created, i.e. the caller followed it.
func FollowedSymlink(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, Elsewhere))
	return err == nil
}
