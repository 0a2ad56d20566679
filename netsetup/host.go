package netsetup

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// IsOurVeth reports whether name has the shape HostVethName gives with
// prefix: the prefix followed by lowercase hex up to the 15-character limit.
// The shape check keeps the GC sweep away from anyone else's interfaces
// that happen to share a prefix.
func IsOurVeth(prefix, name string) bool {
	if len(name) != unix.IFNAMSIZ-1 || len(prefix) >= len(name) || name[:len(prefix)] != prefix {
		return false
	}
	for _, c := range name[len(prefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// OurVeths lists the node's veth links named like ours.
func OurVeths(prefix string) ([]string, error) {
	links, err := netlinksafe.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var names []string
	for _, l := range links {
		if l.Type() == "veth" && IsOurVeth(prefix, l.Attrs().Name) {
			names = append(names, l.Attrs().Name)
		}
	}
	return names, nil
}

// PodRule is one of our policy rules for a pod address.
type PodRule struct {
	IP       netip.Addr
	Priority int
	Table    int
	From     bool
	Dst      netip.Prefix // of a `from` rule limited to a destination
}

// OurRules lists the rules at our priorities that match a single address,
// of either family.
func OurRules() ([]PodRule, error) {
	rules, err := netlinksafe.RuleList(unix.AF_INET)
	if err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	rules6, err := netlinksafe.RuleList(unix.AF_INET6)
	if err != nil {
		return nil, fmt.Errorf("list ipv6 rules: %w", err)
	}
	rules = append(rules, rules6...)
	var out []PodRule
	for _, r := range rules {
		var ipn = r.Dst
		from := r.Priority == RulePriorityFromPod
		if from {
			ipn = r.Src
		} else if r.Priority != RulePriorityToPod {
			continue
		}
		ip, ok := isHostNet(ipn)
		if !ok {
			continue
		}
		pr := PodRule{IP: ip, Priority: r.Priority, Table: r.Table, From: from}
		if from && r.Dst != nil {
			if a, ok := addrOf(r.Dst.IP); ok {
				ones, _ := r.Dst.Mask.Size()
				pr.Dst = netip.PrefixFrom(a, ones)
			}
		}
		out = append(out, pr)
	}
	return out, nil
}

// DeleteRule removes one rule; a rule already gone is not an error.
func DeleteRule(r PodRule) error {
	rule := toPodRule(r.IP)
	if r.From {
		rule = fromPodRule(r.IP, r.Table, r.Dst)
	}
	rule.Table = r.Table
	if err := netlink.RuleDel(rule); err != nil && !isNotFound(err) {
		return err
	}
	return nil
}

// PodRoute is a /32 (or /128) host route through one of our veths.
type PodRoute struct {
	IP   netip.Addr
	Veth string
}

// OurRoutes lists /32 and /128 routes in the main table whose device is
// one of veths, with one dump of the table per family (not one per veth: a
// node with hundreds of pods would make hundreds of netlink calls).
func OurRoutes(veths []string) ([]PodRoute, error) {
	if len(veths) == 0 {
		return nil, nil
	}
	byIndex := make(map[int]string, len(veths))
	links, err := netlinksafe.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	want := make(map[string]bool, len(veths))
	for _, v := range veths {
		want[v] = true
	}
	for _, l := range links {
		if want[l.Attrs().Name] {
			byIndex[l.Attrs().Index] = l.Attrs().Name
		}
	}
	var out []PodRoute
	for _, family := range []int{unix.AF_INET, unix.AF_INET6} {
		routes, err := netlinksafe.RouteListFiltered(family, &netlink.Route{Table: mainTable}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range routes {
			name, ok := byIndex[r.LinkIndex]
			if !ok {
				continue
			}
			if ip, ok := isHostNet(r.Dst); ok {
				out = append(out, PodRoute{IP: ip, Veth: name})
			}
		}
	}
	return out, nil
}

// DeleteRoute removes one host route; a route already gone is not an error.
func DeleteRoute(r PodRoute) error {
	link, err := netlinksafe.LinkByName(r.Veth)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return err
	}
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: hostNet(r.IP), Scope: netlink.SCOPE_LINK}
	if err := netlink.RouteDel(route); err != nil && !isNotFound(err) && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}
