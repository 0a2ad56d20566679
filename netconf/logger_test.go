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

// One process opens its log once: the provider's warnings during a verb go
// through the verb's own writer, not a second open of the file (each open
// is a descriptor never closed and its own rotation check).
func TestLoggerOpensTheFileOnce(t *testing.T) {
	c := &Config{LogFile: filepath.Join(t.TempDir(), "eni-cni.log")}
	first := c.Logger()
	if second := c.Logger(); second != first {
		t.Error("a second Logger() built a second logger over a second open of the file")
	}
	first.Info("ADD", "network", "pods")
	c.Logger().Warn("nodeport", "network", "pods")
	if b, err := os.ReadFile(c.LogFile); err != nil || strings.Count(string(b), "network=pods") != 2 {
		t.Errorf("log: %v %q, want both lines", err, b)
	}
}
