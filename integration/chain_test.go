package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
)

// The conflist's second plugin. Its binary comes from the test tools that
// scripts/install-test-deps.sh installs.
const hostPort, containerPort = "18080", "80"

var portMappings = []map[string]any{{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}}

// chainRunner drives a conflist for one attachment the way a runtime does:
// ADD through the list with each result as the next plugin's prevResult,
// CHECK and DEL with the cached result. newChainRunner (chain_*_test.go)
// runs every plugin inside the node namespace.
type chainRunner interface {
	add(t *testing.T, p *pod) *current.Result
	check(t *testing.T, p *pod) error
	del(t *testing.T, p *pod) error
}

func toolsDir() string {
	if d := os.Getenv("ENI_CNI_TOOLS"); d != "" {
		return d
	}
	return "/opt/eni-cni-test"
}

// chainBinDir returns a CNI bin dir holding eni-cni and the reference
// portmap plugin.
func chainBinDir(t *testing.T) string {
	t.Helper()
	portmap := filepath.Join(toolsDir(), "bin", "portmap")
	if _, err := os.Stat(portmap); err != nil {
		t.Fatalf("reference portmap plugin not found (%v): run scripts/install-test-deps.sh (or set ENI_CNI_TOOLS)", err)
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatalf("iptables not found (%v): portmap needs it; run scripts/install-test-deps.sh", err)
	}
	dir := t.TempDir()
	for name, target := range map[string]string{"eni-cni": pluginBin, "portmap": portmap} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// natRules returns `iptables -t nat -S` of the node namespace.
func (n *node) natRules(t *testing.T) string {
	t.Helper()
	o, err := runIn(t.Context(), n.path(), nil, nil, "iptables", "-w", "-t", "nat", "-S")
	if err != nil {
		t.Fatal(err)
	}
	if o.exit != 0 {
		t.Fatalf("iptables -t nat -S in the node namespace: %s", o)
	}
	return string(o.stdout)
}

// dnatRules returns the nat rules that mention the host port.
func dnatRules(nat string) []string {
	var out []string
	for _, l := range strings.Split(nat, "\n") {
		if strings.Contains(l, "--dport "+hostPort) {
			out = append(out, l)
		}
	}
	return out
}

// TestChainPortmap runs eni-cni chained with the reference portmap plugin:
// ADD gives our address and portmap's DNAT to it, CHECK passes, DEL removes
// both.
func TestChainPortmap(t *testing.T) {
	binDir := chainBinDir(t)
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.9.0/24"}, nil)
	p := newPod(t, "pod-portmap")

	ours := map[string]any{}
	for k, v := range nw.conf {
		if k != "name" && k != "cniVersion" {
			ours[k] = v
		}
	}
	conflist := map[string]any{
		"cniVersion": "1.0.0",
		"name":       nw.name,
		"plugins": []any{
			ours,
			// backend pinned so that the check below reads the right tables.
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "backend": "iptables"},
		},
	}
	run := newChainRunner(t, n, binDir, conflist)

	res := run.add(t, p)
	ip := resultIP(t, res)
	assertWired(t, n, p, ip, hostVethOf(t, res))
	if l := nw.list(t); len(l.Allocations) != 1 || l.Allocations[0].IP != ip.String() || l.Allocations[0].ContainerID != p.containerID {
		t.Errorf("list --json: allocations %+v, want %s for %s", l.Allocations, ip, p.containerID[:12])
	}
	nat := n.natRules(t)
	var dnat bool
	for _, r := range dnatRules(nat) {
		if strings.Contains(r, "-p tcp") && strings.Contains(r, "-j DNAT --to-destination "+ip.String()+":"+containerPort) {
			dnat = true
		}
	}
	if !dnat {
		t.Errorf("node nat table has no DNAT of tcp %s to %s:%s:\n%s", hostPort, ip, containerPort, nat)
	}

	if err := run.check(t, p); err != nil {
		t.Errorf("CHECK of the chain: %v", err)
	}

	if err := run.del(t, p); err != nil {
		t.Fatalf("DEL of the chain: %v", err)
	}
	n.assertNoAttachments(t)
	if r := dnatRules(n.natRules(t)); len(r) != 0 {
		t.Errorf("after DEL the node still has nat rules for port %s: %v", hostPort, r)
	}
	if l := nw.list(t); len(l.Allocations) != 0 {
		t.Errorf("after DEL: allocations %+v, want none", l.Allocations)
	}
}
