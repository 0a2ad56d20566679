package integration

import (
	"encoding/json"
	"net/netip"
	"os"
	"reflect"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
)

// attached is one pod after a successful ADD.
type attached struct {
	pod  *pod
	res  *current.Result
	ip   netip.Addr
	veth string
}

// addAll runs ADD for every pod, one after the other, and checks the
// addresses are distinct and inside [first, last].
func addAll(t *testing.T, nw *network, pods []*pod, first, last netip.Addr) []attached {
	t.Helper()
	out := make([]attached, len(pods))
	owner := map[netip.Addr]string{}
	for i, p := range pods {
		res, _ := nw.add(t, p)
		a := attached{pod: p, res: res, ip: resultIP(t, res), veth: hostVethOf(t, res)}
		if !inRange(a.ip, first, last) {
			t.Errorf("ADD %s: got %s, want an address in %s-%s", p.name, a.ip, first, last)
		}
		if o, dup := owner[a.ip]; dup {
			t.Errorf("ADD %s: got %s, already given to %s", p.name, a.ip, o)
		}
		owner[a.ip] = p.name
		out[i] = a
	}
	return out
}

// checkResult compares an ADD result with the kernel state it describes.
func checkResult(t *testing.T, a attached, w wiring) {
	t.Helper()
	r := a.res
	if len(r.Interfaces) != 2 {
		t.Fatalf("%s: result has %d interfaces, want host veth and pod %s: %+v", a.pod.name, len(r.Interfaces), a.pod.ifName, r.Interfaces)
	}
	host, podIf := r.Interfaces[0], r.Interfaces[1]
	if host.Name != a.veth || host.Sandbox != "" || host.Mac != w.hostMAC.String() {
		t.Errorf("%s: result host interface %+v, want name %s, mac %s, no sandbox", a.pod.name, *host, a.veth, w.hostMAC)
	}
	if podIf.Name != a.pod.ifName || podIf.Sandbox != a.pod.path() || podIf.Mac != w.podMAC.String() {
		t.Errorf("%s: result pod interface %+v, want name %s, mac %s, sandbox %s", a.pod.name, *podIf, a.pod.ifName, w.podMAC, a.pod.path())
	}
	ipc := r.IPs[0]
	if ipc.Interface == nil || *ipc.Interface != 1 || ipc.Gateway.String() != gatewayIP {
		t.Errorf("%s: result IP config %s, want interface 1 and gateway %s", a.pod.name, ipc, gatewayIP)
	}
	var def bool
	for _, rt := range r.Routes {
		if rt.Dst.String() == "0.0.0.0/0" && rt.GW.String() == gatewayIP {
			def = true
		}
	}
	if !def {
		t.Errorf("%s: result routes %v, want default via %s", a.pod.name, r.Routes, gatewayIP)
	}
}

