package vpcfabric

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// port is the router's end of one ENI's link and what the router knows of
// the ENI: the attachment the link belongs to and the prefixes routed to it
// (every address as a /32, every delegated prefix as it is).
type port struct {
	name       string
	eni        string
	instance   string
	attachment string
	mac        net.HardwareAddr
	made       bool // the fabric made the veth (and deletes it)
	routed     map[netip.Prefix]bool
}

// plugLocked makes e's link as the instance's kernel sees a hot-plugged
// ENI: a veth with the ENI's MAC on the node, left down (the OS sets it
// up), its other end the ENI's port in the router.
func (f *Fabric) plugLocked(n *node, e ec2fake.ENI) error {
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return fmt.Errorf("link of %s: mac %q: %w", e.ID, e.MAC, err)
	}
	f.portSeq++
	p := &port{name: fmt.Sprintf("vpc%d", f.portSeq), eni: e.ID, instance: e.InstanceID, attachment: e.AttachmentID, made: true}
	name := f.cfg.LinkName(e)
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: p.name, MTU: MTU},
		PeerName:  name, PeerHardwareAddr: mac, PeerNamespace: netlink.NsFd(n.ns),
	}
	if e.DeviceIndex == 0 {
		veth.PeerMTU = MTU // DHCP's MTU on the primary link; eni-cni sets the others'
	}
	if err := f.rh.LinkAdd(veth); err != nil {
		return fmt.Errorf("link %s of %s on %s: %w", name, e.ID, n.nsPath, err)
	}
	return f.openPortLocked(p, e)
}

// openPortLocked readies a port: up at the VPC's MTU with the gateway of
// the ENI's subnet on it, answering ARP for the subnet, its source check,
// and the routes of what EC2 has assigned.
func (f *Fabric) openPortLocked(p *port, e ec2fake.ENI) error {
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return fmt.Errorf("port of %s: mac %q: %w", e.ID, e.MAC, err)
	}
	p.mac, p.routed = mac, map[netip.Prefix]bool{}
	l, err := f.rh.LinkByName(p.name)
	if err != nil {
		return fmt.Errorf("port %s of %s: %w", p.name, e.ID, err)
	}
	subnet, err := netip.ParsePrefix(e.SubnetCIDR)
	if err != nil {
		return fmt.Errorf("port of %s: subnet %q: %w", e.ID, e.SubnetCIDR, err)
	}
	gw := netip.PrefixFrom(subnet.Masked().Addr().Next(), 32)
	if err := f.rh.LinkSetMTU(l, MTU); err != nil {
		return fmt.Errorf("mtu of port %s: %w", p.name, err)
	}
	if err := f.rh.AddrReplace(l, &netlink.Addr{IPNet: ipNet(gw)}); err != nil {
		return fmt.Errorf("gateway %s on port %s: %w", gw, p.name, err)
	}
	if err := f.rh.LinkSetUp(l); err != nil {
		return fmt.Errorf("set port %s up: %w", p.name, err)
	}
	// proxy_arp: the VPC answers ARP for every address of the subnet (a
	// node resolves its neighbours in the subnet on its link), here with
	// the port's MAC for what the router routes elsewhere.
	if err := sysctls(f.cfg.Router, "net.ipv4.conf."+p.name+".rp_filter=0", "net.ipv4.conf."+p.name+".proxy_arp=1", "net.ipv4.neigh."+p.name+".proxy_delay=0"); err != nil {
		return err
	}
	if err := openCheck(f.cfg.Router, p.name); err != nil {
		return err
	}
	f.ports[p.eni] = p
	return f.routeLocked(p, e)
}

// wanted is what the router delivers to an attached ENI.
func wanted(e ec2fake.ENI) map[netip.Prefix]bool {
	out := map[netip.Prefix]bool{}
	if e.DeviceIndex < 0 {
		return out
	}
	for _, s := range append([]string{e.PrimaryIP}, e.SecondaryIPs...) {
		if a, err := netip.ParseAddr(s); err == nil {
			out[netip.PrefixFrom(a, 32)] = true
		}
	}
	for _, s := range e.Prefixes {
		if p, err := netip.ParsePrefix(s); err == nil {
			out[p.Masked()] = true
		}
	}
	return out
}

