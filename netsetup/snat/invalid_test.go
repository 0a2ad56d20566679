package snat

import (
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/coreos/go-iptables/iptables"
)

func invalidSpec() Spec {
	primary := netip.MustParseAddr("10.0.0.10")
	return Spec{VPCCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("100.64.0.0/16")},
		PodNets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/20"), netip.MustParsePrefix("10.0.16.5/20")},
		NotPods: []netip.Addr{primary, netip.MustParseAddr("10.0.0.200")}, PrimaryIP: primary}
}

// The drop spares what SNAT spares, in the same order (VPC destinations,
// then addresses that are not pods'), and drops only INVALID packets of
// the pod subnets SNAT rewrites.
func TestDropRulesMirrorSNAT(t *testing.T) {
	s := invalidSpec()
	drop, nat := DropRules(s), Rules(s)
	if len(drop) != len(nat) {
		t.Fatalf("%d drop rules for %d SNAT rules:\n%v\n%v", len(drop), len(nat), drop, nat)
	}
	for i := range nat {
		if nat[i][len(nat[i])-1] == "RETURN" {
			if !slices.Equal(drop[i], nat[i]) {
				t.Errorf("rule %d: drop %v, SNAT %v: the exclusions must be the same", i, drop[i], nat[i])
			}
			continue
		}
		r := strings.Join(drop[i], " ")
		if !strings.HasPrefix(r, "-s "+nat[i][1]+" ") || !strings.Contains(r, "--ctstate INVALID") || !strings.HasSuffix(r, "-j DROP") {
			t.Errorf("rule %d: %s, want an INVALID drop from %s", i, r, nat[i][1])
		}
	}
	if got := drop[len(drop)-1][1]; got != "10.0.16.0/20" {
		t.Errorf("pod subnet %s, want it masked (10.0.16.0/20)", got)
	}
}

// Ensure puts the drop in the filter table, its jump first in FORWARD (a
// rule before it that accepts would skip it), heals a flush, and Check,
// Present and Remove see and take both tables.
func TestEnsureDropsInvalid(t *testing.T) {
	node := iptablesNS(t)
	dir := t.TempDir()
	ipt := func(args ...string) string {
		out, err := exec.Command("iptables", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("iptables %v: %v %s", args, err, out)
		}
		return string(out)
	}
	s := invalidSpec()
	err := node.Do(func(ns.NetNS) error {
		ipt("-A", "FORWARD", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")
		if missing, err := Check(s); err != nil || len(missing) != 2 {
			t.Errorf("Check of a bare node: %q %v, want both chains missing", missing, err)
		}
		if _, err := Ensure(dir, s); err != nil {
			t.Fatal(err)
		}
		filter := ipt("-S")
		for _, want := range []string{"-N " + Chain, "-d 10.0.0.0/16", "-d 100.64.0.0/16", "-s 10.0.0.200/32", "-s 10.0.0.10/32",
			"-A " + Chain + " -s 10.0.0.0/20 -m conntrack --ctstate INVALID"} {
			if !strings.Contains(filter, want) {
				t.Errorf("filter table lacks %q:\n%s", want, filter)
			}
		}
		if fwd := ipt("-S", "FORWARD"); !strings.HasPrefix(strings.Split(fwd, "\n")[1], "-A FORWARD -m comment") {
			t.Errorf("the jump is not first in FORWARD:\n%s", fwd)
		}
		if missing, err := Check(s); err != nil || len(missing) != 0 {
			t.Errorf("Check after Ensure: %q %v", missing, err)
		}
		if changed, err := Ensure(dir, s); err != nil || changed {
			t.Errorf("second Ensure: changed=%v err=%v", changed, err)
		}
		ipt("-F", Chain)
		if missing, _ := Check(s); len(missing) != 1 || !strings.Contains(missing[0], "filter") {
			t.Errorf("Check after a flush of the filter chain: %q", missing)
		}
		if changed, err := Ensure(dir, s); err != nil || !changed || ipt("-S") != filter {
			t.Errorf("repair after flush: changed=%v err=%v\n%s", changed, err, ipt("-S"))
		}
		// Half an uninstall: only the filter chain left is still ours.
		if _, err := removeTable(mustIPT(t), natTable); err != nil {
			t.Fatal(err)
		}
		if ok, err := Present(); err != nil || !ok {
			t.Errorf("filter chain alone: present=%v err=%v", ok, err)
		}
		if changed, err := Remove(); err != nil || !changed {
			t.Errorf("Remove: changed=%v err=%v", changed, err)
		}
		if f := ipt("-S"); strings.Contains(f, Chain) || !strings.Contains(f, "RELATED,ESTABLISHED -j ACCEPT") {
			t.Errorf("after Remove:\n%s", f)
		}
		if ok, err := Present(); err != nil || ok {
			t.Errorf("after Remove: present=%v err=%v", ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func mustIPT(t *testing.T) *iptables.IPTables {
	t.Helper()
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		t.Fatal(err)
	}
	return ipt
}
