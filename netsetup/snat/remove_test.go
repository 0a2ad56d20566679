package snat

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

func TestPresentAndRemoveTakeOnlyOurs(t *testing.T) {
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
		if ok, err := Present(); err != nil || ok {
			t.Fatalf("fresh namespace: present=%v err=%v", ok, err)
		}
		// Someone else's rule in POSTROUTING stays.
		ipt("-t", "nat", "-A", "POSTROUTING", "-s", "10.9.0.0/16", "-j", "MASQUERADE")
		if _, err := Ensure(dir, Spec{VPCCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}, PodNets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/20")}, PrimaryIP: netip.MustParseAddr("10.0.0.10")}); err != nil {
			t.Fatal(err)
		}
		if ok, err := Present(); err != nil || !ok {
			t.Fatalf("after Ensure: present=%v err=%v", ok, err)
		}
		for range 2 {
			if _, err := Remove(); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			nat := ipt("-t", "nat", "-S")
			if strings.Contains(nat, Chain) || !strings.Contains(nat, "-s 10.9.0.0/16 -j MASQUERADE") {
				t.Errorf("after Remove:\n%s", nat)
			}
		}
		// A jump left without its chain (half an uninstall) is found too.
		ipt("-t", "nat", "-N", Chain)
		ipt(append([]string{"-t", "nat", "-A", "POSTROUTING"}, jump...)...)
		ipt("-t", "nat", "-F", Chain)
		if ok, _ := Present(); !ok {
			t.Error("jump and empty chain not reported present")
		}
		if _, err := Remove(); err != nil || strings.Contains(ipt("-t", "nat", "-S"), Chain) {
			t.Errorf("Remove of an empty chain: %v\n%s", err, ipt("-t", "nat", "-S"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