// TestTwentyPods attaches 20 pods, checks their addresses, wiring, traffic
// and the state listing, then detaches them and checks the node is clean.
func TestTwentyPods(t *testing.T) {
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.1.0/24"}, nil)
	first, last := netip.MustParseAddr("10.99.1.1"), netip.MustParseAddr("10.99.1.254")
	pods := newPods(t, 20)

	before := time.Now()
	atts := addAll(t, nw, pods, first, last)
	after := time.Now()

	for _, a := range atts {
		checkResult(t, a, assertWired(t, n, a.pod, a.ip, a.veth))
	}
	if got := n.vethNames(t); len(got) != len(pods) {
		t.Errorf("node has %d veths, want %d: %v", len(got), len(pods), got)
	}

	for i, a := range atts {
		next := atts[(i+1)%len(atts)]
		if err := ping(t.Context(), a.pod.path(), next.ip); err != nil {
			t.Errorf("pod %s (%s) -> pod %s (%s): %v", a.pod.name, a.ip, next.pod.name, next.ip, err)
		}
	}
	for _, a := range atts {
		if err := ping(t.Context(), n.path(), a.ip); err != nil {
			t.Errorf("node -> pod %s (%s): %v", a.pod.name, a.ip, err)
		}
	}

	l := nw.list(t)
	if len(l.Allocations) != len(pods) {
		t.Errorf("list --json: %d allocations, want %d", len(l.Allocations), len(pods))
	}
	if p := l.Pool; p.Total != 254 || p.Allocated != 20 || p.Cooling != 0 || p.Free != 234 {
		t.Errorf("list --json: pool %+v, want total 254, allocated 20, cooling 0, free 234", p)
	}
	byID := l.byContainer()
	for _, a := range atts {
		got, ok := byID[a.pod.containerID]
		if !ok {
			t.Errorf("list --json: no allocation for %s (%s)", a.pod.name, a.pod.containerID)
			continue
		}
		want := listed{
			Network: nw.name, ContainerID: a.pod.containerID, IfName: "eth0", IP: a.ip.String(),
			PodNamespace: a.pod.namespace, PodName: a.pod.name, PodUID: a.pod.uid, HostVeth: a.veth, ENI: "",
		}
		at := got.AllocatedAt
		got.AllocatedAt = time.Time{}
		if got != want {
			t.Errorf("list --json: allocation\n got %+v\nwant %+v", got, want)
		}
		if at.Before(before.Add(-time.Second)) || at.After(after.Add(time.Second)) {
			t.Errorf("list --json: %s allocatedAt %s, want between %s and %s", a.pod.name, at, before, after)
		}
	}

	for _, a := range atts {
		nw.del(t, a.pod, a.pod.path())
	}
	n.assertNoAttachments(t)
	for _, a := range atts {
		a.pod.assertUnwired(t)
	}
	l = nw.list(t)
	if len(l.Allocations) != 0 || l.Pool.Allocated != 0 || l.Pool.Cooling != 20 {
		t.Errorf("after DEL of all: list --json has %d allocations, pool %+v; want none allocated, 20 cooling", len(l.Allocations), l.Pool)
	}
}

// TestIdempotentAdd repeats ADD: the same attachment gets the same address
// and result, and an ADD after the wiring was damaged repairs it.
func TestIdempotentAdd(t *testing.T) {
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.2.0/24"}, nil)
	p := newPod(t, "pod-idem")

	res1, out1 := nw.add(t, p)
	res2, out2 := nw.add(t, p)
	if !reflect.DeepEqual(res1, res2) {
		t.Errorf("second ADD gave a different result:\nfirst  %s\nsecond %s", out1, out2)
	}
	a := attached{pod: p, res: res1, ip: resultIP(t, res1), veth: hostVethOf(t, res1)}
	checkResult(t, a, assertWired(t, n, p, a.ip, a.veth))
	if l := nw.list(t); len(l.Allocations) != 1 {
		t.Errorf("after two ADDs: %d allocations, want 1: %+v", len(l.Allocations), l.Allocations)
	}

	// Damage the pod's wiring as a crashed ADD or a meddling admin would.
	h := openHandle(t, p.path())
	for _, r := range p.defaultRoutes(t) {
		if err := h.RouteDel(&r); err != nil {
			t.Fatalf("delete pod default route %s: %v", r, err)
		}
	}
	h.Close()
	if r := p.defaultRoutes(t); len(r) != 0 {
		t.Fatalf("pod still has default routes %v after deleting them", r)
	}

	res3, out3 := nw.add(t, p)
	a3 := attached{pod: p, res: res3, ip: resultIP(t, res3), veth: hostVethOf(t, res3)}
	if a3.ip != a.ip || a3.veth != a.veth {
		t.Errorf("repairing ADD gave %s on %s, want the same %s on %s\n%s", a3.ip, a3.veth, a.ip, a.veth, out3)
	}
	checkResult(t, a3, assertWired(t, n, p, a3.ip, a3.veth))
	if l := nw.list(t); len(l.Allocations) != 1 || l.Allocations[0].IP != a.ip.String() {
		t.Errorf("after repair: allocations %+v, want exactly %s", l.Allocations, a.ip)
	}

	nw.del(t, p, p.path())
	n.assertNoAttachments(t)
}

