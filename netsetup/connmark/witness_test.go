package connmark

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

// TestIntactSinceSkipsOnlyUnchangedTables: with the witness of its last
// yes, IntactSince says yes without running iptables while nothing
// changed, and every drift Intact catches makes it look again and say no.
func TestIntactSinceSkipsOnlyUnchangedTables(t *testing.T) {
	node := nodeNS(t)
	spec := Spec{PrimaryMAC: testMAC, VethPrefix: "eni"}
	path := os.Getenv("PATH")
	err := node.Do(func(ns.NetNS) error {
		primaryLink(t, "ens5")
		if _, err := Ensure(t.TempDir(), spec); err != nil {
			t.Fatal(err)
		}
		ok, seen, err := IntactSince(spec, "")
		if err != nil || !ok || seen == "" {
			t.Fatalf("IntactSince after Ensure: %v, witness %q, %v", ok, seen, err)
		}
		t.Setenv("PATH", t.TempDir()) // no iptables: only a skip can say yes
		if ok, now, err := IntactSince(spec, seen); err != nil || !ok || now != seen {
			t.Fatalf("IntactSince with the same tables: %v, %v (witness %q, was %q); want a yes without iptables", ok, err, now, seen)
		}
		if ok, _, err := IntactSince(spec, ""); err != nil || ok {
			t.Errorf("IntactSince without a witness and without iptables: %v, %v; want no", ok, err)
		}
		t.Setenv("PATH", path)
		for _, c := range drifts {
			run(t, c.args...)
			if ok, _, err := IntactSince(spec, seen); err != nil || ok {
				t.Errorf("%s: IntactSince with the witness from before %v, %v; want no", c.what, ok, err)
			}
			if _, err := Ensure(t.TempDir(), spec); err != nil {
				t.Fatal(err)
			}
			ok, now, err := IntactSince(spec, seen)
			if err != nil || !ok {
				t.Errorf("%s put back: IntactSince %v, %v", c.what, ok, err)
			}
			seen = now
		}
		other := spec
		other.VethPrefix = "veth"
		if ok, _, err := IntactSince(other, seen); err != nil || ok {
			t.Errorf("IntactSince for veth prefix %q with the witness for %q: %v, %v; want no", other.VethPrefix, spec.VethPrefix, ok, err)
		}
		run(t, "ip", "link", "set", "ens5", "name", "ens6")
		run(t, "sysctl", "-qw", "net.ipv4.conf.ens6.rp_filter=2")
		if ok, _, err := IntactSince(spec, seen); err != nil || ok {
			t.Errorf("IntactSince with the primary link renamed ens6, the witness for ens5: %v, %v; want no", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWitnessReadsTheLegacyTable: on a node whose iptables is the legacy
// one, a change of its mangle table changes the witness (nf_tables'
// generation does not move), and traffic, which moves its counters, does
// not.
func TestWitnessReadsTheLegacyTable(t *testing.T) {
	node := nodeNS(t)
	if _, err := exec.LookPath("iptables-legacy"); err != nil {
		t.Skip("no iptables-legacy")
	}
	spec := Spec{PrimaryMAC: testMAC, VethPrefix: "eni"}
	err := node.Do(func(ns.NetNS) error {
		run(t, "ip", "link", "set", "lo", "up")
		run(t, "iptables-legacy", "-t", "mangle", "-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT")
		before := witness(spec, "ens5")
		if before == "" {
			t.Fatal("no witness")
		}
		run(t, "ping", "-c", "2", "-i", "0.2", "-q", "127.0.0.1")
		if counted := run(t, "iptables-legacy", "-t", "mangle", "-vnxL", "OUTPUT"); !containsPackets(counted) {
			t.Fatalf("the rule counted no packets:\n%s", counted)
		}
		if after := witness(spec, "ens5"); after != before {
			t.Errorf("traffic changed the witness:\n%s\nthen\n%s", before, after)
		}
		run(t, "iptables-legacy", "-t", "mangle", "-R", "OUTPUT", "1", "-o", "lo", "-j", "RETURN")
		if after := witness(spec, "ens5"); after == before {
			t.Errorf("a rule of the legacy mangle table replaced: witness unchanged\n%s", after)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// containsPackets: `iptables -vnxL` shows a rule with a packet count > 0.
func containsPackets(listing string) bool {
	for l := range strings.Lines(listing) {
		var pkts int
		var target string
		if n, _ := fmt.Sscan(l, &pkts, &target); n == 2 && pkts > 0 {
			return true
		}
	}
	return false
}

// TestNFTablesModule: nf_tables is asked for its generation only where
// that cannot load it; a module known not to be loaded holds no ruleset.
func TestNFTablesModule(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  moduleState
	}{
		{"no loadable modules", nil, moduleUsable},
		{"loaded", map[string]string{"proc/modules": "xt_comment 12288 1 - Live 0x0\nnf_tables 245760 0 - Live 0x0\n"}, moduleUsable},
		{"in sysfs", map[string]string{"proc/modules": "x 1 0 - Live 0x0\n", "sys/module/nf_tables/uevent": ""}, moduleUsable},
		{"built in", map[string]string{"proc/modules": "x 1 0 - Live 0x0\n", "lib/modules/6.1.0/modules.builtin": "kernel/net/netfilter/nf_tables.ko\n"}, moduleUsable},
		{"a module not loaded", map[string]string{"proc/modules": "x 1 0 - Live 0x0\n", "lib/modules/6.1.0/modules.builtin": "kernel/net/ipv4/tcp_cubic.ko\n"}, moduleUnloaded},
		{"cannot tell", map[string]string{"proc/modules": "x 1 0 - Live 0x0\n"}, moduleUnknown},
	} {
		root := t.TempDir()
		for name, data := range c.files {
			path := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := nfTablesModule(root, "6.1.0"); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
