package netconf

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A logFile that is a symlink is not followed (the plugin runs as root:
// appending to whatever a planted link names would be a write anywhere),
// nor is anything but a regular file written; the log goes to stderr.
func TestLogFileSymlinkNotFollowed(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "eni-cni.log")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	(&Config{LogFile: link}).Logger().Info("ADD", "network", "pods")
	if b, _ := os.ReadFile(victim); !bytes.Equal(b, []byte("precious\n")) {
		t.Errorf("the symlink's target was written: %q", b)
	}

	plain := filepath.Join(dir, "plain.log")
	(&Config{LogFile: plain}).Logger().Info("ADD", "network", "pods")
	if b, err := os.ReadFile(plain); err != nil || !strings.Contains(string(b), "network=pods") {
		t.Errorf("a plain log file: %v %q", err, b)
	}
	if fi, err := os.Stat(plain); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("log file mode: %v %v, want 0600", fi.Mode(), err)
	}
}
