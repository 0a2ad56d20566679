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
}

// ErrNoLink reports an ENI whose link has not (yet) appeared on the node.
var ErrNoLink = errors.New("no link with the ENI's MAC")

// EnsureENI makes the ENI's link usable for pods: up with the MTU, loose
// reverse-path filtering (replies to pods on this ENI arrive on it while
// the main table routes elsewhere), and its table holding the subnet route
// and the default route via the subnet's router. It checks before it
// changes anything, so ADD can call it every time at the cost of a lookup.
func EnsureENI(e ENILink) error {
	link, err := linkByMAC(e.MAC)
	if err != nil {
		return err
	}
	if eniReady(link, e) {
		return nil
	}
	name := link.Attrs().Name
	if e.MTU > 0 && link.Attrs().MTU != e.MTU {
		if err := netlink.LinkSetMTU(link, e.MTU); err != nil {
			return fmt.Errorf("set mtu %d on %s: %w", e.MTU, name, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+name+"/rp_filter", []byte("2"), 0o644); err != nil {
		return fmt.Errorf("loose rp_filter on %s: %w", name, err)
	}
	idx := link.Attrs().Index
	subnet := &net.IPNet{IP: e.SubnetCIDR.Masked().Addr().AsSlice(), Mask: net.CIDRMask(e.SubnetCIDR.Bits(), 32)}
	routes := []*netlink.Route{
		{LinkIndex: idx, Dst: subnet, Scope: netlink.SCOPE_LINK, Table: e.Table},
		{LinkIndex: idx, Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Gw: e.Gateway.AsSlice(), Table: e.Table},
	}
	for _, r := range routes {
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("add route %s to table %d: %w", r, e.Table, err)
		}
	}
	return nil
}

// WaitENI waits for the ENI's link to appear (after an attach the kernel
// takes a moment) and then ensures it.
func WaitENI(ctx context.Context, e ENILink) error {
	tick := time.NewTicker(100 * time.Millisecond)
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

func eniReady(link netlink.Link, e ENILink) bool {
	if link.Attrs().Flags&net.FlagUp == 0 || (e.MTU > 0 && link.Attrs().MTU != e.MTU) {
		return false
	}
	filter := &netlink.Route{Table: e.Table, LinkIndex: link.Attrs().Index}
	routes, err := netlinksafe.RouteListFiltered(unix.AF_INET, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF)
	if err != nil {
		return false
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
			return r.Gw.Equal(e.Gateway.AsSlice())
		}
	}
	return false
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
