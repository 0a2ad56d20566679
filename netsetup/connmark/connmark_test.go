package connmark

import (
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
)

const testMAC = "02:00:0a:61:00:0a"

func TestRulesUseTheMarkAndThePrefix(t *testing.T) {
	got := Rules(Spec{PrimaryMAC: testMAC, VethPrefix: "eni"}, "ens5")
	set, restore := strings.Join(got[0], " "), strings.Join(got[1], " ")
	if !strings.HasPrefix(set, "-i ens5 -m addrtype --dst-type LOCAL --limit-iface-in") || !strings.HasSuffix(set, "--set-xmark 0x80/0x80") {
		t.Errorf("set rule: %s", set)
	}
	if !strings.HasPrefix(restore, "-i eni+ ") || !strings.HasSuffix(restore, "--restore-mark --nfmask 0x80 --ctmask 0x80") {
		t.Errorf("restore rule: %s", restore)
	}
	other := Rules(Spec{PrimaryMAC: testMAC, VethPrefix: "cali", Mark: 0x200}, "eth0")
	if !slices.Contains(other[0], "0x200/0x200") || !slices.Contains(other[1], "cali+") || !slices.Contains(other[1], "0x200") {
		t.Errorf("custom mark and prefix: %q", other)
	}
}

func TestEnsureRefusesMissingFacts(t *testing.T) {
	for name, s := range map[string]Spec{
		"no primary MAC": {VethPrefix: "eni"},
		"no veth prefix": {PrimaryMAC: testMAC},
	} {
		if _, err := Ensure(t.TempDir(), s); err == nil {
			t.Errorf("Ensure with %s accepted", name)
		}
		if _, err := Check(s); err == nil {
			t.Errorf("Check with %s accepted", name)
		}
	}
}

