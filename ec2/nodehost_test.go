package ec2

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/eni-cni/eni-cni/atomicfile"
)

// TestReadSeenTrustsOnlyOurFile: the witness that lets a pass skip listing
// the mangle table is read only from a regular file of ours that nobody
// else may write; anything else is no memory (the table is listed).
func TestReadSeenTrustsOnlyOurFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, MarkSeenName)
	if got := readSeen(path); got != "" {
		t.Errorf("no file: %q", got)
	}
	if err := os.WriteFile(path, []byte("witness"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := readSeen(path); got != "witness" {
		t.Errorf("our file: %q", got)
	}
	if err := os.Chmod(path, 0o620); err != nil {
		t.Fatal(err)
	}
	if got := readSeen(path); got != "" {
		t.Errorf("group-writable file: %q; want nothing", got)
	}
	other := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(other, []byte("planted"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	if got := readSeen(link); got != "" {
		t.Errorf("symlink: %q; want nothing", got)
	}
	if got := readSeen(""); got != "" {
		t.Errorf("no path: %q", got)
	}
}

// syncCounter is a temporary file that counts its fsyncs.
type syncCounter struct {
	*os.File
	syncs *int
}

func (f syncCounter) Sync() error { *f.syncs++; return f.File.Sync() }

// TestWriteSeenSkipsFsync: the witness changes on most passes of an
// iptables-nft node, and losing it costs one listing, so it is written
// without fsyncs; readSeen still trusts what it wrote.
func TestWriteSeenSkipsFsync(t *testing.T) {
	path := filepath.Join(t.TempDir(), MarkSeenName)
	syncs := 0
	w := atomicfile.Writer{CreateTemp: func(dir, pattern string) (atomicfile.File, error) {
		f, err := os.CreateTemp(dir, pattern)
		return syncCounter{f, &syncs}, err
	}}
	for _, witness := range []string{"gen 1", "gen 2"} {
		if err := writeSeen(w, path, witness); err != nil {
			t.Fatal(err)
		}
		if got := readSeen(path); got != witness {
			t.Errorf("readSeen after writing %q: %q", witness, got)
		}
	}
	if syncs != 0 {
		t.Errorf("%d fsyncs of the witness, want none", syncs)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("witness file: %v, %v; want mode 0600", fi, err)
	}
}
