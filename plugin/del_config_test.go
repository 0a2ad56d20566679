package plugin

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/netconf"
)

// TestDelToleratesValuesItDoesNotUse: after an ADD, a DEL whose
// configuration has a value DEL never uses that is invalid (or changed)
// frees the address and succeeds, logging a warning that names the value.
// Each case used to fail DEL with code 7 and strand the pod in Terminating.
func TestDelToleratesValuesItDoesNotUse(t *testing.T) {
	for name, mod := range map[string]map[string]any{
		"logLevel warning":         {"logLevel": "warning"},
		"mtu changed":              {"mtu": 1500},
		"mtu out of range":         {"mtu": 70000},
		"mtu of the wrong type":    {"mtu": "9001"},
		"gcGraceSeconds 30":        {"gcGraceSeconds": 30},
		"cooldownSeconds 1":        {"cooldownSeconds": 1},
		"relative logFile":         {"logFile": "eni-cni.log"},
		"bad range":                {"pool": map[string]any{"source": "static", "ranges": []string{"10.99.0.0/33"}}},
		"unknown key":              {"warmIPTargt": 3},
		"capability not supported": {"capabilities": map[string]bool{"ips": true}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			logFile := filepath.Join(dir, "log")
			good := map[string]any{"cniVersion": "1.0.0", "name": "pods", "type": "eni-cni", "stateDir": filepath.Join(dir, "state"),
				"logFile": logFile, "pool": map[string]any{"source": "static", "ranges": []string{"10.99.0.0/30"}}}
			w := newFakeWire()
			cfg, err := netconf.Parse(mustJSON(t, good))
			if err != nil {
				t.Fatal(err)
			}
			p, err := OpenWith(cfg, ec2.InProcess{}, w)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.add(context.Background(), att("c1")); err != nil {
				t.Fatal(err)
			}
			bad := maps.Clone(good)
			maps.Copy(bad, mod)
			args := &skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: mustJSON(t, bad)}
			if err := (CNI{Full: ec2.InProcess{}, Wire: w}).Del(args); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			st, _, err := p.Mgr.Snapshot(context.Background())
			if err != nil || len(st.Allocations) != 0 || len(st.Cooling) != 1 {
				t.Errorf("after DEL: %v allocations %+v cooling %+v, want the address cooling", err, st.Allocations, st.Cooling)
			}
			if _, relative := mod["logFile"]; relative || name == "mtu changed" {
				return // logged to stderr; a valid value
			}
			b, _ := os.ReadFile(logFile)
			if !strings.Contains(string(b), "level=WARN") || !strings.Contains(string(b), "DEL ignores") {
				t.Errorf("no warning in the log:\n%s", b)
			}
		})
	}
}

// TestDelStillNeedsItsIdentity: what DEL does use is validated as before.
func TestDelStillNeedsItsIdentity(t *testing.T) {
	for conf, code := range map[string]uint{
		`{"cniVersion":"1.0.0","name":"","type":"eni-cni"}`:                               7,
		`{"cniVersion":"1.0.0","name":"pods","stateDir":"state"}`:                         7,
		`{"cniVersion":"1.0.0","name":"pods","stateDir":"/"}`:                             7,
		`{"cniVersion":"1.0.0","name":"pods","stateDir":"/tmp/x","hostVethPrefix":"Bad"}`: 7,
		`{"cniVersion":"1.0.0","name":"pods","stateDir":5}`:                               6,
		`not json`: 6,
	} {
		err := (CNI{Full: ec2.InProcess{}, Wire: newFakeWire()}).Del(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: []byte(conf)})
		if ce := toCNIError(err); err == nil || ce.Code != code {
			t.Errorf("DEL with %s: %v, want code %d", conf, err, code)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
