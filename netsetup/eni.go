package netsetup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ENILink describes a secondary ENI as the node sees it.
type ENILink struct {
	MAC        string
	MTU        int
	Table      int          // policy-routing table of the ENI
	SubnetCIDR netip.Prefix // routed on the link in Table
	Gateway    netip.Addr   // the subnet's VPC router, default route of Table
	// Address is the ENI's primary private address, put on the link
	// without a route: the kernel picks a link's own address as the
	// source when it masquerades traffic leaving by it (kube-proxy does
	// for a pod on this ENI dialing a NodePort whose endpoint is on
	// another node). A link without one lends the primary ENI's, which
	// the VPC's source/destination check drops. Invalid: none.
	Address netip.Addr
}

// ErrNoLink reports an ENI whose link has not (yet) appeared on the node.
var ErrNoLink = errors.New("no link with the ENI's MAC")

// EnsureENI makes the ENI's link usable for pods: up with the MTU, loose
// reverse-path filtering (replies to pods on this ENI arrive on it while
// the main table routes elsewhere), and its table holding the subnet route
// and the default route via the subnet's router. It checks before it
// changes anything, so ADD can call it every time at the cost of a lookup.
func EnsureENI(e ENILink) error {
	_, err := ReassertENI(e)
	return err
}

// ReassertENI is EnsureENI that says what it had to put back ("" when the
// link was as it should be): `warm` runs it on every pass, for every ENI,
// because systemd-networkd or amazon-ec2-net-utils may flush a table or
// take a link down behind eni-cni's back.
func ReassertENI(e ENILink) (repaired string, err error) {
	link, err := linkByMAC(e.MAC)
	if err != nil {
		return "", err
	}
	missing := eniMissing(link, e)
	if len(missing) == 0 {
		return "", nil
	}
	name := link.Attrs().Name
	if e.MTU > 0 && link.Attrs().MTU != e.MTU {
		if err := netlink.LinkSetMTU(link, e.MTU); err != nil {
			return "", fmt.Errorf("set mtu %d on %s: %w", e.MTU, name, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return "", fmt.Errorf("set %s up: %w", name, err)
	}
	if err := os.WriteFile(rpFilterPath(name), []byte("2"), 0o644); err != nil {
		return "", fmt.Errorf("loose rp_filter on %s: %w", name, err)
	}
	for _, r := range eniRoutes(link, e) {
		if err := netlink.RouteReplace(r); err != nil {
			return "", fmt.Errorf("add route %s to table %d: %w", r, e.Table, err)
		}
	}
	if err := ensureENIAddr(link, e); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s (table %d): %s", name, e.Table, strings.Join(missing, ", ")), nil
}

// ensureENIAddr puts e.Address on the link with the subnet's length, as
// DHCP would, but no prefix route: the subnet stays routed by the primary
// ENI in main, and by this link only in its own table.
func ensureENIAddr(link netlink.Link, e ENILink) error {
	if !e.Address.IsValid() || hasAddr(link, e.Address) {
		return nil
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: e.Address.AsSlice(), Mask: net.CIDRMask(e.SubnetCIDR.Bits(), 32)}, Flags: unix.IFA_F_NOPREFIXROUTE}
	if err := netlink.AddrAdd(link, a); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add address %s to %s: %w", e.Address, link.Attrs().Name, err)
	}
	return nil
}

// hasAddr says whether the link carries ip, whatever its length: a DHCP
// client of the node's image may have put it there first.
func hasAddr(link netlink.Link, ip netip.Addr) bool {
	addrs, err := netlinksafe.AddrList(link, unix.AF_INET)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == ip {
			return true
		}
	}
	return false
}

func rpFilterPath(link string) string { return "/proc/sys/net/ipv4/conf/" + link + "/rp_filter" }

// eniRoutes are the routes of the ENI's table: the subnet on the link and
// the default route via the subnet's router.
func eniRoutes(link netlink.Link, e ENILink) []*netlink.Route {
	idx := link.Attrs().Index
	subnet := &net.IPNet{IP: e.SubnetCIDR.Masked().Addr().AsSlice(), Mask: net.CIDRMask(e.SubnetCIDR.Bits(), 32)}
	return []*netlink.Route{
		{LinkIndex: idx, Dst: subnet, Scope: netlink.SCOPE_LINK, Table: e.Table},
		{LinkIndex: idx, Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Gw: e.Gateway.AsSlice(), Table: e.Table},
	}
}

// WaitENI waits for the ENI's link to appear (after an attach the kernel
// takes a moment) and then ensures it. It looks every 20 ms: pods may be
// waiting for this ENI's addresses, and a look is one link dump.
func WaitENI(ctx context.Context, e ENILink) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := EnsureENI(e)
		if !errors.Is(err, ErrNoLink) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the link of %s: %w", e.MAC, err)
		case <-tick.C:
		}
	}
}