// TestDelWithoutNetns frees an address when the runtime can no longer name
// the pod's netns, and DEL stays idempotent.
func TestDelWithoutNetns(t *testing.T) {
	cases := []struct {
		name        string
		removeFirst bool                // delete the pod netns before DEL
		netns       func(p *pod) string // CNI_NETNS of the DEL
	}{
		{"empty CNI_NETNS", false, func(*pod) string { return "" }},
		{"netns already deleted", true, func(p *pod) string { return p.path() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			nw := newNetwork(t, n, "1.0.0", []string{"10.99.3.0/24"}, nil)
			p := newPod(t, "pod-del")
			res, _ := nw.add(t, p)
			ip, veth := resultIP(t, res), hostVethOf(t, res)
			netnsPath := tc.netns(p)
			if tc.removeFirst {
				if err := p.remove(); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(netnsPath); !os.IsNotExist(err) {
					t.Fatalf("pod netns %s still there after removing it: %v", netnsPath, err)
				}
			}

			nw.del(t, p, netnsPath)
			n.assertNoHostSide(t, ip, veth)
			n.assertNoAttachments(t)
			l := nw.list(t)
			if len(l.Allocations) != 0 || l.Pool.Allocated != 0 || l.Pool.Cooling != 1 {
				t.Errorf("after DEL: %d allocations, pool %+v; want 0 allocated, 1 cooling", len(l.Allocations), l.Pool)
			}

			nw.del(t, p, netnsPath) // DEL twice is fine
			if l := nw.list(t); l.Pool.Allocated != 0 || l.Pool.Cooling != 1 {
				t.Errorf("after second DEL: pool %+v; want 0 allocated, 1 cooling", l.Pool)
			}
		})
	}

	t.Run("never-seen container", func(t *testing.T) {
		n := newNode(t)
		nw := newNetwork(t, n, "1.0.0", []string{"10.99.3.0/24"}, nil)
		p := newPod(t, "pod-unknown")
		nw.del(t, p, p.path())
		nw.del(t, p, "")
		if l := nw.list(t); len(l.Allocations) != 0 || l.Pool.Cooling != 0 || l.Pool.Free != 254 {
			t.Errorf("DEL of an unknown container changed the pool: %+v, allocations %+v", l.Pool, l.Allocations)
		}
		n.assertNoAttachments(t)
	})
}

// TestExhaustion fills a 3-address pool: the 4th ADD fails with "try again
// later" (11) and leaves nothing behind; a freed address cools down before
// reuse, and is given out again once it has cooled.
func TestExhaustion(t *testing.T) {
	ranges := []string{"10.98.0.10-10.98.0.12"}
	first, last := netip.MustParseAddr("10.98.0.10"), netip.MustParseAddr("10.98.0.12")

	fill := func(t *testing.T, nw *network) ([]attached, *pod) {
		t.Helper()
		pods := newPods(t, 4)
		atts := addAll(t, nw, pods[:3], first, last)
		o := nw.addOut(t, pods[3])
		wantCNIError(t, "4th ADD into a full 3-address pool", o, 11, "no free address", "3 allocated")
		pods[3].assertUnwired(t)
		if v := nw.node.vethNames(t); len(v) != 3 {
			t.Errorf("after the failed ADD the node has veths %v, want the 3 of the pods", v)
		}
		l := nw.list(t)
		if _, ok := l.byContainer()[pods[3].containerID]; ok || len(l.Allocations) != 3 {
			t.Errorf("after the failed ADD: allocations %+v, want only the first 3 pods", l.Allocations)
		}
		return atts, pods[3]
	}

	t.Run("default cooldown", func(t *testing.T) {
		n := newNode(t)
		nw := newNetwork(t, n, "1.0.0", ranges, nil)
		atts, waiting := fill(t, nw)

		nw.del(t, atts[0].pod, atts[0].pod.path())
		o := nw.addOut(t, waiting)
		wantCNIError(t, "ADD while the only freed address cools down", o, 11, "2 allocated", "1 cooling")
		waiting.assertUnwired(t)
		if l := nw.list(t); l.Pool.Allocated != 2 || l.Pool.Cooling != 1 || l.Pool.Free != 0 {
			t.Errorf("pool %+v, want 2 allocated, 1 cooling, 0 free", l.Pool)
		}
	})

	t.Run("after the cooldown", func(t *testing.T) {
		n := newNode(t)
		nw := newNetwork(t, n, "1.0.0", ranges, map[string]any{"cooldownSeconds": 5})
		atts, waiting := fill(t, nw)

		nw.del(t, atts[0].pod, atts[0].pod.path())
		nw.endCooldowns(t)
		res, _ := nw.add(t, waiting)
		if ip := resultIP(t, res); ip != atts[0].ip {
			t.Errorf("ADD after DEL and the cooldown: got %s, want the freed %s", ip, atts[0].ip)
		}
		assertWired(t, n, waiting, atts[0].ip, hostVethOf(t, res))
	})
}

