package integration

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/gc/crifake"
)

// nodeAddr6 is the node's IPv6 address on lo, as nodeAddr for IPv4: the
// source of node->pod pings and the target of pod->node ones.
var nodeAddr6 = netip.MustParseAddr("fd00:97::1")

// familyCase is a network of one family set with its ranges.
type familyCase struct {
	name     string
	families []string
	ranges   []string
}

// familyCases are the networks of IPv6 only and of both families in
// either order; each test runs them all.
func familyCases(n int) []familyCase {
	v4, v6 := fmt.Sprintf("10.99.%d.0/29", 40+n), fmt.Sprintf("fd00:99:%d::/125", 40+n)
	return []familyCase{
		{"ipv6", []string{"ipv6"}, []string{v6}},
		{"dual", []string{"ipv4", "ipv6"}, []string{v4, v6}},
		{"dual-ipv6-first", []string{"ipv6", "ipv4"}, []string{v6, v4}},
	}
}

// newFamilyNode is newNode with an IPv6 address on lo and IPv6
// forwarding off, as a fresh node has it: the plugin must turn it on.
func newFamilyNode(t *testing.T) *node {
	t.Helper()
	n := newNode(t)
	lo, err := n.h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	addr := &netlink.Addr{IPNet: netlink.NewIPNet(nodeAddr6.AsSlice()), Flags: unix.IFA_F_NODAD}
	if err := n.h.AddrAdd(lo, addr); err != nil {
		t.Fatalf("add %s to node lo: %v", nodeAddr6, err)
	}
	err = n.ns.Do(func(ns.NetNS) error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("0"), 0o644)
	})
	if err != nil {
		t.Fatalf("turn off ipv6 forwarding in the node namespace: %v", err)
	}
	return n
}

func newFamilyNetwork(t *testing.T, n *node, fc familyCase) *network {
	return newNetwork(t, n, "1.1.0", fc.ranges, map[string]any{"ipFamilies": fc.families})
}

// resultAddrs are the result's addresses in its order, checked to be
// /32 or /128 on the pod's interface with their family's gateway.
func resultAddrs(t *testing.T, res *current.Result) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, c := range res.IPs {
		ip, _ := netip.AddrFromSlice(c.Address.IP)
		ip = ip.Unmap()
		ones, _ := c.Address.Mask.Size()
		gw := "169.254.1.1"
		if ip.Is6() {
			gw = "fe80::1"
		}
		if ones != ip.BitLen() || c.Gateway.String() != gw || c.Interface == nil || *c.Interface != 1 {
			t.Errorf("result address %s/%d gw %s on %v, want /%d gw %s on 1", ip, ones, c.Gateway, c.Interface, ip.BitLen(), gw)
		}
		out = append(out, ip)
	}
	return out
}

// wantOrder checks the result lists one address per family in the order
// of ipFamilies.
func wantOrder(t *testing.T, fc familyCase, ips []netip.Addr) {
	t.Helper()
	var got []string
	for _, ip := range ips {
		got = append(got, map[bool]string{true: "ipv4", false: "ipv6"}[ip.Is4()])
	}
	if !slices.Equal(got, fc.families) {
		t.Errorf("result families %v (%v), want %v", got, ips, fc.families)
	}
}

// pingIn sends one echo request from src in the namespace at nsPath.
func pingIn(t *testing.T, nsPath string, src, dst netip.Addr) error {
	t.Helper()
	o, err := runIn(t.Context(), nsPath, nil, nil, "ping", "-c1", "-W1", "-I", src.String(), dst.String())
	if err != nil {
		return err
	}
	if o.exit != 0 {
		return fmt.Errorf("ping -I %s %s: exit %d %s%s", src, dst, o.exit, o.stdout, o.stderr)
	}
	return nil
}

