package netsetup

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrMismatch reports wiring that is missing or differs from what Setup
// makes. CHECK fails with it; an idempotent ADD repairs it.
var ErrMismatch = errors.New("attachment wiring differs from what eni-cni set up")

// ErrHostMismatch and ErrPodMismatch say on which side: the node's (host
// veth, /32 route, rules) or the pod's (address, routes, neighbour). Both
// are ErrMismatch.
var (
	ErrHostMismatch = fmt.Errorf("%w on the node", ErrMismatch)
	ErrPodMismatch  = fmt.Errorf("%w in the pod", ErrMismatch)
)

// Check verifies that what Setup made for p is still in place, on the node
// and in the pod, and returns the links' MACs.
func Check(p Pod) (Links, error) {
	var l Links
	podNS, err := netns.GetFromPath(p.Netns)
	if err != nil {
		return l, fmt.Errorf("%w %s: %v", ErrNetNS, p.Netns, err)
	}
	defer podNS.Close()
	host, err := netlinksafe.LinkByName(p.HostVeth)
	if err != nil {
		return l, fmt.Errorf("%w: host veth %s: %v", ErrHostMismatch, p.HostVeth, err)
	}
	l.HostMAC = host.Attrs().HardwareAddr
	if host.Attrs().Flags&net.FlagUp == 0 {
		return l, fmt.Errorf("%w: host veth %s is down", ErrHostMismatch, p.HostVeth)
	}
	for _, ip := range p.addrs() {
		if err := checkHost(p, ip, host); err != nil {
			return l, err
		}
	}
	l.PodMAC, l.Default, err = checkPod(p, podNS, l.HostMAC)
	return l, err
}

func checkHost(p Pod, ip netip.Addr, host netlink.Link) error {
	filter := &netlink.Route{Dst: hostNet(ip), Table: mainTable}
	routes, err := netlinksafe.RouteListFiltered(familyOf(ip), filter, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("list host routes to %s: %w", ip, err)
	}
	if !hasRouteVia(routes, host.Attrs().Index) {
		return fmt.Errorf("%w: no host route %s/%d dev %s", ErrHostMismatch, ip, ip.BitLen(), p.HostVeth)
	}
	rules, err := netlinksafe.RuleList(familyOf(ip))
	if err != nil {
		return fmt.Errorf("list rules: %w", err)
	}
	if !hasRule(rules, ip, RulePriorityToPod, mainTable) {
		return fmt.Errorf("%w: no rule to %s lookup main", ErrHostMismatch, ip)
	}
	if p.Table != 0 && ip == p.IP && !hasRule(rules, ip, RulePriorityFromPod, p.Table) {
		return fmt.Errorf("%w: no rule from %s lookup %d", ErrHostMismatch, ip, p.Table)
	}
	if ip.Is6() {
		return checkHostGateway6(p, host)
	}
	return nil
}

// checkHostGateway6: the host veth owns fe80::1, so that it answers the
// pod's neighbour solicitations for its gateway.
func checkHostGateway6(p Pod, host netlink.Link) error {
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(host, unix.AF_INET6) })
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", p.HostVeth, err)
	}
	for _, a := range addrs {
		if ip, ok := addrOf(a.IP); ok && ip == GatewayIP6() {
			return nil
		}
	}
	return fmt.Errorf("%w: host veth %s lacks the pods' gateway %s", ErrHostMismatch, p.HostVeth, GatewayIP6())
}

func hasRouteVia(routes []netlink.Route, linkIndex int) bool {
	for _, r := range routes {
		if r.LinkIndex == linkIndex {
			return true
		}
	}
	return false
}

func hasRule(rules []netlink.Rule, ip netip.Addr, prio, table int) bool {
	for i := range rules {
		if isOurRule(&rules[i], ip) && rules[i].Priority == prio && rules[i].Table == table {
			return true
		}
	}
	return false
}

func checkPod(p Pod, podNS netns.NsHandle, hostMAC net.HardwareAddr) (mac net.HardwareAddr, carries bool, err error) {
	h, link, err := podLink(p, podNS)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrPodMismatch, err)
	}
	defer h.Close()
	for i, ip := range p.addrs() {
		if err := checkPodAddr(h, link, p, ip); err != nil {
			return nil, false, err
		}
		c, err := checkPodRoutes(h, link.Attrs().Index, p, ip)
		if err != nil {
			return nil, false, err
		}
		if i == 0 {
			carries = c
		}
		if err := checkPodNeighbour(h, link, p, ip, hostMAC); err != nil {
			return nil, false, err
		}
	}
	return link.Attrs().HardwareAddr, carries, nil
}

