package integration

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// pluginBinDir returns a CNI bin dir holding eni-cni and the named
// reference plugins of the test tools.
func pluginBinDir(t *testing.T, refs ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(pluginBin, filepath.Join(dir, "eni-cni")); err != nil {
		t.Fatal(err)
	}
	for _, name := range refs {
		target := filepath.Join(toolsDir(), "bin", name)
		if _, err := os.Stat(target); err != nil {
			t.Fatalf("reference plugin %s not found (%v): run scripts/install-test-deps.sh (or set ENI_CNI_TOOLS)", name, err)
		}
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// conflistOf is the one-plugin conflist of an eni-cni network, followed
// by the given plugins.
func conflistOf(nw *network, more ...any) map[string]any {
	ours := map[string]any{}
	for k, v := range nw.conf {
		if k != "name" && k != "cniVersion" {
			ours[k] = v
		}
	}
	return map[string]any{"cniVersion": "1.0.0", "name": nw.name, "plugins": append([]any{ours}, more...)}
}

// onIf is p attached through another interface name, as Multus attaches a
// pod's further networks.
func onIf(p *pod, ifName string) *pod {
	q := *p
	q.ifName = ifName
	return &q
}

// TestMultusTwoNetworksAndAnotherPlugin attaches one pod as Multus does: an
// eni-cni network on eth0, a second eni-cni network (sharing the first's
// stateDir) on net1 and ptp with host-local on net2, each through libcni.
// Each eni-cni interface has its own address, veth, routes and rules; only
// eth0 carries the default route and reports a gateway; net1's gateway
// route is on net1, in a table its address selects, so both addresses
// answer; CHECK passes for each; DEL of net1 leaves eth0 working. A second
// interface used to fail with "add route 169.254.1.1/32 ... file exists".
func TestMultusTwoNetworksAndAnotherPlugin(t *testing.T) {
	binDir := pluginBinDir(t, "ptp", "host-local")
	n := newNode(t)
	a := newNetwork(t, n, "1.0.0", []string{"10.99.30.0/24"}, nil)
	b := newNetwork(t, n, "1.0.0", []string{"10.99.31.0/24"}, map[string]any{"stateDir": a.stateDir})
	ptp := map[string]any{"cniVersion": "1.0.0", "name": "other-" + randHex(3), "plugins": []any{map[string]any{
		"type": "ptp", "ipMasq": false,
		"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": "10.99.32.0/24"}}}, "dataDir": t.TempDir()},
	}}}
	p := newPod(t, "pod-multus")
	eth0, net1, net2 := p, onIf(p, "net1"), onIf(p, "net2")
	runA, runB, runC := newChainRunner(t, n, binDir, conflistOf(a)), newChainRunner(t, n, binDir, conflistOf(b)), newChainRunner(t, n, binDir, ptp)

	resA := runA.add(t, eth0)
	resB := runB.add(t, net1)
	runC.add(t, net2)
	ipA, ipB := resultIP(t, resA), resultIP(t, resB)
	assertWired(t, n, eth0, ipA, hostVethOf(t, resA))
	if resA.IPs[0].Gateway == nil || len(resA.Routes) != 1 {
		t.Errorf("eth0's result: gateway %v routes %v, want the gateway and the default route", resA.IPs[0].Gateway, resA.Routes)
	}
	if resB.IPs[0].Gateway != nil || len(resB.Routes) != 0 {
		t.Errorf("net1's result: gateway %v routes %v, want neither (eth0 carries the default route)", resB.IPs[0].Gateway, resB.Routes)
	}
	assertOwnTable(t, net1, ipB)
	defs := p.defaultRoutes(t)
	eth0Link := podLinkIndex(t, p, "eth0")
	if len(defs) != 1 || defs[0].LinkIndex != eth0Link {
		t.Errorf("pod default routes %v, want one, through eth0 (ifindex %d)", defs, eth0Link)
	}
	for _, ip := range []netip.Addr{ipA, ipB} {
		if err := ping(t.Context(), n.path(), ip); err != nil {
			t.Errorf("node to %s: %v", ip, err)
		}
		if err := pingFrom(t, p, ip, nodeIP()); err != nil {
			t.Errorf("pod from %s to the node: %v", ip, err)
		}
	}
	// list shows the whole (shared) store: each network's attachment with its ifname.
	listed := map[string]string{}
	for _, x := range a.list(t).Allocations {
		listed[x.Network+"/"+x.IfName] = x.IP
	}
	if len(listed) != 2 || listed[a.name+"/eth0"] != ipA.String() || listed[b.name+"/net1"] != ipB.String() {
		t.Errorf("list: %v, want %s on %s/eth0 and %s on %s/net1", listed, ipA, a.name, ipB, b.name)
	}
	for name, c := range map[string]func() error{"eth0": func() error { return runA.check(t, eth0) },
		"net1": func() error { return runB.check(t, net1) }, "net2": func() error { return runC.check(t, net2) }} {
		if err := c(); err != nil {
			t.Errorf("CHECK of %s: %v", name, err)
		}
	}

	if err := runB.del(t, net1); err != nil {
		t.Fatalf("DEL of net1: %v", err)
	}
	n.assertNoHostSide(t, ipB, hostVethOf(t, resB))
	if err := ping(t.Context(), n.path(), ipA); err != nil {
		t.Errorf("eth0 after net1's DEL: %v", err)
	}
	if err := runA.check(t, eth0); err != nil {
		t.Errorf("CHECK of eth0 after net1's DEL: %v", err)
	}
	for _, del := range []func() error{func() error { return runA.del(t, eth0) }, func() error { return runC.del(t, net2) }} {
		if err := del(); err != nil {
			t.Fatal(err)
		}
	}
	n.assertNoAttachments(t)
}

