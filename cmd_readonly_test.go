package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	root := t.TempDir()
	confDir, stateDir := filepath.Join(root, "net.d"), filepath.Join(root, "state", "eni-cni")
	os.Mkdir(confDir, 0o700)
	conf := `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni","stateDir":"` + stateDir +
		`","pool":{"source":"static","ranges":["10.99.0.0/29"]}}]}`
	os.WriteFile(filepath.Join(confDir, "10.conflist"), []byte(conf), 0o600)
	for _, args := range [][]string{{"list"}, {"list", "--json"}, {"status"}, {"status", "--json"}} {
		code, out, errs := run(append(args, "--conf-dir", confDir)...)
		if code != 0 {
			t.Errorf("%v: exit %d: %s %s", args, code, out, errs)
		}
		if _, err := os.Stat(filepath.Join(root, "state")); !os.IsNotExist(err) {
			t.Fatalf("%v created %s", args, filepath.Join(root, "state"))
		}
	}
}