// checkPodRoutes finds the gateway's link route and the default via it
// through the interface, in main (the interface carries the pod's default
// route) or in the interface's own table with the rule that selects it
// (another interface does): configurePod made one or the other.
func checkPodRoutes(h netlinksafe.Handle, idx int, p Pod, ip netip.Addr) (carries bool, err error) {
	gw := gatewayOf(ip)
	gwMain, defMain, err := podGatewayRoutes(h, idx, mainTable, gw)
	if err != nil || (gwMain && defMain) {
		return err == nil, err
	}
	table := podTable(idx)
	gwOwn, defOwn, err := podGatewayRoutes(h, idx, table, gw)
	if err != nil {
		return false, fmt.Errorf("list routes of table %d in %s: %w", table, p.Netns, err)
	}
	if !gwOwn || !defOwn {
		return false, fmt.Errorf("%w: pod routes via %s dev %s missing in %s (main: link route %t, default %t; table %d: link route %t, default %t)",
			ErrPodMismatch, gw, p.IfName, p.Netns, gwMain, defMain, table, gwOwn, defOwn)
	}
	rules, err := retryDump(func() ([]netlink.Rule, error) { return h.RuleList(familyOf(ip)) })
	if err != nil {
		return false, fmt.Errorf("list rules in %s: %w", p.Netns, err)
	}
	for _, r := range rules {
		if r.Table == table && r.Priority == PodRulePriority && r.Src != nil && r.Src.String() == hostNet(ip).String() {
			return false, nil
		}
	}
	return false, fmt.Errorf("%w: no rule from %s lookup %d in %s", ErrPodMismatch, ip, table, p.Netns)
}

// podGatewayRoutes reports whether table has the gateway gw's link route
// and a default via gw, both through the link idx. An IPv6 gateway is
// link-local and needs no link route: link is then true.
func podGatewayRoutes(h netlinksafe.Handle, idx, table int, gw netip.Addr) (link, def bool, err error) {
	filter := &netlink.Route{LinkIndex: idx, Table: table}
	routes, err := h.RouteListFiltered(familyOf(gw), filter, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, false, err
	}
	link = gw.Is6()
	for _, r := range routes {
		switch {
		case r.Dst != nil && r.Dst.String() == hostNet(gw).String():
			link = true
		case isDefaultRoute(r) && isGateway(r, gw):
			def = true
		}
	}
	return link, def, nil
}

func checkPodAddr(h netlinksafe.Handle, link netlink.Link, p Pod, ip netip.Addr) error {
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(link, familyOf(ip)) })
	if err != nil {
		return fmt.Errorf("list addresses of %s in %s: %w", p.IfName, p.Netns, err)
	}
	want := hostNet(ip).String()
	for _, a := range addrs {
		if a.IPNet.String() == want {
			return nil
		}
	}
	return fmt.Errorf("%w: %s has no address %s in %s", ErrPodMismatch, p.IfName, want, p.Netns)
}

// checkPodNeighbour: the pod resolves its gateway to the host veth. Setup
// pins it (a permanent entry); a later plugin of the chain that changed
// the pod's MAC or flushed its neighbours removed the pin, and then the
// host veth's answer (proxy ARP, answerForGateway) resolves it. An entry
// with another MAC is a mismatch either way.
//
// For IPv6 the host veth owns the gateway (checkHostGateway6), so it
// answers the pod's solicitations; the pinned entry may be missing.
func checkPodNeighbour(h netlinksafe.Handle, link netlink.Link, p Pod, ip netip.Addr, hostMAC net.HardwareAddr) error {
	gw := gatewayOf(ip)
	neighs, err := retryDump(func() ([]netlink.Neigh, error) { return h.NeighList(link.Attrs().Index, familyOf(ip)) })
	if err != nil {
		return fmt.Errorf("list neighbours in %s: %w", p.Netns, err)
	}
	for _, n := range neighs {
		if !n.IP.Equal(gw.AsSlice()) || n.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) != 0 {
			continue
		}
		if n.HardwareAddr.String() != hostMAC.String() {
			return fmt.Errorf("%w: neighbour %s -> %s in %s, want %s", ErrPodMismatch, gw, n.HardwareAddr, p.Netns, hostMAC)
		}
		return nil
	}
	if ip.Is6() {
		return nil
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/conf/" + p.HostVeth + "/proxy_arp"); err == nil && strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	return fmt.Errorf("%w: no neighbour %s -> %s in %s, and %s does not answer ARP for it", ErrPodMismatch, GatewayIP(), hostMAC, p.Netns, p.HostVeth)
}

// retryDump repeats a netlink dump that the kernel flagged as interrupted
// (the table changed meanwhile), as netlinksafe does for the calls it wraps.
func retryDump[T any](dump func() ([]T, error)) ([]T, error) {
	var out []T
	var err error
	for range 5 {
		out, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return out, err
}