// TestEnsureIdempotentRepairsAndRemoves: Ensure makes the chain, the jump,
// the rule and loose rp_filter; a second Ensure changes nothing; each piece
// taken away is reported by Check and put back by Ensure; Remove takes all
// of it (and nothing else) away, twice is fine.
func TestEnsureIdempotentRepairsAndRemoves(t *testing.T) {
	node := nodeNS(t)
	spec := Spec{PrimaryMAC: testMAC, VethPrefix: "eni"}
	err := node.Do(func(ns.NetNS) error {
		primaryLink(t, "ens5")
		run(t, "sysctl", "-qw", "net.ipv4.conf.ens5.rp_filter=1")
		run(t, "iptables", "-t", "mangle", "-A", "PREROUTING", "-i", "ens5", "-j", "MARK", "--set-mark", "0x4000")
		if p, err := Present(); err != nil || p {
			t.Fatalf("fresh namespace: present=%v err=%v", p, err)
		}
		if miss, err := Check(spec); err != nil || len(miss) != 3 {
			t.Errorf("Check before Ensure: %q, %v; want chain, rule, rp_filter", miss, err)
		}
		changed, err := Ensure(t.TempDir(), spec)
		if err != nil || len(changed) != 4 {
			t.Fatalf("first Ensure: changed %q, err %v; want chain, jump, rule, rp_filter", changed, err)
		}
		first := run(t, "iptables", "-t", "mangle", "-S")
		for _, want := range []string{"-N " + Chain, "-A PREROUTING -m comment", "-j " + Chain,
			"-A " + Chain + " -i ens5 -m addrtype --dst-type LOCAL --limit-iface-in", "--set-xmark 0x80/0x80",
			"-A " + Chain + " -i eni+", "--restore-mark --nfmask 0x80 --ctmask 0x80"} {
			if !strings.Contains(first, want) {
				t.Errorf("mangle table lacks %q:\n%s", want, first)
			}
		}
		if i, j := strings.Index(first, "-j "+Chain), strings.Index(first, "--set-xmark 0x4000"); i < 0 || j < 0 || i > j {
			t.Errorf("the jump is not first in PREROUTING:\n%s", first)
		}
		wantRule := "1024:\tfrom all fwmark 0x80/0x80 lookup main"
		if r := run(t, "ip", "-4", "rule"); !strings.Contains(r, wantRule) {
			t.Errorf("ip rule lacks %q:\n%s", wantRule, r)
		}
		assertClean(t, spec, "after Ensure")
		if changed, err := Ensure(t.TempDir(), spec); err != nil || len(changed) != 0 {
			t.Errorf("second Ensure: changed %q, err %v", changed, err)
		}
		if now := run(t, "iptables", "-t", "mangle", "-S"); now != first {
			t.Errorf("second Ensure changed the table:\n%s", now)
		}
		for _, c := range []struct {
			what, want string
			args       []string
		}{
			{"flushed chain", "chain", []string{"iptables", "-t", "mangle", "-F", Chain}},
			{"lost jump", "jump", []string{"iptables", "-t", "mangle", "-D", "PREROUTING", "-m", "comment", "--comment", comment, "-j", Chain}},
			{"extra rule", "chain", []string{"iptables", "-t", "mangle", "-A", Chain, "-j", "RETURN"}},
			{"lost ip rule", "ip rule", []string{"ip", "rule", "del", "priority", "1024"}},
			{"strict rp_filter", "rp_filter", []string{"sysctl", "-qw", "net.ipv4.conf.ens5.rp_filter=1"}},
		} {
			run(t, c.args...)
			if miss, err := Check(spec); err != nil || len(miss) != 1 {
				t.Errorf("%s: Check says %q, %v; want one thing missing", c.what, miss, err)
			}
			if changed, err := Ensure(t.TempDir(), spec); err != nil || len(changed) != 1 || !strings.Contains(changed[0], c.want) {
				t.Errorf("%s: Ensure changed %q, err %v; want %s put back", c.what, changed, err, c.want)
			}
			assertClean(t, spec, "after repairing a "+c.what)
		}
		if strings.Count(run(t, "iptables", "-t", "mangle", "-S", "PREROUTING"), "-j "+Chain) != 1 {
			t.Errorf("jump duplicated:\n%s", run(t, "iptables", "-t", "mangle", "-S", "PREROUTING"))
		}
		if p, err := Present(); err != nil || !p {
			t.Errorf("after Ensure: present=%v err=%v", p, err)
		}
		for i := range 2 {
			changed, err := Remove()
			if err != nil || changed != (i == 0) {
				t.Errorf("Remove #%d: changed %v, err %v", i+1, changed, err)
			}
			m, r := run(t, "iptables", "-t", "mangle", "-S"), run(t, "ip", "-4", "rule")
			if strings.Contains(m, Chain) || strings.Contains(r, "fwmark") || !strings.Contains(m, "--set-xmark 0x4000") {
				t.Errorf("after Remove: ours left or another's taken:\n%s\n%s", m, r)
			}
		}
		if p, err := Present(); err != nil || p {
			t.Errorf("after Remove: present=%v err=%v", p, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRemoveTakesAHalfRemovedSetup: a chain without its jump (an uninstall
// cut short) and a fwmark rule of another mark still go.
func TestRemoveTakesAHalfRemovedSetup(t *testing.T) {
	node := nodeNS(t)
	err := node.Do(func(ns.NetNS) error {
		run(t, "iptables", "-t", "mangle", "-N", Chain)
		run(t, "iptables", "-t", "mangle", "-A", Chain, "-j", "RETURN")
		run(t, "ip", "rule", "add", "priority", "1024", "fwmark", "0x100/0x100", "lookup", "main")
		run(t, "ip", "rule", "add", "priority", "1024", "from", "10.9.0.1", "lookup", "main") // not ours
		if p, err := Present(); err != nil || !p {
			t.Errorf("present=%v err=%v", p, err)
		}
		if changed, err := Remove(); err != nil || !changed {
			t.Errorf("Remove: changed %v, err %v", changed, err)
		}
		r := run(t, "ip", "-4", "rule")
		if strings.Contains(run(t, "iptables", "-t", "mangle", "-S"), Chain) || strings.Contains(r, "fwmark") || !strings.Contains(r, "from 10.9.0.1") {
			t.Errorf("after Remove:\n%s", r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRemoveTakesEveryJump: two first ADDs of a boot racing in Ensure may
// each insert the jump; a chain still jumped to cannot be deleted.
func TestRemoveTakesEveryJump(t *testing.T) {
	node := nodeNS(t)
	err := node.Do(func(ns.NetNS) error {
		primaryLink(t, "ens5")
		if _, err := Ensure(t.TempDir(), Spec{PrimaryMAC: testMAC, VethPrefix: "eni"}); err != nil {
			t.Fatal(err)
		}
		run(t, append([]string{"iptables", "-t", "mangle", "-I", "PREROUTING", "1"}, jump...)...)
		if changed, err := Remove(); err != nil || !changed {
			t.Errorf("Remove: changed %v, err %v", changed, err)
		}
		if m := run(t, "iptables", "-t", "mangle", "-S"); strings.Contains(m, Chain) {
			t.Errorf("after Remove:\n%s", m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEnsureWithoutThePrimaryLink(t *testing.T) {
	node := nodeNS(t)
	err := node.Do(func(ns.NetNS) error {
		_, err := Ensure(t.TempDir(), Spec{PrimaryMAC: testMAC, VethPrefix: "eni"})
		if err == nil || !strings.Contains(err.Error(), testMAC) {
			t.Errorf("Ensure without a link carrying %s: %v", testMAC, err)
		}
		if strings.Contains(run(t, "iptables", "-t", "mangle", "-S"), Chain) {
			t.Error("Ensure without the primary link made the chain")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func assertClean(t *testing.T, s Spec, when string) {
	t.Helper()
	if miss, err := Check(s); err != nil || len(miss) != 0 {
		t.Errorf("Check %s: %q, %v", when, miss, err)
	}
}

// primaryLink makes a veth pair in the current namespace, one end named
// name with testMAC (this kernel has no dummy links).
func primaryLink(t *testing.T, name string) {
	t.Helper()
	mac, _ := net.ParseMAC(testMAC)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac}, PeerName: name + "p"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

func run(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v %s", argv, err, out)
	}
	return string(out)
}

// nodeNS is a network namespace for the test's rules (skips without root;
// fails without iptables, which make test installs).
func nodeNS(t *testing.T) ns.NetNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: iptables and ip rules in a network namespace")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatal("iptables not installed (scripts/install-test-deps.sh)")
	}
	node, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close(); testutils.UnmountNS(node) })
	return node
}

// TestRemoveWithoutIptables: a node whose iptables went away can only
// hold the rule; Present sees it and Remove takes it without an error.
func TestRemoveWithoutIptables(t *testing.T) {
	node := nodeNS(t)
	t.Setenv("PATH", t.TempDir())
	err := node.Do(func(ns.NetNS) error {
		if err := netlink.RuleAdd(fwmarkRule(DefaultMark)); err != nil {
			t.Fatal(err)
		}
		if p, err := Present(); err != nil || !p {
			t.Errorf("present=%v err=%v", p, err)
		}
		if changed, err := Remove(); err != nil || !changed {
			t.Errorf("Remove: changed %v, err %v", changed, err)
		}
		if p, err := Present(); err != nil || p {
			t.Errorf("after Remove: present=%v err=%v", p, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestEnsureOnce: the first call does all of Ensure; later ones only look
// for the rule, so they neither run iptables nor repair (warm does).
func TestEnsureOnce(t *testing.T) {
	node := nodeNS(t)
	spec := Spec{PrimaryMAC: testMAC, VethPrefix: "eni"}
	err := node.Do(func(ns.NetNS) error {
		primaryLink(t, "ens5")
		run(t, "sysctl", "-qw", "net.ipv4.conf.ens5.rp_filter=1")
		if changed, err := EnsureOnce(t.TempDir(), spec); err != nil || len(changed) != 4 {
			t.Fatalf("first EnsureOnce: changed %q, err %v", changed, err)
		}
		assertClean(t, spec, "after EnsureOnce")
		run(t, "iptables", "-t", "mangle", "-F", Chain)
		t.Setenv("PATH", t.TempDir()) // no iptables to run
		if changed, err := EnsureOnce(t.TempDir(), spec); err != nil || len(changed) != 0 {
			t.Errorf("second EnsureOnce: changed %q, err %v; want nothing done", changed, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// drifts are the ways a node loses what Ensure made (on a primary link
// ens5) that the every-pass look must catch: each a command that does it.
var drifts = []struct {
	what string
	args []string
}{
	{"flushed chain", []string{"iptables", "-t", "mangle", "-F", Chain}},
	{"lost jump", []string{"iptables", "-t", "mangle", "-D", "PREROUTING", "-m", "comment", "--comment", comment, "-j", Chain}},
	{"extra rule", []string{"iptables", "-t", "mangle", "-A", Chain, "-j", "RETURN"}},
	{"rule for another link", []string{"iptables", "-t", "mangle", "-R", Chain, "1", "-i", "ens9", "-j", "CONNMARK", "--set-xmark", "0x80/0x80"}},
	{"lost ip rule", []string{"ip", "rule", "del", "priority", "1024"}},
	{"strict rp_filter", []string{"sysctl", "-qw", "net.ipv4.conf.ens5.rp_filter=1"}},
}

// TestIntact: the cheap look warm takes every pass says yes only when
// Ensure would change nothing it can count: each piece taken away makes it
// say no, and without iptables it says no rather than fail.
func TestIntact(t *testing.T) {
	node := nodeNS(t)
	spec := Spec{PrimaryMAC: testMAC, VethPrefix: "eni"}
	err := node.Do(func(ns.NetNS) error {
		if ok, err := Intact(spec); err != nil || ok {
			t.Errorf("Intact on a fresh node without the link: %v, %v; want false", ok, err)
		}
		primaryLink(t, "ens5")
		if ok, err := Intact(spec); err != nil || ok {
			t.Errorf("Intact before Ensure: %v, %v", ok, err)
		}
		if _, err := Ensure(t.TempDir(), spec); err != nil {
			t.Fatal(err)
		}
		if ok, err := Intact(spec); err != nil || !ok {
			t.Fatalf("Intact after Ensure: %v, %v", ok, err)
		}
		for _, c := range drifts {
			run(t, c.args...)
			if ok, err := Intact(spec); err != nil || ok {
				t.Errorf("%s: Intact %v, %v; want false", c.what, ok, err)
			}
			if _, err := Ensure(t.TempDir(), spec); err != nil {
				t.Fatal(err)
			}
			if ok, err := Intact(spec); err != nil || !ok {
				t.Errorf("%s put back: Intact %v, %v", c.what, ok, err)
			}
		}
		t.Setenv("PATH", t.TempDir())
		if ok, err := Intact(spec); err != nil || ok {
			t.Errorf("Intact without iptables: %v, %v; want false, no error", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSettled: what warm pays each pass on a settled node (Intact),
// what the first ADD of a boot pays once it is set up (EnsureOnce), and
// what the full Ensure costs.
func BenchmarkSettled(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	node, err := testutils.NewNS()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { node.Close(); testutils.UnmountNS(node) }()
	dir := b.TempDir()
	spec := Spec{PrimaryMAC: testMAC, VethPrefix: "eni"}
	err = node.Do(func(ns.NetNS) error {
		mac, _ := net.ParseMAC(testMAC)
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ens5", HardwareAddr: mac}, PeerName: "ens5p"}); err != nil {
			return err
		}
		_, err := Ensure(dir, spec)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		f    func() error
	}{
		{"Intact", func() error { _, err := Intact(spec); return err }},
		{"EnsureOnce", func() error { _, err := EnsureOnce(dir, spec); return err }},
		{"Ensure", func() error { _, err := Ensure(dir, spec); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			err := node.Do(func(ns.NetNS) error {
				for b.Loop() {
					if err := c.f(); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

// lockedIptables is an iptables-legacy while another process holds the
// xtables lock: `--wait N` gives up after N seconds (exit 4), a bare
// `--wait` waits as long as the holder keeps it (here a minute).
const lockedIptables = `#!/bin/sh
case "$1" in --version) echo 'iptables v1.8.9 (legacy)'; exit 0;; esac
n=; prev=
for a; do
	if [ "$prev" = --wait ]; then case "$a" in [0-9]*) n=$a;; esac; fi
	prev=$a
done
if [ -n "$n" ]; then
	sleep "$n"
	echo "Another app is currently holding the xtables lock. Stopped waiting after ${n}s." >&2
	exit 4
fi
exec sleep 60
`

// TestLockWaitBounded: warm's Intact and Ensure (and uninstall's Remove)
// give up on an xtables lock held by someone else, as kube-proxy holds it
// for seconds and a stuck holder for ever: a warm pass that waited for
// ever would keep warm.lock, and no later pass would fill the pool.
func TestLockWaitBounded(t *testing.T) {
	node := nodeNS(t)
	spec := Spec{PrimaryMAC: testMAC, VethPrefix: "eni"}
	err := node.Do(func(ns.NetNS) error {
		primaryLink(t, "ens5")
		if _, err := Ensure(t.TempDir(), spec); err != nil {
			t.Fatal(err)
		}
		bin := t.TempDir()
		if err := os.WriteFile(bin+"/iptables", []byte(lockedIptables), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
		for _, c := range []struct {
			name string
			fn   func() error
		}{
			{"Intact", func() error { _, err := Intact(spec); return err }},
			{"Ensure", func() error { _, err := Ensure(t.TempDir(), spec); return err }},
			{"Remove", func() error { _, err := Remove(); return err }},
		} {
			start := time.Now()
			done := make(chan error, 1)
			// Its own thread in the node's namespace: node.Do holds only
			// this one.
			go func() { done <- node.Do(func(ns.NetNS) error { return c.fn() }) }()
			select {
			case err := <-done:
				t.Logf("%s with the lock held: %v after %s", c.name, err, time.Since(start).Round(time.Millisecond))
			case <-time.After(30 * time.Second):
				t.Errorf("%s still waiting for the xtables lock after 30 s", c.name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIntactSeesWhatTheChainNames: the chain names the primary link and the
// pods' veth prefix; when either changes (hostVethPrefix changed in the
// config, the primary link renamed) the chain no longer marks anything, and
// Intact must say so, or warm never runs the Ensure that rewrites it.
func TestIntactSeesWhatTheChainNames(t *testing.T) {
	node := nodeNS(t)
	spec := Spec{PrimaryMAC: testMAC, VethPrefix: "eni"}
	err := node.Do(func(ns.NetNS) error {
		primaryLink(t, "ens5")
		if _, err := Ensure(t.TempDir(), spec); err != nil {
			t.Fatal(err)
		}
		other := spec
		other.VethPrefix = "veth"
		if ok, err := Intact(other); err != nil || ok {
			t.Errorf("Intact with veth prefix %q, the chain made for %q: %v, %v; want false", other.VethPrefix, spec.VethPrefix, ok, err)
		}
		if _, err := Ensure(t.TempDir(), other); err != nil {
			t.Fatal(err)
		}
		if ok, err := Intact(other); err != nil || !ok {
			t.Errorf("Intact after Ensure with prefix %q: %v, %v", other.VethPrefix, ok, err)
		}
		run(t, "ip", "link", "set", "ens5", "name", "ens6")
		run(t, "sysctl", "-qw", "net.ipv4.conf.ens6.rp_filter=2")
		if ok, err := Intact(other); err != nil || ok {
			t.Errorf("Intact with the primary link renamed ens6, the chain made for ens5: %v, %v; want false", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRPFilterOffLeftOff: the kernel filters by the higher of the link's
// and "all"'s rp_filter; with both 0 nothing is filtered and NodePort
// needs nothing more. Ensure must not tighten a node's choice to 2, and
// Intact and Check must not count it as missing.
func TestRPFilterOffLeftOff(t *testing.T) {
	node := nodeNS(t)
	spec := Spec{PrimaryMAC: testMAC, VethPrefix: "eni"}
	err := node.Do(func(ns.NetNS) error {
		primaryLink(t, "ens5")
		run(t, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.ens5.rp_filter=0")
		changed, err := Ensure(t.TempDir(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if v := strings.TrimSpace(run(t, "sysctl", "-n", "net.ipv4.conf.ens5.rp_filter")); v != "0" {
			t.Errorf("Ensure set rp_filter %s on ens5 (changed %q); want it left at 0", v, changed)
		}
		assertClean(t, spec, "with rp_filter off")
		if ok, err := Intact(spec); err != nil || !ok {
			t.Errorf("Intact with rp_filter off: %v, %v", ok, err)
		}
		// "all" strict makes the link's 0 strict: then it is missing.
		run(t, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1")
		if ok, err := Intact(spec); err != nil || ok {
			t.Errorf("Intact with all.rp_filter 1 and ens5 0: %v, %v; want false", ok, err)
		}
		if _, err := Ensure(t.TempDir(), spec); err != nil {
			t.Fatal(err)
		}
		if v := strings.TrimSpace(run(t, "sysctl", "-n", "net.ipv4.conf.ens5.rp_filter")); v != "2" {
			t.Errorf("Ensure with all.rp_filter 1: ens5 rp_filter %s; want 2", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentEnsureConverges: the first ADDs of a boot, and warm's
// pass, run Ensure at once; each must succeed and together they must leave
// the chain and its jump as one would (without the lock two clear the
// chain and both append: its rules twice, and two jumps).
func TestConcurrentEnsureConverges(t *testing.T) {
	node := nodeNS(t)
	dir := t.TempDir()
	spec := Spec{PrimaryMAC: testMAC, VethPrefix: "eni"}
	var want string
	_ = node.Do(func(ns.NetNS) error {
		primaryLink(t, "ens5")
		if _, err := Ensure(dir, spec); err != nil {
			t.Fatal(err)
		}
		want = run(t, "iptables", "-t", "mangle", "-S", Chain)
		_, err := Remove()
		return err
	})
	for round := range 10 {
		var wg sync.WaitGroup
		errs := make([]error, 6)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = node.Do(func(ns.NetNS) error { _, err := Ensure(dir, spec); return err })
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Errorf("round %d: Ensure: %v", round, err)
			}
		}
		_ = node.Do(func(ns.NetNS) error {
			if got := run(t, "iptables", "-t", "mangle", "-S", Chain); got != want {
				t.Errorf("round %d: chain\n%s\nwant\n%s", round, got, want)
			}
			if n := strings.Count(run(t, "iptables", "-t", "mangle", "-S", "PREROUTING"), "-j "+Chain); n != 1 {
				t.Errorf("round %d: %d jumps in PREROUTING", round, n)
			}
			if _, err := Remove(); err != nil {
				t.Errorf("round %d: Remove: %v", round, err)
			}
			return nil
		})
	}
}