// TestSecondInterfaceSameNetwork: one eni-cni network attached twice to a
// sandbox (eth0, net1) gives two allocations; the first interface carries
// the default route; DEL of each frees its own.
func TestSecondInterfaceSameNetwork(t *testing.T) {
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.33.0/24"}, nil)
	p := newPod(t, "pod-two-ifs")
	res0, _ := nw.add(t, p)
	res1, _ := nw.add(t, onIf(p, "net1"))
	ip0, ip1 := resultIP(t, res0), resultIP(t, res1)
	if ip0 == ip1 {
		t.Fatalf("both interfaces got %s", ip0)
	}
	assertWired(t, n, p, ip0, hostVethOf(t, res0))
	assertOwnTable(t, onIf(p, "net1"), ip1)
	if l := nw.list(t); len(l.Allocations) != 2 {
		t.Errorf("list: %+v, want two allocations", l.Allocations)
	}
	nw.del(t, onIf(p, "net1"), p.path())
	if l := nw.list(t); len(l.Allocations) != 1 || l.Allocations[0].IfName != "eth0" {
		t.Errorf("after DEL of net1: %+v, want eth0's only", l.Allocations)
	}
	assertWired(t, n, p, ip0, hostVethOf(t, res0))
	nw.del(t, p, p.path())
	n.assertNoAttachments(t)
}

// assertOwnTable checks the wiring of an interface that does not carry the
// pod's default route: the gateway's link route and the default via it in
// the interface's own table, through the interface, and the rule `from IP
// lookup table`; nothing of it in main.
func assertOwnTable(t *testing.T, p *pod, ip netip.Addr) {
	t.Helper()
	h := openHandle(t, p.path())
	defer h.Close()
	idx := podLinkIndex(t, p, p.ifName)
	table := 1000 + idx
	routes := dump(t, "pod routes", func() ([]netlink.Route, error) {
		return h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	})
	var gw, def bool
	for _, r := range routes {
		switch {
		case r.LinkIndex != idx:
		case r.Dst != nil && r.Dst.String() == gatewayIP+"/32" && r.Scope == netlink.SCOPE_LINK:
			gw = true
		case (r.Dst == nil || r.Dst.String() == "0.0.0.0/0") && r.Gw.String() == gatewayIP:
			def = true
		}
	}
	if !gw || !def {
		t.Errorf("%s: table %d has %v, want `%s dev %s scope link` and `default via %s dev %s`", p.ifName, table, routes, gatewayIP, p.ifName, gatewayIP, p.ifName)
	}
	var rule bool
	for _, r := range dump(t, "pod rules", func() ([]netlink.Rule, error) { return h.RuleList(netlink.FAMILY_V4) }) {
		if r.Table == table && r.Src != nil && r.Src.String() == ip.String()+"/32" {
			rule = true
		}
	}
	if !rule {
		t.Errorf("%s: no rule `from %s lookup %d` in the pod", p.ifName, ip, table)
	}
	for _, r := range dump(t, "pod main routes", func() ([]netlink.Route, error) {
		return h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN, LinkIndex: idx}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF)
	}) {
		if r.Gw != nil || (r.Dst != nil && r.Dst.String() == gatewayIP+"/32") {
			t.Errorf("%s has a gateway route in main: %s", p.ifName, r)
		}
	}
}

