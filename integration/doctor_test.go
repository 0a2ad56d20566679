package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
)

type doctorResult struct {
	Name, Status, Message, Fix string
}

// doctor runs `eni-cni doctor --json` in the node namespace, against an
// empty file tree and a CRI socket that does not exist.
func (nw *network) doctor(t *testing.T) map[string]doctorResult {
	t.Helper()
	env := map[string]string{"ENI_CNI_CACHE_DIR": os.Getenv("ENI_CNI_CACHE_DIR")}
	o, err := runIn(t.Context(), nw.node.path(), env, nil, pluginBin, "doctor", "--json", "--config", nw.confFile,
		"--root", t.TempDir(), "--cri-endpoint", "unix://"+filepath.Join(t.TempDir(), "none.sock"))
	if err != nil {
		t.Fatal(err)
	}
	var rs []doctorResult
	if err := json.Unmarshal(o.stdout, &rs); err != nil {
		t.Fatalf("doctor output: %v: %s", err, o)
	}
	if o.exit == 0 {
		t.Errorf("doctor exited 0 with no CRI socket and no timers: %s", o)
	}
	out := map[string]doctorResult{}
	for _, r := range rs {
		out[r.Name] = r
	}
	return out
}

func wantDoctor(t *testing.T, rs map[string]doctorResult, name, status string) {
	t.Helper()
	if r := rs[name]; r.Status != status {
		t.Errorf("%s: %s %q (fix %q), want %s", name, r.Status, r.Message, r.Fix, status)
	}
}

// doctor's kernel checks in a namespace standing in for the node:
// ip_forward off and on, a FORWARD policy of DROP with and without rules
// for the pods' veths, a veth named like ours that the store does not
// know, and an allocation that is wired. doctor creates no state.
func TestDoctorInNamespaces(t *testing.T) {
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.97.3.0/29"}, nil)
	rs := nw.doctor(t)
	wantDoctor(t, rs, "ip_forward", "fail")
	wantDoctor(t, rs, "config", "ok")
	wantDoctor(t, rs, "cri", "fail")
	wantDoctor(t, rs, "timer-gc", "fail")
	wantDoctor(t, rs, "foreign-veths", "ok")
	if _, err := os.Stat(nw.stateDir); !os.IsNotExist(err) {
		t.Fatalf("doctor created the state directory %s", nw.stateDir)
	}

	// An ADD turns ip_forward on and wires a pod.
	p := newPod(t, "doctor")
	nw.add(t, p)
	if _, err := exec.LookPath("iptables"); err == nil {
		iptables := func(args ...string) {
			if o, err := runIn(t.Context(), n.path(), nil, nil, append([]string{"iptables"}, args...)...); err != nil || o.exit != 0 {
				t.Fatalf("iptables %v: %v %s", args, err, o)
			}
		}
		iptables("-P", "FORWARD", "DROP")
		rs = nw.doctor(t)
		wantDoctor(t, rs, "iptables-forward", "fail")
		iptables("-A", "FORWARD", "-i", "eni+", "-j", "ACCEPT")
		iptables("-A", "FORWARD", "-o", "eni+", "-j", "ACCEPT")
	}
	// A veth named like ours that no allocation explains.
	if err := n.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "enideadbeef0001"}, PeerName: "peer" + randHex(4)}); err != nil {
		t.Fatal(err)
	}
	rs = nw.doctor(t)
	wantDoctor(t, rs, "ip_forward", "ok")
	wantDoctor(t, rs, "wiring", "ok")
	wantDoctor(t, rs, "foreign-veths", "warn")
	wantDoctor(t, rs, "store", "ok")
	if _, err := exec.LookPath("iptables"); err == nil {
		wantDoctor(t, rs, "iptables-forward", "ok")
	}
	nw.del(t, p, p.path())
}

// TestDoctorWithoutConfig: on a node with no eni-cni conflist yet, doctor
// reports the missing config as one finding and still runs every check
// that needs none (IMDS, the kernel's settings, the CRI runtime, the
// network managers, the timers). It used to print only "no eni-cni config".
func TestDoctorWithoutConfig(t *testing.T) {
	n := newNode(t)
	env := map[string]string{"ENI_CNI_CACHE_DIR": os.Getenv("ENI_CNI_CACHE_DIR")}
	o, err := runIn(t.Context(), n.path(), env, nil, pluginBin, "doctor", "--json", "--conf-dir", t.TempDir(),
		"--root", t.TempDir(), "--cri-endpoint", "unix://"+filepath.Join(t.TempDir(), "none.sock"))
	if err != nil {
		t.Fatal(err)
	}
	var rs []doctorResult
	if err := json.Unmarshal(o.stdout, &rs); err != nil {
		t.Fatalf("doctor output: %v: %s", err, o)
	}
	if o.exit == 0 {
		t.Errorf("doctor without a config exited 0: %s", o)
	}
	got := map[string]doctorResult{}
	configs, ran := 0, 0
	for _, r := range rs {
		got[r.Name] = r
		if r.Name == "config" {
			configs++
		}
		if r.Status != "skip" {
			ran++
		}
	}
	if r := got["config"]; configs != 1 || r.Status != "fail" || !containsAll(r.Message, "no config") {
		t.Errorf("config findings: %d, %+v; want one failure saying there is no config", configs, r)
	}
	wantDoctor(t, got, "ip_forward", "fail")
	wantDoctor(t, got, "cri", "fail")
	wantDoctor(t, got, "timer-gc", "fail")
	for _, name := range []string{"imds", "systemd-networkd", "NetworkManager", "udev-mac-policy", "rp_filter", "iptables-forward", "kubelet-maxpods"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no %s check without a config: %v", name, rs)
		}
	}
	if ran < 8 {
		t.Errorf("only %d checks ran without a config: %v", ran, rs)
	}
}
