package netsetup

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The pod's default route moves between its interfaces of the VPC CNI's
// layout (a default via 169.254.1.1): an interface told to take it
// (DefaultAlways) first gives the former carrier a table of its own and
// the rule that selects it, as if that one had been attached second, and
// the DEL of the carrier hands it back to the first other interface with
// such a table. Each step is a route or rule replaced or added one at a
// time, in an order that keeps every interface reachable: a kill midway
// leaves the former carrier with its routes in main or in its own table
// (both are what CHECK accepts), and a repeated ADD or DEL finishes the
// move.

// moveDefaultAside gives every other interface that carries the pod's
// default route via the gateway gw (of one family) its own table and
// `from` rule, so that it keeps answering once idx takes main's routes.
func moveDefaultAside(h netlinksafe.Handle, p Pod, idx int, gw netip.Addr) error {
	for _, o := range gatewayCarriers(h, idx, gw) {
		link, err := h.LinkByIndex(o)
		if err != nil {
			return fmt.Errorf("find the default route's interface %d in %s: %w", o, p.Netns, err)
		}
		addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(link, familyOf(gw)) })
		if err != nil {
			return fmt.Errorf("list addresses of %s in %s: %w", link.Attrs().Name, p.Netns, err)
		}
		table := podTable(o)
		if err := routeViaGateway(h, o, table, true, gw); err != nil {
			return fmt.Errorf("move %s's default route to table %d in %s: %w", link.Attrs().Name, table, p.Netns, err)
		}
		for _, a := range addrs {
			ip, ok := addrOf(a.IP)
			if !ok || ip.IsLinkLocalUnicast() {
				continue
			}
			if err := addSourceRule(h, ip, table); err != nil {
				return fmt.Errorf("add rule from %s lookup %d in %s: %w", ip, table, p.Netns, err)
			}
		}
	}
	return nil
}

// gatewayCarriers lists the interfaces other than idx with a default via
// the gateway gw in the pod's main table. A listing error leaves the list
// empty: the replace that follows takes main's routes all the same.
func gatewayCarriers(h netlinksafe.Handle, idx int, gw netip.Addr) []int {
	routes, err := h.RouteListFiltered(familyOf(gw), &netlink.Route{Table: mainTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil
	}
	var out []int
	for _, r := range routes {
		if isDefaultRoute(r) && isGateway(r, gw) && r.LinkIndex != idx {
			out = append(out, r.LinkIndex)
		}
	}
	return out
}

// routeViaGateway adds (or replaces) the gateway's link route and the
// default via it, through idx, in table: the link route first, since the
// kernel accepts the default only with its gateway reachable on idx. An
// IPv6 gateway is link-local, always on the link: it needs no link route.
func routeViaGateway(h netlinksafe.Handle, idx, table int, replace bool, gw netip.Addr) error {
	routes := []*netlink.Route{
		{LinkIndex: idx, Dst: hostNet(gw), Scope: netlink.SCOPE_LINK, Table: table},
		{LinkIndex: idx, Gw: gw.AsSlice(), Scope: netlink.SCOPE_UNIVERSE, Table: table},
	}
	if gw.Is6() {
		routes = routes[1:]
		routes[0].Family = unix.AF_INET6
	}
	for _, r := range routes {
		add := h.RouteAdd
		if replace {
			add = h.RouteReplace
		}
		if err := add(r); err != nil {
			return fmt.Errorf("add route %s: %w", r, err)
		}
	}
	return nil
}

// addSourceRule adds the pod-side `from ip lookup table`.
func addSourceRule(h netlinksafe.Handle, ip netip.Addr, table int) error {
	rule := podSourceRule(ip)
	rule.Table = table
	if err := h.RuleAdd(rule); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return nil
}

func podSourceRule(ip netip.Addr) *netlink.Rule {
	rule := netlink.NewRule()
	rule.Src, rule.Priority, rule.Family = hostNet(ip), PodRulePriority, familyOf(ip)
	return rule
}

// unwirePod removes the pod side of a.IfName that the kernel does not
// remove with the link: its `from` rule, and the default route if it
// carries it, handed to another interface of ours first. A pod whose
// namespace is gone, or a path that is not a namespace other than the
// node's, has nothing to undo.
func unwirePod(a Attachment) error {
	podNS, err := netns.GetFromPath(a.Netns)
	if err != nil {
		return nil
	}
	defer podNS.Close()
	if isOwnNetns(podNS) {
		return nil
	}
	h, err := netlinksafe.NewHandleAt(podNS)
	if err != nil {
		return nil
	}
	defer h.Close()
	var errs []error
	if link, err := h.LinkByName(a.IfName); err == nil && a.IfName != "" {
		if err := handBackDefault(h, link.Attrs().Index, gatewayOf(a.IP)); err != nil {
			errs = append(errs, fmt.Errorf("hand the default route of %s on to another interface in %s: %w", a.IfName, a.Netns, err))
		}
	}
	rules, err := retryDump(func() ([]netlink.Rule, error) { return h.RuleList(familyOf(a.IP)) })
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list rules in %s: %w", a.Netns, err))...)
	}
	want := hostNet(a.IP).String()
	for i := range rules {
		r := &rules[i]
		if r.Priority != PodRulePriority || r.Src == nil || r.Src.String() != want {
			continue
		}
		if err := h.RuleDel(r); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete rule from %s lookup %d in %s: %w", a.IP, r.Table, a.Netns, err))
		}
	}
	return errors.Join(errs...)
}

// isOwnNetns: DEL does not check its CNI_NETNS, and the node's own
// namespace has no pod side to undo.
func isOwnNetns(ns netns.NsHandle) bool {
	self, err := netns.Get()
	if err != nil {
		return true
	}
	defer self.Close()
	return self.Equal(ns)
}

// handBackDefault gives main's routes via gw to the lowest-indexed other
// interface that has them in its own table, if idx carries them: without
// it, the pod is left with no default route when its carrier goes.
func handBackDefault(h netlinksafe.Handle, idx int, gw netip.Addr) error {
	_, def, err := podGatewayRoutes(h, idx, mainTable, gw)
	if err != nil || !def {
		return err
	}
	links, err := h.LinkList()
	if err != nil {
		return err
	}
	heir := 0
	for _, l := range links {
		o := l.Attrs().Index
		if o == idx || l.Attrs().Flags&net.FlagUp == 0 || (heir != 0 && o > heir) {
			continue
		}
		if link, d, err := podGatewayRoutes(h, o, podTable(o), gw); err == nil && link && d {
			heir = o
		}
	}
	if heir == 0 {
		return nil
	}
	return routeViaGateway(h, heir, mainTable, true, gw)
}
