package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
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
	newLogger(&config{LogFile: link}).Info("ADD", "network", "pods")
	if b, _ := os.ReadFile(victim); !bytes.Equal(b, []byte("precious\n")) {
		t.Errorf("the symlink's target was written: %q", b)
	}

	plain := filepath.Join(dir, "plain.log")
	newLogger(&config{LogFile: plain}).Info("ADD", "network", "pods")
	if b, err := os.ReadFile(plain); err != nil || !strings.Contains(string(b), "network=pods") {
		t.Errorf("a plain log file: %v %q", err, b)
	}
	if fi, err := os.Stat(plain); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("log file mode: %v %v, want 0600", fi.Mode(), err)
	}
}

// The one log line of a verb names the attachment and the outcome; it
// never carries the configuration from stdin (which may hold other
// plugins' settings, or a runtime's secrets in runtimeConfig).
func TestVerbLogHasNoStdin(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "log")
	conf := `{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","stateDir":"` + dir + `/state","logFile":"` + logFile +
		`","pool":{"source":"static","ranges":["10.99.0.0/30"]},"runtimeConfig":{"secret":"s3cr3t-token"},"prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.99.0.1/32"}]}}`
	if err := cmdStatus(&skel.CmdArgs{StdinData: []byte(conf)}); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	b, err := os.ReadFile(logFile)
	if err != nil || !strings.Contains(string(b), "STATUS") {
		t.Fatalf("log: %v %q", err, b)
	}
	if strings.Contains(string(b), "s3cr3t") || strings.Contains(string(b), "runtimeConfig") {
		t.Errorf("the log carries stdin: %q", b)
	}
}