// eniMissing lists what the ENI's link lacks: up, MTU, loose rp_filter,
// its address, the subnet route and the default route of its table.
func eniMissing(link netlink.Link, e ENILink) []string {
	var out []string
	if link.Attrs().Flags&net.FlagUp == 0 {
		out = append(out, "link down")
	}
	if e.MTU > 0 && link.Attrs().MTU != e.MTU {
		out = append(out, fmt.Sprintf("mtu %d", link.Attrs().MTU))
	}
	if b, err := os.ReadFile(rpFilterPath(link.Attrs().Name)); err != nil || strings.TrimSpace(string(b)) != "2" {
		out = append(out, "strict rp_filter")
	}
	if e.Address.IsValid() && !hasAddr(link, e.Address) {
		out = append(out, "address "+e.Address.String())
	}
	filter := &netlink.Route{Table: e.Table, LinkIndex: link.Attrs().Index}
	routes, err := netlinksafe.RouteListFiltered(unix.AF_INET, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF)
	if err != nil {
		return append(out, "routes unreadable")
	}
	var subnet, dflt bool
	for _, r := range routes {
		switch {
		case r.Dst == nil || r.Dst.String() == "0.0.0.0/0":
			dflt = dflt || r.Gw.Equal(e.Gateway.AsSlice())
		case r.Dst.String() == e.SubnetCIDR.Masked().String():
			subnet = true
		}
	}
	if !subnet {
		out = append(out, "subnet route")
	}
	if !dflt {
		out = append(out, "default route")
	}
	return out
}

func linkByMAC(mac string) (netlink.Link, error) {
	links, err := netlinksafe.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		if strings.EqualFold(l.Attrs().HardwareAddr.String(), mac) {
			return l, nil
		}
	}
	return nil, fmt.Errorf("%w %s", ErrNoLink, mac)
}

// PodRules are the policy rules a pod address should have: `to IP lookup
// main`, and for an address of a secondary ENI `from IP [to each of
// FromDsts] lookup Table`.
type PodRules struct {
	IP       netip.Addr
	Table    int
	FromDsts []netip.Prefix
}

// ReassertPodRules adds the rules of pods that are missing (one dump of
// the rule list, then only the adds needed) and says which it put back.
func ReassertPodRules(pods []PodRules) (repaired []string, err error) {
	have, err := OurRules()
	if err != nil {
		return nil, err
	}
	type key struct {
		ip    netip.Addr
		from  bool
		table int
		dst   netip.Prefix
	}
	present := make(map[key]bool, len(have))
	for _, r := range have {
		present[key{r.IP, r.From, r.Table, r.Dst}] = true
	}
	// Dumped after the rules: DEL removes a pod's /32 before its rules,
	// so a pod whose rules are missing because a DEL is under way (the
	// caller's list of allocations is older than that DEL) has no route
	// either and must not get its rules back behind the DEL.
	routed, err := routedHosts()
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, p := range pods {
		if !routed[p.IP] {
			continue
		}
		if !present[key{p.IP, false, mainTable, netip.Prefix{}}] {
			if err := addRule(toPodRule(p.IP)); err != nil {
				errs = append(errs, fmt.Errorf("add rule to %s lookup main: %w", p.IP, err))
			} else {
				repaired = append(repaired, fmt.Sprintf("rule to %s lookup main", p.IP))
			}
		}
		if p.Table == 0 {
			continue
		}
		dsts := p.FromDsts
		if len(dsts) == 0 {
			dsts = []netip.Prefix{{}}
		}
		for _, d := range dsts {
			if present[key{p.IP, true, p.Table, d.Masked()}] {
				continue
			}
			if err := addRule(fromPodRule(p.IP, p.Table, d)); err != nil {
				errs = append(errs, fmt.Errorf("add rule from %s lookup %d: %w", p.IP, p.Table, err))
			} else {
				repaired = append(repaired, fmt.Sprintf("rule from %s lookup %d", p.IP, p.Table))
			}
		}
	}
	return repaired, errors.Join(errs...)
}

// routedHosts returns the addresses that have a /32 route in the main table.
func routedHosts() (map[netip.Addr]bool, error) {
	routes, err := netlinksafe.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: mainTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list main table routes: %w", err)
	}
	out := make(map[netip.Addr]bool, len(routes))
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		if ones, bits := r.Dst.Mask.Size(); ones != 32 || bits != 32 {
			continue
		}
		if a, ok := netip.AddrFromSlice(r.Dst.IP.To4()); ok {
			out[a] = true
		}
	}
	return out, nil
}
