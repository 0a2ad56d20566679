package snat

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

var egressRange = netip.MustParsePrefix("169.254.172.0/22")

// The egress chains are installed once, repaired when flushed, checked,
// left alone by the SNAT chain's Remove, and removed by RemoveEgress4
// with their jumps and the boot record.
func TestEgress4EnsureCheckRemove(t *testing.T) {
	node := iptablesNS(t)
	dir := t.TempDir()
	ipt := func(args ...string) string {
		out, err := exec.Command("iptables", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("iptables %v: %v %s", args, err, out)
		}
		return string(out)
	}
	err := node.Do(func(ns.NetNS) error {
		if m, err := CheckEgress4(egressRange); err != nil || len(m) != 2 {
			t.Errorf("fresh namespace: missing %q, %v", m, err)
		}
		if err := EnsureEgress4Once(dir, "boot-1", egressRange); err != nil {
			t.Fatal(err)
		}
		nat := ipt("-t", "nat", "-S")
		for _, want := range []string{"-A POSTROUTING -m comment --comment \"" + egressComment + "\" -j " + Egress4Chain,
			"-A " + Egress4Chain + " -s 169.254.172.0/22 -m addrtype ! --dst-type LOCAL", "-j MASQUERADE --random-fully"} {
			if !strings.Contains(nat, want) {
				t.Errorf("nat table lacks %q:\n%s", want, nat)
			}
		}
		if f := ipt("-S", "FORWARD"); !strings.HasPrefix(strings.SplitN(f, "\n", 3)[1], "-A FORWARD -m comment --comment \""+egressDropComment) {
			t.Errorf("the drop is not jumped to first:\n%s", f)
		}
		if m, err := CheckEgress4(egressRange); err != nil || len(m) != 0 {
			t.Errorf("after ensure: missing %q, %v", m, err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, Egress4BootName)); string(b) != "boot-1\n" {
			t.Errorf("boot record %q", b)
		}
		// Once per boot: a flush in the same boot is not seen by ADD ...
		ipt("-t", "nat", "-F", Egress4Chain)
		if err := EnsureEgress4Once(dir, "boot-1", egressRange); err != nil {
			t.Fatal(err)
		}
		if m, _ := CheckEgress4(egressRange); len(m) != 1 {
			t.Errorf("flushed chain: missing %q, want its rules", m)
		}
		// ... but by the next boot's, and by EnsureEgress4 (repair).
		if changed, err := EnsureEgress4(dir, egressRange); err != nil || !changed {
			t.Errorf("ensure of a flushed chain: changed=%v %v", changed, err)
		}
		if changed, err := EnsureEgress4(dir, egressRange); err != nil || changed {
			t.Errorf("ensure again: changed=%v %v", changed, err)
		}
		if n := strings.Count(ipt("-t", "nat", "-S", "POSTROUTING"), "-j "+Egress4Chain); n != 1 {
			t.Errorf("%d jumps", n)
		}
		if _, err := Remove(); err != nil || !strings.Contains(ipt("-t", "nat", "-S"), Egress4Chain) {
			t.Errorf("the SNAT chain's Remove touched the egress chain: %v", err)
		}
		for range 2 {
			if _, err := RemoveEgress4(dir); err != nil {
				t.Fatalf("RemoveEgress4: %v", err)
			}
			if all := ipt("-t", "nat", "-S") + ipt("-S"); strings.Contains(all, Egress4Chain) {
				t.Errorf("after RemoveEgress4:\n%s", all)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, Egress4BootName)); !os.IsNotExist(err) {
			t.Errorf("boot record left: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
