package integration

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
)

// TestConcurrentAdds starts 50 ADDs at once, as separate processes, into a
// 40-address pool: the lock must hand out each address once, and exactly
// the 10 that find the pool full fail with "try again later".
func TestConcurrentAdds(t *testing.T) {
	const pods, poolSize = 50, 40
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.98.0.1-10.98.0.40"}, nil)
	first, last := netip.MustParseAddr("10.98.0.1"), netip.MustParseAddr("10.98.0.40")
	ps := newPods(t, pods)
	conf := nw.config(t)

	outs := make([]output, pods)
	errs := make([]error, pods)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range ps {
		env := cniEnv("ADD", p)
		wg.Go(func() {
			<-start
			outs[i], errs[i] = runIn(t.Context(), n.path(), env, conf, pluginBin)
		})
	}
	close(start)
	wg.Wait()

	ipOf := map[string]netip.Addr{} // containerID -> address, of the successes
	owner := map[netip.Addr]string{}
	var exhausted, lockTimeout []*pod
	for i, p := range ps {
		o := outs[i]
		switch {
		case errs[i] != nil:
			t.Errorf("ADD %s: %v", p.name, errs[i])
		case o.exit == 0:
			r, err := current.NewResult(o.stdout)
			if err != nil {
				t.Errorf("ADD %s: bad result: %v\n%s", p.name, err, o.stdout)
				continue
			}
			ip := resultIP(t, r.(*current.Result))
			if !inRange(ip, first, last) {
				t.Errorf("ADD %s: got %s, outside the pool %s-%s", p.name, ip, first, last)
			}
			if other, dup := owner[ip]; dup {
				t.Errorf("ADD %s: got %s, already given to %s", p.name, ip, other)
			}
			owner[ip] = p.name
			ipOf[p.containerID] = ip
		default:
			e := cniError(t, "ADD "+p.name, o)
			switch {
			case e.Code == 11 && strings.Contains(e.Msg, "timed out waiting for the state lock"):
				lockTimeout = append(lockTimeout, p)
			default:
				wantCNIError(t, "ADD "+p.name+" into the full pool", o, 11, "no free address", fmt.Sprintf("%d allocated", poolSize))
				exhausted = append(exhausted, p)
			}
		}
	}
	if len(lockTimeout) > 0 {
		t.Errorf("%d of %d concurrent ADDs failed with a lock timeout (code 11 %q) instead of getting an address or finding the pool full; e.g. %s",
			len(lockTimeout), pods, "timed out waiting for the state lock", cniError(t, "ADD", outs[slices.Index(ps, lockTimeout[0])]).Msg)
	}
	if len(ipOf) != poolSize || len(exhausted) != pods-poolSize {
		t.Errorf("%d concurrent ADDs into %d addresses: %d succeeded and %d found the pool full, want %d and %d",
			pods, poolSize, len(ipOf), len(exhausted), poolSize, pods-poolSize)
	}
	failed := append(exhausted, lockTimeout...)

	l := nw.list(t)
	got := l.byContainer()
	if len(l.Allocations) != len(ipOf) {
		t.Errorf("list --json: %d allocations, want the %d successful ADDs", len(l.Allocations), len(ipOf))
	}
	for id, ip := range ipOf {
		if a, ok := got[id]; !ok || a.IP != ip.String() {
			t.Errorf("list --json: container %s holds %q (listed %t), want %s", id[:12], a.IP, ok, ip)
		}
	}
	for _, p := range failed {
		if a, ok := got[p.containerID]; ok {
			t.Errorf("list --json: failed ADD %s has allocation %s", p.name, a.IP)
		}
		p.assertUnwired(t)
	}
	if v := n.vethNames(t); len(v) != len(ipOf) {
		t.Errorf("node has %d veths, want one per successful ADD (%d): %s", len(v), len(ipOf), strings.Join(v, " "))
	}

	for _, p := range ps {
		nw.del(t, p, p.path())
	}
	n.assertNoAttachments(t)
	if l := nw.list(t); len(l.Allocations) != 0 || l.Pool.Cooling != len(ipOf) {
		t.Errorf("after DEL of all: %d allocations, pool %+v; want 0 allocated, %d cooling", len(l.Allocations), l.Pool, len(ipOf))
	}
}