func podLinkIndex(t *testing.T, p *pod, name string) int {
	t.Helper()
	h := openHandle(t, p.path())
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("pod %s: %s: %v", p.name, name, err)
	}
	return l.Attrs().Index
}

// nodeIP is the node's own address (on its lo).
func nodeIP() netip.Addr { return netip.MustParsePrefix(nodeAddr).Addr() }

// pingFrom sends one echo request from the pod, with source address src.
func pingFrom(t *testing.T, p *pod, src, dst netip.Addr) error {
	t.Helper()
	o, err := runIn(t.Context(), p.path(), nil, nil, "ping", "-c1", "-W1", "-I", src.String(), dst.String())
	if err != nil {
		return err
	}
	if o.exit != 0 {
		return &pingError{o}
	}
	return nil
}

type pingError struct{ o output }

func (e *pingError) Error() string { return "ping: " + e.o.String() }

// TestMultusDefaultRouteOnSecondNetwork: net1's network says
// `defaultRoute: true`. net1 takes the pod's default route and eth0 moves
// to a table of its own (it used to lose its routes: CHECK of eth0 failed
// with 103, and after net1's DEL the pod had no IPv4 route); both answer,
// CHECK passes for both; net1's DEL hands the default back to eth0 and
// leaves no pod-side rule of its address.
func TestMultusDefaultRouteOnSecondNetwork(t *testing.T) {
	binDir := pluginBinDir(t)
	n := newNode(t)
	a := newNetwork(t, n, "1.0.0", []string{"10.99.34.0/24"}, nil)
	b := newNetwork(t, n, "1.0.0", []string{"10.99.35.0/24"}, map[string]any{"stateDir": a.stateDir, "defaultRoute": true})
	p := newPod(t, "pod-default-net1")
	eth0, net1 := p, onIf(p, "net1")
	runA, runB := newChainRunner(t, n, binDir, conflistOf(a)), newChainRunner(t, n, binDir, conflistOf(b))
	ipA, ipB := resultIP(t, runA.add(t, eth0)), resultIP(t, runB.add(t, net1))

	if defs := p.defaultRoutes(t); len(defs) != 1 || defs[0].LinkIndex != podLinkIndex(t, p, "net1") {
		t.Errorf("pod default routes %v, want one, through net1", defs)
	}
	assertOwnTable(t, eth0, ipA)
	for _, ip := range []netip.Addr{ipA, ipB} {
		if err := ping(t.Context(), n.path(), ip); err != nil {
			t.Errorf("node to %s: %v", ip, err)
		}
	}
	if err := runA.check(t, eth0); err != nil {
		t.Errorf("CHECK of eth0: %v", err)
	}
	if err := runB.check(t, net1); err != nil {
		t.Errorf("CHECK of net1: %v", err)
	}

	if err := runB.del(t, net1); err != nil {
		t.Fatalf("DEL of net1: %v", err)
	}
	if defs := p.defaultRoutes(t); len(defs) != 1 || defs[0].LinkIndex != podLinkIndex(t, p, "eth0") {
		t.Errorf("pod default routes after net1's DEL %v, want one, through eth0", defs)
	}
	h := openHandle(t, p.path())
	for _, r := range dump(t, "pod rules", func() ([]netlink.Rule, error) { return h.RuleList(netlink.FAMILY_V4) }) {
		if r.Src != nil && r.Src.String() == ipB.String()+"/32" {
			t.Errorf("pod rule of net1's %s left after its DEL: %s", ipB, r)
		}
	}
	h.Close()
	if err := ping(t.Context(), n.path(), ipA); err != nil {
		t.Errorf("eth0 after net1's DEL: %v", err)
	}
	if err := runA.check(t, eth0); err != nil {
		t.Errorf("CHECK of eth0 after net1's DEL: %v", err)
	}
	if err := runA.del(t, eth0); err != nil {
		t.Fatal(err)
	}
	n.assertNoAttachments(t)
}
