package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/gc/crifake"
)

// TestDryRunsCreateNothing: a dry run, like the read-only commands, leaves
// a node as it found it. On a node where the plugin never ran (no state
// directory) it must not create the directory or its lock file, and on one
// whose directory exists without a lock file it must not create that.
func TestDryRunsCreateNothing(t *testing.T) {
	if leanBuild {
		t.Skip("the lean build execs the full build in place of the test process; covered by the default build")
	}
	cri := crifake.Start(t)
	cri.SetSandboxes(crifake.PodSandbox("0123456789abcdef", "default", "web", "uid", true, time.Now()))
	commands := [][]string{
		{"repair", "--dry-run", "--cri-endpoint", cri.Endpoint()},
		{"gc", "--dry-run", "--cri-endpoint", cri.Endpoint()},
		{"list"},
		{"status"},
	}
	for _, args := range commands {
		for _, existing := range []bool{false, true} {
			name := args[0]
			if existing {
				name += "/empty directory"
			}
			t.Run(name, func(t *testing.T) {
				confDir, stateDir := writeConflist(t)
				if existing {
					if err := os.Mkdir(stateDir, 0o700); err != nil {
						t.Fatal(err)
					}
				}
				code, out, errs := run(append(args, "--conf-dir", confDir)...)
				t.Logf("exit %d\n%s%s", code, out, errs)
				if !existing {
					if _, err := os.Lstat(stateDir); err == nil {
						t.Fatalf("%v created the state directory %s", args, stateDir)
					}
					return
				}
				entries, err := os.ReadDir(stateDir)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range entries {
					t.Errorf("%v created %s", args, filepath.Join(stateDir, e.Name()))
				}
			})
		}
	}
}