// flows pings each of the pod's addresses from the node and the node from
// each of them.
func flows(t *testing.T, n *node, p *pod, ips []netip.Addr) error {
	t.Helper()
	for _, ip := range ips {
		nodeIP := netip.MustParseAddr(strings.TrimSuffix(nodeAddr, "/32"))
		if ip.Is6() {
			nodeIP = nodeAddr6
		}
		if err := pingIn(t, n.path(), nodeIP, ip); err != nil {
			return fmt.Errorf("node to pod %s: %w", p.name, err)
		}
		if err := pingIn(t, p.path(), ip, nodeIP); err != nil {
			return fmt.Errorf("pod %s to node: %w", p.name, err)
		}
	}
	return nil
}

func (nw *network) check(t *testing.T, p *pod, prev []byte) output {
	t.Helper()
	return nw.run(t, cniEnv("CHECK", p), nw.config(t, func(c map[string]any) {
		var r map[string]any
		if err := json.Unmarshal(prev, &r); err != nil {
			t.Fatal(err)
		}
		c["prevResult"] = r
	}))
}

// hostRoutes are the node's /32 and /128 routes in main, by address.
func (n *node) hostRoutes(t *testing.T) map[netip.Addr]int {
	t.Helper()
	out := map[netip.Addr]int{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		for _, r := range dump(t, "routes", func() ([]netlink.Route, error) { return n.h.RouteList(nil, fam) }) {
			if r.Dst == nil {
				continue
			}
			ip, _ := netip.AddrFromSlice(r.Dst.IP)
			if ones, _ := r.Dst.Mask.Size(); ones == ip.Unmap().BitLen() {
				out[ip.Unmap()] = r.LinkIndex
			}
		}
	}
	return out
}

// toRules are the addresses with a `to IP lookup main` rule at 512.
func (n *node) toRules(t *testing.T) map[netip.Addr]bool {
	t.Helper()
	out := map[netip.Addr]bool{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		for _, r := range dump(t, "rules", func() ([]netlink.Rule, error) { return n.h.RuleList(fam) }) {
			if r.Priority == rulePrioToPod && r.Dst != nil {
				ip, _ := netip.AddrFromSlice(r.Dst.IP)
				out[ip.Unmap()] = true
			}
		}
	}
	return out
}

// assertFamiliesWired: each address routed to the pod's veth with its rule.
func assertFamiliesWired(t *testing.T, n *node, ips []netip.Addr, veth string) {
	t.Helper()
	link, err := n.h.LinkByName(veth)
	if err != nil {
		t.Fatalf("host veth %s: %v", veth, err)
	}
	routes, rules := n.hostRoutes(t), n.toRules(t)
	for _, ip := range ips {
		if routes[ip] != link.Attrs().Index || !rules[ip] {
			t.Errorf("%s: route via ifindex %d (want %d), rule %v", ip, routes[ip], link.Attrs().Index, rules[ip])
		}
	}
}

// assertFamiliesGone: nothing on the node routes the addresses any more.
func assertFamiliesGone(t *testing.T, n *node, ips []netip.Addr, veth string) {
	t.Helper()
	routes, rules := n.hostRoutes(t), n.toRules(t)
	for _, ip := range ips {
		if _, ok := routes[ip]; ok || rules[ip] {
			t.Errorf("%s still routed (%v) or ruled (%v)", ip, ok, rules[ip])
		}
	}
	if _, err := n.h.LinkByName(veth); err == nil {
		t.Errorf("host veth %s left", veth)
	}
}

// stateAddrs are the addresses the state file records: allocated (by
// container ID) and cooling.
func (nw *network) stateAddrs(t *testing.T) (allocated map[string][]string, cooling []string) {
	t.Helper()
	var st struct {
		Version     int `json:"version"`
		Allocations []struct {
			ContainerID string `json:"containerID"`
			IP          string `json:"ip"`
			IP6         string `json:"ip6"`
		} `json:"allocations"`
		Cooling []struct {
			IP string `json:"ip"`
		} `json:"cooling"`
	}
	if err := json.Unmarshal(nw.stateBytes(t), &st); err != nil {
		t.Fatal(err)
	}
	allocated = map[string][]string{}
	for _, a := range st.Allocations {
		allocated[a.ContainerID] = append(allocated[a.ContainerID], a.IP)
		if a.IP6 != "" {
			allocated[a.ContainerID] = append(allocated[a.ContainerID], a.IP6)
		}
	}
	for _, c := range st.Cooling {
		cooling = append(cooling, c.IP)
	}
	if len(st.Allocations)+len(st.Cooling) > 0 && st.Version != 3 {
		t.Errorf("a state with IPv6 addresses has version %d, want 3", st.Version)
	}
	return allocated, cooling
}