// TestCheck runs CHECK with the ADD's result as prevResult.
func TestCheck(t *testing.T) {
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.4.0/24"}, nil)
	p := newPod(t, "pod-check")
	res, out := nw.add(t, p)
	ip := resultIP(t, res)

	withPrev := func(prev []byte) []byte {
		return nw.config(t, func(c map[string]any) { c["prevResult"] = json.RawMessage(prev) })
	}
	if o := nw.run(t, cniEnv("CHECK", p), withPrev(out)); o.exit != 0 {
		t.Fatalf("CHECK right after ADD: want exit 0, got %s", o)
	}

	// A prevResult that names another address is not ours.
	var other map[string]any
	if err := json.Unmarshal(out, &other); err != nil {
		t.Fatal(err)
	}
	other["ips"].([]any)[0].(map[string]any)["address"] = ip.Next().String() + "/32"
	otherJSON, _ := json.Marshal(other)
	o := nw.run(t, cniEnv("CHECK", p), withPrev(otherJSON))
	e := cniError(t, "CHECK with a prevResult holding "+ip.Next().String(), o)
	if !containsAll(e.Msg, "prevResult", ip.String()) || e.Code != 101 {
		t.Errorf("CHECK with a foreign prevResult: code %d, message %q; want 101 saying the prevResult differs from the allocation %s", e.Code, e.Msg, ip)
	}

	// From cniVersion 1.0.0 on, CHECK without prevResult is a config error.
	wantCNIError(t, "CHECK without prevResult", nw.run(t, cniEnv("CHECK", p), nw.config(t)), 7, "prevResult")

	// The pod loses its default route: the pod's side differs (103).
	ph := openHandle(t, p.path())
	defer ph.Close()
	for _, r := range p.defaultRoutes(t) {
		if err := ph.RouteDel(&r); err != nil {
			t.Fatalf("delete the pod's default route: %v", err)
		}
	}
	wantCNIError(t, "CHECK without the pod's default route", nw.run(t, cniEnv("CHECK", p), withPrev(out)), 103, "pod routes via 169.254.1.1")

	// Remove the node's route to the pod.
	route, _, ok := n.hostRouteTo(t, ip)
	if !ok {
		t.Fatalf("no host route to %s after ADD", ip)
	}
	if err := n.h.RouteDel(&route); err != nil {
		t.Fatalf("delete host route %s: %v", route, err)
	}
	o = nw.run(t, cniEnv("CHECK", p), withPrev(out))
	e = cniError(t, "CHECK without the host route", o)
	if !containsAll(e.Msg, "no host route "+ip.String()+"/32") || e.Code != 102 {
		t.Errorf("CHECK without the host route: code %d, message %q; want 102 naming the missing route %s/32", e.Code, e.Msg, ip)
	}
}

// TestAddWiringFailure makes the wiring fail after the address was taken
// (the pod already has an eth0): ADD must fail, give the address back
// without cooldown and leave nothing on the node or in the pod.
func TestAddWiringFailure(t *testing.T) {
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.10.0/24"}, nil)
	p := newPod(t, "pod-taken-ifname")

	h := openHandle(t, p.path())
	defer h.Close()
	squatter := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: p.ifName}}
	if err := h.LinkAdd(squatter); err != nil {
		t.Fatalf("create a bridge named %s in the pod: %v", p.ifName, err)
	}

	o := nw.addOut(t, p)
	e := cniError(t, "ADD into a pod that already has "+p.ifName, o)
	if !containsAll(e.Msg, p.ifName) {
		t.Errorf("ADD into a pod that already has %s: message %q should name %s", p.ifName, e.Msg, p.ifName)
	}
	n.assertNoAttachments(t)
	if l := nw.list(t); len(l.Allocations) != 0 || l.Pool.Cooling != 0 || l.Pool.Free != l.Pool.Total {
		t.Errorf("after the failed ADD: allocations %+v, pool %+v; want the address back in the pool, not cooling", l.Allocations, l.Pool)
	}
	if l, err := h.LinkByName(p.ifName); err != nil || l.Type() != "bridge" {
		t.Errorf("the pod's own %s was touched: %v, %v", p.ifName, l, err)
	}

	if err := h.LinkDel(squatter); err != nil {
		t.Fatal(err)
	}
	res, _ := nw.add(t, p)
	assertWired(t, n, p, resultIP(t, res), hostVethOf(t, res))
}
