package snat

import (
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
)

// The first ADDs of a boot, and warm's pass, run Ensure at once: each
// must succeed and together they must leave the chains as one would.
func TestConcurrentEnsureConverges(t *testing.T) {
	node := iptablesNS(t)
	dir := t.TempDir()
	s := invalidSpec()
	ipt := func(args ...string) string {
		out, err := exec.Command("iptables", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("iptables %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	var filter, nat string
	_ = node.Do(func(ns.NetNS) error {
		if _, err := Ensure(dir, s); err != nil {
			t.Fatal(err)
		}
		filter, nat = ipt("-S", Chain), ipt("-t", "nat", "-S", Chain)
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
				errs[i] = node.Do(func(ns.NetNS) error { _, err := Ensure(dir, s); return err })
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Errorf("round %d: Ensure: %v", round, err)
			}
		}
		_ = node.Do(func(ns.NetNS) error {
			if got := ipt("-S", Chain); got != filter {
				t.Errorf("round %d: filter chain\n%s\nwant\n%s", round, got, filter)
			}
			if got := ipt("-t", "nat", "-S", Chain); got != nat {
				t.Errorf("round %d: nat chain\n%s\nwant\n%s", round, got, nat)
			}
			if n := strings.Count(ipt("-S", "FORWARD"), "-j "+Chain); n != 1 {
				t.Errorf("round %d: %d jumps in FORWARD", round, n)
			}
			if n := strings.Count(ipt("-t", "nat", "-S", "POSTROUTING"), "-j "+Chain); n != 1 {
				t.Errorf("round %d: %d jumps in POSTROUTING", round, n)
			}
			if _, err := Remove(); err != nil {
				t.Errorf("round %d: Remove: %v", round, err)
			}
			return nil
		})
	}
}

// A second jump (left by a release that raced itself) is taken away by
// Ensure, and all jumps by Remove.
func TestDuplicateJumpsCollapse(t *testing.T) {
	node := iptablesNS(t)
	dir := t.TempDir()
	s := invalidSpec()
	_ = node.Do(func(ns.NetNS) error {
		jumps := func() int {
			out, _ := exec.Command("iptables", "-S", "FORWARD").CombinedOutput()
			return strings.Count(string(out), "-j "+Chain)
		}
		if _, err := Ensure(dir, s); err != nil {
			t.Fatal(err)
		}
		dup := append([]string{"-A", "FORWARD"}, dropJump...)
		for range 2 {
			if out, err := exec.Command("iptables", dup...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
		}
		if changed, err := Ensure(dir, s); err != nil || !changed || jumps() != 1 {
			t.Errorf("Ensure over 3 jumps: changed %v, err %v, %d jumps left", changed, err, jumps())
		}
		if out, err := exec.Command("iptables", dup...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if _, err := Remove(); err != nil || jumps() != 0 {
			t.Errorf("Remove over 2 jumps: err %v, %d jumps left", err, jumps())
		}
		return nil
	})
}

// A spec that changes (an ENI attached: its primary address joins
// NotPods) rewrites the nat chain without a moment when it is empty: a
// flow whose first packet passed an empty chain would keep its pod
// address for its life. A poller lists the chain while Ensure rewrites it
// back and forth.
func TestRewriteLeavesNoEmptyChain(t *testing.T) {
	node := iptablesNS(t)
	dir := t.TempDir()
	a := invalidSpec()
	b := invalidSpec()
	b.NotPods = append(b.NotPods, netip.MustParseAddr("10.0.0.77"))
	_ = node.Do(func(ns.NetNS) error {
		if _, err := Ensure(dir, a); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	stop := make(chan struct{})
	minRules := make(chan int)
	go func() {
		least, polls := 1<<30, 0
		_ = node.Do(func(ns.NetNS) error {
			for {
				select {
				case <-stop:
					minRules <- least
					return nil
				default:
				}
				out, err := exec.Command("iptables", "-t", "nat", "-S", Chain).Output()
				if err != nil {
					continue
				}
				polls++
				least = min(least, strings.Count(string(out), "-A "+Chain+" "))
			}
		})
	}()
	for round := range 20 {
		s := a
		if round%2 == 0 {
			s = b
		}
		if err := node.Do(func(ns.NetNS) error { _, err := Ensure(dir, s); return err }); err != nil {
			t.Fatalf("round %d: Ensure: %v", round, err)
		}
	}
	close(stop)
	if least := <-minRules; least == 0 {
		t.Error("a rewrite left the nat chain empty for a moment")
	}
}