func addrStrings(ips []netip.Addr) []string {
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	slices.Sort(out)
	return out
}

// TestFamiliesAddCheckDel: pods of IPv6 only and of both families get one
// address of each family in the order of ipFamilies, packets flow both
// ways (node to pod, pod to node, pod to pod), CHECK passes and fails once
// an IPv6 route is gone, a repeated ADD repairs it, and DEL without a netns
// frees both addresses into cooldown and leaves nothing on the node.
func TestFamiliesAddCheckDel(t *testing.T) {
	for _, fc := range familyCases(0) {
		t.Run(fc.name, func(t *testing.T) {
			n := newFamilyNode(t)
			nw := newFamilyNetwork(t, n, fc)
			pods := newPods(t, 2)
			res, raw := nw.add(t, pods[0])
			ips := resultAddrs(t, res)
			wantOrder(t, fc, ips)
			veth := hostVethOf(t, res)
			assertFamiliesWired(t, n, ips, veth)
			if err := flows(t, n, pods[0], ips); err != nil {
				t.Fatal(err)
			}
			res1, _ := nw.add(t, pods[1])
			ips1 := resultAddrs(t, res1)
			for i := range ips {
				if err := pingIn(t, pods[0].path(), ips[i], ips1[i]); err != nil {
					t.Errorf("pod to pod: %v", err)
				}
			}
			if o := nw.check(t, pods[0], raw); o.exit != 0 {
				t.Errorf("CHECK: %s", o)
			}
			v6 := ips[slices.IndexFunc(ips, netip.Addr.Is6)]
			link, _ := n.h.LinkByName(veth)
			if err := n.h.RouteDel(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: netlink.NewIPNet(v6.AsSlice()), Scope: netlink.SCOPE_LINK}); err != nil {
				t.Fatal(err)
			}
			if o := nw.check(t, pods[0], raw); o.exit == 0 || !strings.Contains(string(o.stdout), "no host route "+v6.String()) {
				t.Errorf("CHECK without the IPv6 host route: %s", o)
			}
			if err := flows(t, n, pods[0], ips); err == nil {
				t.Error("packets flowed without the IPv6 host route")
			}
			again, _ := nw.add(t, pods[0])
			if got := resultAddrs(t, again); !slices.Equal(got, ips) {
				t.Errorf("repeated ADD gave %v, want %v", got, ips)
			}
			if err := flows(t, n, pods[0], ips); err != nil {
				t.Errorf("after the repeated ADD: %v", err)
			}
			if o := nw.check(t, pods[0], raw); o.exit != 0 {
				t.Errorf("CHECK after the repeated ADD: %s", o)
			}
			nw.del(t, pods[0], "")
			assertFamiliesGone(t, n, ips, veth)
			allocated, cooling := nw.stateAddrs(t)
			slices.Sort(cooling)
			if _, ok := allocated[pods[0].containerID]; ok || !slices.Equal(cooling, addrStrings(ips)) {
				t.Errorf("after DEL: allocated %v, cooling %v, want %v cooling", allocated, cooling, addrStrings(ips))
			}
			nw.del(t, pods[0], "") // twice is fine
			if err := flows(t, n, pods[1], ips1); err != nil {
				t.Errorf("the other pod after DEL: %v", err)
			}
		})
	}
}

