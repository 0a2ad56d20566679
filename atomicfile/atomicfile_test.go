package atomicfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestWriteFileReplacesWithMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, tc := range []struct {
		data string
		perm fs.FileMode
	}{{"one", 0o600}, {"two, longer", 0o644}, {"3", 0o755}} {
		if err := WriteFile(path, []byte(tc.data), tc.perm); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != tc.data || fi.Mode() != tc.perm {
			t.Errorf("got %q mode %v, want %q mode %v", got, fi.Mode(), tc.data, tc.perm)
		}
	}
	assertNoTemp(t, dir)
}

// A symlink at the path is replaced; what it points to is left alone.
func TestWriteFileReplacesSymlinkNotTarget(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	target := filepath.Join(outside, "victim")
	os.WriteFile(target, []byte("keep"), 0o600)
	path := filepath.Join(dir, "f")
	os.Symlink(target, path)
	if err := WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(target); string(got) != "keep" {
		t.Errorf("the symlink's target was written: %q", got)
	}
	if fi, _ := os.Lstat(path); !fi.Mode().IsRegular() {
		t.Errorf("path is %v, want a regular file", fi.Mode())
	}
}

// A failed rename (a non-empty directory where the file should go) leaves
// no temporary file.
func TestWriteFileRenameFailureCleansUp(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "d")
	os.Mkdir(bad, 0o700)
	os.WriteFile(filepath.Join(bad, "x"), nil, 0o600)
	if err := WriteFile(bad, []byte("two"), 0o600); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	assertNoTemp(t, dir)
}

// failing fails like a full disk at one step.
type failing struct {
	*os.File
	write, sync, close error
}

func (f failing) Write(p []byte) (int, error) {
	if f.write != nil {
		return 0, f.write
	}
	return f.File.Write(p)
}

func (f failing) Sync() error {
	if f.sync != nil {
		return f.sync
	}
	return f.File.Sync()
}

func (f failing) Close() error {
	if f.close != nil {
		f.File.Close()
		return f.close
	}
	return f.File.Close()
}

// Whatever step fails, the error is returned, the old file is whole and no
// temporary file is left; a reader never sees a part of the new one.
func TestWriteFileFailuresKeepOldFile(t *testing.T) {
	for name, f := range map[string]failing{
		"write": {write: syscall.ENOSPC},
		"sync":  {sync: syscall.EIO},
		"close": {close: syscall.EDQUOT},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			old := bytes.Repeat([]byte("old "), 1000)
			os.WriteFile(path, old, 0o600)
			renamed := false
			w := Writer{
				CreateTemp: func(dir, pattern string) (File, error) {
					tf, err := os.CreateTemp(dir, pattern)
					f.File = tf
					return f, err
				},
				BeforeRename: func() { renamed = true },
			}
			err := w.WriteFile(path, []byte("new"), 0o600)
			if err == nil || !errors.Is(err, f.write) && !errors.Is(err, f.sync) && !errors.Is(err, f.close) {
				t.Fatalf("err = %v, want the injected one", err)
			}
			if renamed {
				t.Error("BeforeRename ran although the file was not complete")
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, old) {
				t.Errorf("the old file was changed: %.20q", got)
			}
			assertNoTemp(t, dir)
		})
	}
}

// At BeforeRename the new content is complete in the temporary file while
// the target still holds the old content: a crash there loses nothing.
func TestBeforeRenameSeesCompleteTempAndOldTarget(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	os.WriteFile(path, []byte("old"), 0o600)
	called := false
	w := Writer{BeforeRename: func() {
		called = true
		if got, _ := os.ReadFile(path); string(got) != "old" {
			t.Errorf("target before the rename: %q", got)
		}
		tmp, _ := filepath.Glob(filepath.Join(dir, TempPrefix(path)+"*"))
		if len(tmp) != 1 {
			t.Fatalf("temporary files %v, want one", tmp)
		}
		if got, _ := os.ReadFile(tmp[0]); string(got) != "new" {
			t.Errorf("temporary file before the rename: %q", got)
		}
	}}
	if err := w.WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !called {
		t.Fatal("BeforeRename not called")
	}
	if got, _ := os.ReadFile(path); string(got) != "new" {
		t.Errorf("target after: %q", got)
	}
}

func TestCreateTempFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	w := Writer{CreateTemp: func(dir, pattern string) (File, error) {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: syscall.EROFS}
	}}
	if err := w.WriteFile(path, []byte("x"), 0o600); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("err = %v, want EROFS", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("target created: %v", err)
	}
}

// A read-only directory fails the write before anything is created.
func TestWriteFileReadOnlyDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only directory")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o500)
	defer os.Chmod(dir, 0o700)
	if err := WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600); err == nil {
		t.Fatal("write into a read-only directory succeeded")
	}
	assertNoTemp(t, dir)
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Errorf("sync of a directory: %v", err)
	}
	if err := SyncDir(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("sync of a missing directory: %v, want ErrNotExist", err)
	}
}

// A directory that can be written but not opened (mode 0300) fails its
// sync after the rename: the write happened, so WriteFile reports none.
func TestDirSyncFailureIsNoWriteFailure(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root opens a directory of mode 0300")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	os.Chmod(dir, 0o300)
	defer os.Chmod(dir, 0o700)
	if SyncDir(dir) == nil {
		t.Fatal("the directory sync did not fail; the test proves nothing")
	}
	if err := WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatalf("a write whose directory sync failed: %v", err)
	}
	os.Chmod(dir, 0o700)
	if got, _ := os.ReadFile(path); string(got) != "new" {
		t.Errorf("got %q", got)
	}
}

// Readers racing with writes see one whole version or the other, never a
// part of one.
func TestNoPartialFileVisible(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	const size = 256 << 10
	versions := [][]byte{bytes.Repeat([]byte("a"), size), bytes.Repeat([]byte("b"), size)}
	if err := WriteFile(path, versions[0], 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	bad := make(chan string, 1)
	go func() {
		defer close(bad)
		for {
			select {
			case <-done:
				return
			default:
			}
			got, err := os.ReadFile(path)
			if err != nil {
				bad <- err.Error()
				return
			}
			if !bytes.Equal(got, versions[0]) && !bytes.Equal(got, versions[1]) {
				bad <- "a reader saw " + strconv.Itoa(len(got)) + " bytes that are neither version"
				return
			}
		}
	}()
	for i := range 100 {
		if err := WriteFile(path, versions[i%2], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	if msg, ok := <-bad; ok {
		t.Fatal(msg)
	}
}

// syncCounter is a temporary file that counts its fsyncs.
type syncCounter struct {
	*os.File
	syncs *int
}

func (s syncCounter) Sync() error { *s.syncs++; return s.File.Sync() }

// TestNoSyncSkipsOnlyTheSyncs: NoSync writes and replaces as the zero
// Writer does, without fsyncing the file; the zero Writer fsyncs it.
func TestNoSyncSkipsOnlyTheSyncs(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "f")
		if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		syncs := 0
		w := Writer{NoSync: noSync, CreateTemp: func(dir, pattern string) (File, error) {
			f, err := os.CreateTemp(dir, pattern)
			return syncCounter{f, &syncs}, err
		}}
		if err := w.WriteFile(path, []byte("new"), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		fi, serr := os.Stat(path)
		if err != nil || serr != nil || string(got) != "new" || fi.Mode().Perm() != 0o640 {
			t.Errorf("NoSync %v: %q (%v, %v), mode %v", noSync, got, err, serr, fi.Mode())
		}
		if want := map[bool]int{false: 1, true: 0}[noSync]; syncs != want {
			t.Errorf("NoSync %v: %d fsyncs of the file, want %d", noSync, syncs, want)
		}
		assertNoTemp(t, dir)
	}
}
