package snat

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
)

func TestEnsureIdempotentAndRepairs(t *testing.T) {
	node := iptablesNS(t)
	dir := t.TempDir()
	vpc := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("100.64.0.0/16")}
	primary := netip.MustParseAddr("10.0.0.10")
	spec := Spec{VPCCIDRs: vpc, PodNets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/20")},
		NotPods: []netip.Addr{primary, netip.MustParseAddr("10.0.0.200")}, PrimaryIP: primary}
	nat := func() string {
		out, err := exec.Command("iptables", "-t", "nat", "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -S: %v %s", err, out)
		}
		return string(out)
	}
	err := node.Do(func(ns.NetNS) error {
		if changed, err := Ensure(dir, spec); err != nil || !changed {
			t.Fatalf("first Ensure: changed=%v err=%v", changed, err)
		}
		first := nat()
		for _, want := range []string{"-N " + Chain, "-A POSTROUTING", "-j " + Chain, "-d 10.0.0.0/16", "-d 100.64.0.0/16",
			"-s 10.0.0.200/32", "-s 10.0.0.10/32", "-s 10.0.0.0/20", "--to-source 10.0.0.10", "--random-fully"} {
			if !strings.Contains(first, want) {
				t.Errorf("nat table lacks %q:\n%s", want, first)
			}
		}
		if changed, err := Ensure(dir, spec); err != nil || changed {
			t.Errorf("second Ensure: changed=%v err=%v", changed, err)
		}
		for _, l := range strings.Split(first, "\n") {
			if strings.Contains(l, "-j SNAT") && !strings.Contains(l, "-s 10.0.0.0/20") {
				t.Errorf("a SNAT rule without a pod source match: %s", l)
			}
		}
		if nat() != first {
			t.Errorf("second Ensure changed the table:\n%s", nat())
		}
		if out, err := exec.Command("iptables", "-t", "nat", "-F", Chain).CombinedOutput(); err != nil {
			t.Fatalf("flush: %v %s", err, out)
		}
		if changed, err := Ensure(dir, spec); err != nil || !changed || nat() != first {
			t.Errorf("repair after flush: changed=%v err=%v\n%s", changed, err, nat())
		}
		spec.VPCCIDRs = vpc[:1]
		if changed, _ := Ensure(dir, spec); !changed || strings.Contains(nat(), "100.64.0.0/16") {
			t.Errorf("a VPC CIDR removed must leave the chain:\n%s", nat())
		}
		if strings.Count(nat(), "-j "+Chain) != 1 {
			t.Errorf("jump duplicated:\n%s", nat())
		}
		if changed, err := Remove(); err != nil || !changed || strings.Contains(nat(), Chain) {
			t.Errorf("Remove: changed=%v err=%v\n%s", changed, err, nat())
		}
		if changed, err := Remove(); err != nil || changed {
			t.Errorf("second Remove: changed=%v err=%v", changed, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEnsureRefusesMissingFacts(t *testing.T) {
	nets := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}
	for name, s := range map[string]Spec{
		"no VPC CIDRs":       {PodNets: nets, PrimaryIP: netip.MustParseAddr("10.0.0.1")},
		"no primary address": {VPCCIDRs: nets, PodNets: nets},
		"no pod subnets":     {VPCCIDRs: nets, PrimaryIP: netip.MustParseAddr("10.0.0.1")},
	} {
		if _, err := Ensure(t.TempDir(), s); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// iptablesNS is a network namespace for the test's iptables rules (skips
// without root; fails without iptables, which make test installs).
func iptablesNS(t *testing.T) ns.NetNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: iptables in a network namespace")
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
