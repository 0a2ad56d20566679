package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/plugin"
)

// writeConflist writes a conflist with a static pool into a fresh conf dir.
func writeConflist(t *testing.T) (confDir, stateDir string) {
	t.Helper()
	root := t.TempDir()
	confDir, stateDir = filepath.Join(root, "net.d"), filepath.Join(root, "state")
	os.Mkdir(confDir, 0o700)
	conf := `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni","stateDir":"` + stateDir +
		`","pool":{"source":"static","ranges":["10.99.0.0/29"]}}]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-pods.conflist"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return confDir, stateDir
}

func run(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = runCommand(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestListJSON(t *testing.T) {
	confDir, stateDir := writeConflist(t)
	store, _ := alloc.NewDiskStore(stateDir)
	boot, _ := alloc.ReadBootID()
	rs, _ := alloc.ParseRanges([]string{"10.99.0.0/29"})
	m := &alloc.Manager{Store: store, Pool: rs, BootID: boot, Cooldown: 30e9}
	r := alloc.Request{Key: alloc.Key{Network: "pods", ContainerID: "0123456789abcdef", IfName: "eth0"},
		PodNamespace: "default", PodName: "web", PodUID: "u1", HostVeth: "eni123"}
	if _, _, err := m.Allocate(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run("list", "--conf-dir", confDir, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var l struct {
		Pool        map[string]int           `json:"pool"`
		Allocations []map[string]interface{} `json:"allocations"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if l.Pool["total"] != 6 || l.Pool["allocated"] != 1 || l.Pool["free"] != 5 || l.Pool["cooling"] != 0 {
		t.Errorf("pool %v", l.Pool)
	}
	if len(l.Allocations) != 1 {
		t.Fatalf("allocations %v", l.Allocations)
	}
	for _, k := range []string{"network", "containerID", "ifname", "ip", "podNamespace", "podName", "podUID", "hostVeth", "eni", "allocatedAt"} {
		if _, ok := l.Allocations[0][k]; !ok {
			t.Errorf("list --json lacks %q", k)
		}
	}
	code, out, _ = run("list", "--conf-dir", confDir)
	lines := strings.Split(out, "\n")
	if code != 0 || len(lines) < 4 || !strings.Contains(out, "total 6, free 5") {
		t.Fatalf("table output:\n%s", out)
	}
	// Aligned: each column starts at the same offset in the header and rows.
	head, row := lines[0], lines[1]
	for _, col := range []struct{ name, value string }{{"POD", "web"}, {"NAMESPACE", "default"}, {"IP", "10.99.0."}, {"ENI", "-"}, {"AGE", "0s"}, {"CONTAINER", "0123456789ab"}, {"IFNAME", "eth0"}, {"HOST VETH", "eni123"}} {
		i := strings.Index(head, col.name)
		if i < 0 || !strings.HasPrefix(row[i:], col.value) {
			t.Errorf("column %s: header %q, row %q", col.name, head, row)
		}
	}
}

func TestStatusCommand(t *testing.T) {
	confDir, stateDir := writeConflist(t)
	code, out, errs := run("status", "--conf-dir", confDir)
	if code != 0 || !strings.Contains(out, "ready") {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	// status is read-only: it left no state directory behind to write into.
	os.MkdirAll(stateDir, 0o700)
	os.WriteFile(filepath.Join(stateDir, alloc.StateFileName), []byte("{broken"), 0o600)
	code, _, errs = run("status", "--conf-dir", confDir)
	if code == 0 || !strings.Contains(errs, "cannot serve ADD") || !strings.Contains(errs, alloc.StateFileName) || strings.Count(errs, "\n") != 1 {
		t.Errorf("corrupt store: exit %d, stderr %q", code, errs)
	}
}

func TestCommandUsage(t *testing.T) {
	if code, out, _ := run("version"); code != 0 || !strings.HasPrefix(out, "eni-cni ") {
		t.Errorf("version: %d %q", code, out)
	}
	if code, _, errs := run("frobnicate"); code != 2 || !strings.Contains(errs, "unknown command") {
		t.Errorf("unknown command: %d %q", code, errs)
	}
	if code, _, _ := run(); code != 2 {
		t.Errorf("no command: %d", code)
	}
	if code, _, errs := run("list", "--bogus"); code != 2 || !strings.Contains(errs, "bogus") {
		t.Errorf("bad flag: %d %q", code, errs)
	}
	if code, _, errs := run("list", "--conf-dir", t.TempDir()); code != 1 || !strings.Contains(errs, "no config") {
		t.Errorf("no config: %d %q", code, errs)
	}
}

func TestStatusJSON(t *testing.T) {
	confDir, stateDir := writeConflist(t)
	code, out, errs := run("status", "--conf-dir", confDir, "--json")
	var r plugin.StatusReport
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || !r.Ready || r.Pool == nil || r.Pool.Total != 6 || r.Network != "pods" {
		t.Fatalf("exit %d, %v: %s %s", code, err, out, errs)
	}
	os.MkdirAll(stateDir, 0o700)
	os.WriteFile(filepath.Join(stateDir, alloc.StateFileName), []byte("{broken"), 0o600)
	code, out, _ = run("status", "--conf-dir", confDir, "--json")
	r = plugin.StatusReport{}
	if err := json.Unmarshal([]byte(out), &r); code == 0 || err != nil || r.Ready || !strings.Contains(r.Error, "cannot serve ADD") {
		t.Errorf("corrupt store: exit %d, %v: %s", code, err, out)
	}
}
