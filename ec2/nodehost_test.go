package ec2

import (
	"os"
	"path/filepath"
	"testing"
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
