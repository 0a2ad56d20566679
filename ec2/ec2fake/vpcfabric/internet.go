package vpcfabric

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The internet behind the router: one link, igw in the router and wan0 in
// the internet namespace, at the internet's MTU. Its addresses are
// documentation ones (RFC 5737) and live only in the namespaces.
const (
	InternetMTU = 1500
	// InternetHost is an address on the internet a node or pod can reach
	// (through SNAT): the internet namespace holds it.
	InternetHost = "198.51.100.10"

	igwLink       = "igw"
	wanLink       = "wan0"
	igwNet        = "192.0.2.0/24"
	igwRouter     = "192.0.2.1"
	igwInternet   = "192.0.2.2"
	internetChain = "IGW-MAPPED"
)

// newInternet wires the internet namespace to the router: the router's
// default route goes there, the internet routes everything back, and the
// router's FORWARD lets only mapped sources out through igw (a counted
// DROP for the rest).
func newInternet(f *Fabric, nsPath string) error {
	ins, err := netns.GetFromPath(nsPath)
	if err != nil {
		return fmt.Errorf("open internet netns %s: %w", nsPath, err)
	}
	defer ins.Close()
	ih, err := netlink.NewHandleAt(ins)
	if err != nil {
		return fmt.Errorf("netlink in internet netns %s: %w", nsPath, err)
	}
	defer ih.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: igwLink, MTU: InternetMTU}, PeerName: wanLink, PeerMTU: InternetMTU, PeerNamespace: netlink.NsFd(ins)}
	if err := f.rh.LinkAdd(veth); err != nil {
		return fmt.Errorf("internet gateway link: %w", err)
	}
	bits := netip.MustParsePrefix(igwNet).Bits()
	if err := up(f.rh, igwLink, netip.PrefixFrom(netip.MustParseAddr(igwRouter), bits)); err != nil {
		return err
	}
	if err := up(ih, wanLink, netip.PrefixFrom(netip.MustParseAddr(igwInternet), bits)); err != nil {
		return err
	}
	if err := up(ih, "lo", netip.PrefixFrom(netip.MustParseAddr(InternetHost), 32)); err != nil {
		return err
	}
	if err := defaultVia(f.rh, igwLink, igwInternet); err != nil {
		return err
	}
	if err := defaultVia(ih, wanLink, igwRouter); err != nil {
		return err
	}
	c := internetChain
	if err := restore(f.cfg.Router, "filter", []string{":" + c + " - [0:0]", "-A " + c + " -j DROP", "-A FORWARD -o " + igwLink + " -j " + c}); err != nil {
		return fmt.Errorf("internet gateway check: %w", err)
	}
	return nil
}

// mapPublicLocked lets a out to the internet.
func (f *Fabric) mapPublicLocked(a netip.Addr) error {
	if !f.internet || slices.Contains(f.public, a) {
		return nil
	}
	if err := restore(f.cfg.Router, "filter", []string{"-I " + internetChain + " 1 -s " + a.String() + "/32 -j RETURN"}); err != nil {
		return fmt.Errorf("public mapping of %s: %w", a, err)
	}
	f.public = append(f.public, a)
	return nil
}

func up(h *netlink.Handle, name string, addr netip.Prefix) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if addr.IsValid() {
		if err := h.AddrReplace(l, &netlink.Addr{IPNet: ipNet(addr)}); err != nil {
			return fmt.Errorf("address %s on %s: %w", addr, name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}

func defaultVia(h *netlink.Handle, name, gw string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if err := h.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: netip.MustParseAddr(gw).AsSlice()}); err != nil {
		return fmt.Errorf("default via %s dev %s: %w", gw, name, err)
	}
	return nil
}