// TestFamiliesGCRebootRepair: the GC verb frees both addresses of a pod
// the runtime no longer has; a reboot drops the allocations of both
// families; a lost state refuses ADD naming the routed IPv6 address and
// repair rebuilds the pod's one allocation with both addresses.
func TestFamiliesGCRebootRepair(t *testing.T) {
	for _, fc := range familyCases(1) {
		t.Run(fc.name, func(t *testing.T) {
			n := newFamilyNode(t)
			nw := newFamilyNetwork(t, n, fc)
			pods := newPods(t, 4)
			gone := nw.addFamilies(t, pods[0])
			goneIPs := resultAddrs(t, gone.res)
			kept := nw.addFamilies(t, pods[1])
			nw.backdate(t, 3600e9, pods[0], pods[1])
			if o := nw.gcVerb(t, pods[1]); o.exit != 0 {
				t.Fatalf("GC: %s", o)
			}
			assertFamiliesGone(t, n, goneIPs, gone.veth)
			allocated, cooling := nw.stateAddrs(t)
			slices.Sort(cooling)
			if len(allocated) != 1 || !slices.Equal(cooling, addrStrings(goneIPs)) {
				t.Errorf("after GC: allocated %v, cooling %v", allocated, cooling)
			}
			keptIPs := resultAddrs(t, kept.res)
			if err := flows(t, n, pods[1], keptIPs); err != nil {
				t.Errorf("the valid pod after GC: %v", err)
			}

			// Lost state: ADD refuses, naming the routed addresses.
			if err := os.Remove(nw.statePath()); err != nil {
				t.Fatal(err)
			}
			v6 := keptIPs[slices.IndexFunc(keptIPs, netip.Addr.Is6)]
			wantCNIError(t, "ADD with the state lost", nw.addOut(t, pods[2]), 5, "state file lost", v6.String())
			cri := crifake.Start(t)
			cri.SetSandboxes(readySandboxes(pods[1])...)
			if o := nw.cli(t, "repair", "--cri-endpoint", cri.Endpoint()); o.exit != 0 {
				t.Fatalf("repair: %s", o)
			}
			allocated, _ = nw.stateAddrs(t)
			if got := allocated[pods[1].containerID]; !slices.Equal(got, sortedFamilies(keptIPs)) {
				t.Errorf("repair rebuilt %v, want %v", got, sortedFamilies(keptIPs))
			}
			res, _ := nw.add(t, pods[2])
			if ips := resultAddrs(t, res); slices.ContainsFunc(ips, func(ip netip.Addr) bool { return slices.Contains(keptIPs, ip) }) {
				t.Errorf("ADD after repair got %v, an address of the live pod (%v)", ips, keptIPs)
			}

			// Reboot: pods and veths are gone, the store still has them.
			// The kernel deletes a pod's veth with its namespace, but
			// later, from a work queue: the next ADD, given one of their
			// addresses again, found it still routed through the dying
			// veth (3 runs in 37 under load), which a real reboot cannot
			// leave behind.
			for _, p := range pods[1:3] {
				if err := p.remove(); err != nil {
					t.Fatal(err)
				}
			}
			for _, veth := range []string{kept.veth, hostVethOf(t, res)} {
				waitFor(t, veth+" gone with its pod's namespace", func() bool {
					_, err := n.h.LinkByName(veth)
					return err != nil
				})
			}
			nw.rewriteState(t, func(st map[string]any) { st["bootID"] = "a-previous-boot" })
			res, _ = nw.add(t, pods[3])
			allocated, _ = nw.stateAddrs(t)
			if len(allocated) != 1 || len(allocated[pods[3].containerID]) != len(fc.families) {
				t.Errorf("after the reboot: %v, want only %s with one address per family", allocated, pods[3].name)
			}
			if err := flows(t, n, pods[3], resultAddrs(t, res)); err != nil {
				t.Errorf("after the reboot: %v", err)
			}
		})
	}
}

// sortedFamilies are ips as the store holds them: IPv4 first.
func sortedFamilies(ips []netip.Addr) []string {
	out := slices.Clone(ips)
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.BitLen() - b.BitLen() })
	var s []string
	for _, ip := range out {
		s = append(s, ip.String())
	}
	return s
}

// addFamilies is addDirect for a result of one or two addresses.
func (nw *network) addFamilies(t *testing.T, p *pod) attached {
	t.Helper()
	res, _ := nw.add(t, p)
	return attached{pod: p, res: res, veth: hostVethOf(t, res)}
}
