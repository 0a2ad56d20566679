package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	cniversion "github.com/containernetworking/cni/pkg/version"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/netconf"
)

// noFull is the EC2 side of a fuzzed invocation: it reaches nothing.
type noFull struct{}

var errNoFull = errors.New("no EC2 in this test")

func (noFull) RefreshIMDS(context.Context, *netconf.Config, *alloc.Manager) (provider.Refreshed, error) {
	return provider.Refreshed{}, errNoFull
}
func (noFull) CheckIMDS(context.Context, *netconf.Config) error { return errNoFull }
func (noFull) WarmCommand(*netconf.Config, string) (*exec.Cmd, func(), error) {
	return nil, nil, errNoFull
}

// fuzzNetns are the CNI_NETNS values a fuzzed invocation may name: opening
// an arbitrary path could block on a FIFO, and none of these is a pod's.
var fuzzNetns = []string{"", "/proc/self/ns/net", "/etc/hostname", "/etc", "/nonexistent/netns", "/dev/null"}

// FuzzVerb drives whole invocations (environment and stdin) through the
// plugin's process boundary, CNI.Main, with the node's kernel faked. It
// fails on a panic, and on any stdout that is not what the CNI spec allows
// for the exit code: on success a result (ADD), a version answer (VERSION)
// or nothing; on failure one CNI error with a code and a message. The
// configuration is confined: its stateDir and logFile to a temporary
// directory, metrics off, the pool static (the ec2 source would reach for
// IMDS and start warm). Seeds: testdata/fuzz/FuzzVerb; `make test` runs it
// briefly, `make fuzz` longer.
func FuzzVerb(f *testing.F) {
	f.Add("ADD", "c1", "eth0", "K8S_POD_NAME=web", uint8(1), []byte(`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","pool":{"source":"static","ranges":["10.99.0.0/30"]}}`))
	f.Add("CHECK", "c1", "eth0", "", uint8(2), []byte(`{"cniVersion":"1.0.0","name":"pods","prevResult":{"cniVersion":"1.0.0","ips":[null],"interfaces":[null]}}`))
	f.Add("DEL", "c1", "eth0", "", uint8(0), []byte(`{"cniVersion":"1.0.0","name":"pods","logLevel":"warning","mtu":"x"}`))
	f.Add("GC", "", "", "", uint8(0), []byte(`{"cniVersion":"1.1.0","name":"pods","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"},null]}`))
	f.Add("STATUS", "", "", "", uint8(0), []byte(`{"cniVersion":"1.1.0","name":"pods"}`))
	f.Add("VERSION", "", "", "", uint8(0), []byte(`{"cniVersion":"1.1.0"}`))
	f.Fuzz(func(t *testing.T, command, containerID, ifName, cniArgs string, netns uint8, stdin []byte) {
		env := map[string]string{"CNI_COMMAND": command, "CNI_CONTAINERID": containerID, "CNI_IFNAME": ifName,
			"CNI_ARGS": cniArgs, "CNI_NETNS": fuzzNetns[int(netns)%len(fuzzNetns)], "CNI_PATH": "/nonexistent"}
		for _, v := range env {
			if strings.ContainsRune(v, 0) {
				return // an environment cannot carry NUL
			}
		}
		stdin = confine(t, stdin)
		out, code := invoke(t, env, stdin)
		checkOutput(t, command, code, out)
	})
}

// confine points a configuration object's side effects into t's temporary
// directory; anything else is passed as it is (it fails to decode).
func confine(t *testing.T, stdin []byte) []byte {
	var conf map[string]any
	if json.Unmarshal(stdin, &conf) != nil || conf == nil {
		return stdin
	}
	dir := t.TempDir()
	conf["stateDir"], conf["logFile"], conf["metricsFile"] = filepath.Join(dir, "state"), filepath.Join(dir, "log"), "off"
	if pool, ok := conf["pool"].(map[string]any); !ok || pool["source"] != "static" {
		conf["pool"] = map[string]any{"source": "static", "ranges": []string{"10.99.0.0/30"}}
	}
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// invoke runs one invocation in this process as the binary would run it,
// with env as its CNI environment and stdin, and returns its stdout and
// exit code.
func invoke(t *testing.T, env map[string]string, stdin []byte) ([]byte, int) {
	dir := t.TempDir()
	in, out, errOut := filepath.Join(dir, "stdin"), filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")
	if err := os.WriteFile(in, stdin, 0o600); err != nil {
		t.Fatal(err)
	}
	files := make([]*os.File, 3)
	for i, p := range []string{in, out, errOut} {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	saved := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	os.Stdin, os.Stdout, os.Stderr = files[0], files[1], files[2]
	defer func() { os.Stdin, os.Stdout, os.Stderr = saved[0], saved[1], saved[2] }()
	for k, v := range env {
		t.Setenv(k, v)
	}
	c := CNI{Full: noFull{}, Wire: newFakeWire(), Host: func(string) gc.Host { return &fakeHost{} }}
	done := make(chan int, 1)
	go func() { done <- c.Main("eni-cni fuzz") }()
	var code int
	select {
	case code = <-done:
	case <-time.After(20 * time.Second):
		panic(fmt.Sprintf("invocation with %q and stdin %q still running after 20 s", env, stdin))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b, code
}

// checkOutput fails unless stdout is what the CNI spec allows for the
// verb and exit code.
func checkOutput(t *testing.T, command string, code int, stdout []byte) {
	if code != 0 {
		var e types.Error
		if err := json.Unmarshal(stdout, &e); err != nil || e.Code == 0 || e.Msg == "" {
			t.Fatalf("%s failed (exit %d) with stdout %q: not a CNI error with a code and a message (%v)", command, code, stdout, err)
		}
		return
	}
	switch command {
	case "ADD":
		var v struct {
			CNIVersion string `json:"cniVersion"`
		}
		if err := json.Unmarshal(stdout, &v); err != nil {
			t.Fatalf("ADD stdout %q is not JSON: %v", stdout, err)
		}
		if _, err := cniversion.NewResult(v.CNIVersion, stdout); err != nil {
			t.Fatalf("ADD stdout %q is not a %s result: %v", stdout, v.CNIVersion, err)
		}
	case "VERSION":
		if _, err := (&cniversion.PluginDecoder{}).Decode(stdout); err != nil {
			t.Fatalf("VERSION stdout %q: %v", stdout, err)
		}
	default:
		if len(stdout) != 0 {
			t.Fatalf("%s succeeded with stdout %q, want nothing", command, stdout)
		}
	}
}