// routeLocked makes the port carry exactly what EC2 has assigned to the
// ENI: routes, neighbours pinned to the ENI's MAC (the VPC knows them, the
// node answers ARP for none but its own addresses) and the sources its
// check lets through.
func (f *Fabric) routeLocked(p *port, e ec2fake.ENI) error {
	want := wanted(e)
	var add, del []netip.Prefix
	for q := range want {
		if !p.routed[q] {
			add = append(add, q)
		}
	}
	for q := range p.routed {
		if !want[q] {
			del = append(del, q)
		}
	}
	if len(add)+len(del) == 0 {
		return nil
	}
	l, err := f.rh.LinkByName(p.name)
	if err != nil {
		return fmt.Errorf("port %s of %s: %w", p.name, p.eni, err)
	}
	// The check is narrowed before the routes go and widened only after
	// they are in place, so a failure midway leaves it stricter than what
	// the port carries, never looser: a source the ENI has lost is never
	// let through (and counted as passed) because a route delete failed.
	if len(del) > 0 {
		if err := allow(f.cfg.Router, p.name, nil, del); err != nil {
			return err
		}
	}
	for _, q := range del {
		if err := f.deliver(l, q, p.mac, false); err != nil {
			return err
		}
		delete(p.routed, q)
	}
	for _, q := range add {
		if err := f.deliver(l, q, p.mac, true); err != nil {
			return err
		}
		p.routed[q] = true
	}
	if len(add) == 0 {
		return nil
	}
	return allow(f.cfg.Router, p.name, add, nil)
}

// deliver adds (or removes) the route of q to the port and the
// neighbours of its addresses.
func (f *Fabric) deliver(l netlink.Link, q netip.Prefix, mac net.HardwareAddr, add bool) error {
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(q), Scope: netlink.SCOPE_LINK}
	if add {
		if err := f.rh.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s dev %s: %w", q, l.Attrs().Name, err)
		}
	} else if err := f.rh.RouteDel(r); err != nil {
		return fmt.Errorf("delete route %s dev %s: %w", q, l.Attrs().Name, err)
	}
	for a := q.Addr(); q.Contains(a); a = a.Next() {
		n := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT, IP: a.AsSlice(), HardwareAddr: mac}
		var err error
		if add {
			err = f.rh.NeighSet(n)
		} else {
			err = f.rh.NeighDel(n)
		}
		if err != nil {
			return fmt.Errorf("neighbour %s dev %s (add %t): %w", a, l.Attrs().Name, add, err)
		}
	}
	return nil
}

// unplugLocked takes an ENI off the fabric: it was detached or deleted.
// Its link vanishes from the node (a made one), its drops are kept.
func (f *Fabric) unplugLocked(p *port) error {
	if d, err := f.dropsOf(p.name); err == nil {
		f.gone[p.eni] += d
	}
	delete(f.ports, p.eni)
	if !p.made {
		l, err := f.rh.LinkByName(p.name)
		if err != nil {
			return fmt.Errorf("port %s of %s: %w", p.name, p.eni, err)
		}
		for q := range p.routed {
			if err := f.deliver(l, q, p.mac, false); err != nil {
				return err
			}
		}
		return closeCheck(f.cfg.Router, p.name)
	}
	if err := closeCheck(f.cfg.Router, p.name); err != nil {
		return err
	}
	l, err := f.rh.LinkByName(p.name)
	if err != nil {
		return fmt.Errorf("port %s of %s: %w", p.name, p.eni, err)
	}
	if err := f.rh.LinkDel(l); err != nil {
		return fmt.Errorf("delete the link of %s: %w", p.eni, err)
	}
	return nil
}

// dhcp configures the node's primary link as the instance's DHCP client
// does: up, the VPC's MTU, the primary address on its subnet, the default
// route via the subnet's gateway.
func dhcp(n *node, name string, e ec2fake.ENI) error {
	l, err := n.h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("primary link %s: %w", name, err)
	}
	subnet, err := netip.ParsePrefix(e.SubnetCIDR)
	if err != nil {
		return fmt.Errorf("primary link %s: subnet %q: %w", name, e.SubnetCIDR, err)
	}
	addr := netip.PrefixFrom(netip.MustParseAddr(e.PrimaryIP), subnet.Bits())
	if err := n.h.LinkSetMTU(l, MTU); err != nil {
		return fmt.Errorf("mtu of %s: %w", name, err)
	}
	if err := n.h.AddrReplace(l, &netlink.Addr{IPNet: ipNet(addr)}); err != nil {
		return fmt.Errorf("address %s on %s: %w", addr, name, err)
	}
	if err := n.h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	gw := subnet.Masked().Addr().Next()
	if err := n.h.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
		return fmt.Errorf("default via %s dev %s: %w", gw, name, err)
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
}
