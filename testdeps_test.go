package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallTestDepsRefusesForeignRuntime: scripts/install-test-deps.sh
// never installs Debian's containerd and runc over another build of them
// (Docker's containerd.io, a binary installed by hand): it stops, naming
// what it found, before apt runs or anything is written.
func TestInstallTestDepsRefusesForeignRuntime(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian system: no dpkg-query")
	}
	fake := t.TempDir()
	for _, name := range []string{"containerd", "runc"} {
		if err := os.WriteFile(filepath.Join(fake, name), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tools := filepath.Join(t.TempDir(), "tools")
	cmd := exec.Command("bash", "scripts/install-test-deps.sh", "--check-runtime", "--tools", tools)
	cmd.Env = append(os.Environ(), "PATH="+fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("want exit 1, got %v:\n%s", err, out)
	}
	for _, want := range []string{
		filepath.Join(fake, "containerd") + " (installed by hand",
		filepath.Join(fake, "runc") + " (installed by hand",
		"will not install them over another",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(tools); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused run created %s (%v)", tools, err)
	}
}
