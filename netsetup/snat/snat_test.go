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
	vpc := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("100.64.0.0/16")}
	primary := netip.MustParseAddr("10.0.0.10")
	nat := func() string {
		out, err := exec.Command("iptables", "-t", "nat", "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -S: %v %s", err, out)
		}
		return string(out)
	}
	err = node.Do(func(ns.NetNS) error {
		if changed, err := Ensure(vpc, primary); err != nil || !changed {
			t.Fatalf("first Ensure: changed=%v err=%v", changed, err)
		}
		first := nat()
		for _, want := range []string{"-N " + Chain, "-A POSTROUTING", "-j " + Chain, "-d 10.0.0.0/16", "-d 100.64.0.0/16", "--to-source 10.0.0.10", "--random-fully"} {
			if !strings.Contains(first, want) {
				t.Errorf("nat table lacks %q:\n%s", want, first)
			}
		}
		if changed, err := Ensure(vpc, primary); err != nil || changed {
			t.Errorf("second Ensure: changed=%v err=%v", changed, err)
		}
		if nat() != first {
			t.Errorf("second Ensure changed the table:\n%s", nat())
		}
		if out, err := exec.Command("iptables", "-t", "nat", "-F", Chain).CombinedOutput(); err != nil {
			t.Fatalf("flush: %v %s", err, out)
		}
		if changed, err := Ensure(vpc, primary); err != nil || !changed || nat() != first {
			t.Errorf("repair after flush: changed=%v err=%v\n%s", changed, err, nat())
		}
		if changed, _ := Ensure(vpc[:1], primary); !changed || strings.Contains(nat(), "100.64.0.0/16") {
			t.Errorf("a VPC CIDR removed must leave the chain:\n%s", nat())
		}
		if strings.Count(nat(), "-j "+Chain) != 1 {
			t.Errorf("jump duplicated:\n%s", nat())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEnsureRefusesMissingFacts(t *testing.T) {
	if _, err := Ensure(nil, netip.MustParseAddr("10.0.0.1")); err == nil {
		t.Error("no VPC CIDRs accepted")
	}
	if _, err := Ensure([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}, netip.Addr{}); err == nil {
		t.Error("no primary address accepted")
	}
}
