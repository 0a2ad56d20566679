package netsetup

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// GatewayIP6 is the pod's IPv6 gateway: a link-local address the host veth
// owns, with the default route via it and a permanent neighbour entry
// pinning it to the host veth's MAC, as 169.254.1.1 for IPv4. ptp gives
// the host end the gateway address from IPAM instead; the VPC CNI points
// the pod at the host veth's own link-local address, which exists only
// once the kernel has generated it, after the link is up (and is not
// derived from the MAC under addr_gen_mode stable_privacy). A fixed one
// is the same in every pod, costs no pool address and no wait, and CHECK
// knows what to look for. The host veth owns it (added without duplicate
// address detection: link-local addresses are per link), so the kernel
// answers the pod's neighbour solicitations itself, with no proxy NDP.
func GatewayIP6() netip.Addr { return netip.MustParseAddr("fe80::1") }

// gatewayOf is the pod's gateway for addresses of ip's family.
func gatewayOf(ip netip.Addr) netip.Addr {
	if ip.Is4() {
		return GatewayIP()
	}
	return GatewayIP6()
}

// familyOf is the netlink family of ip.
func familyOf(ip netip.Addr) int {
	if ip.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// addrOf reads a netlink address as a netip.Addr of its own family (an
// IPv4 address may come as 16 bytes).
func addrOf(ip net.IP) (netip.Addr, bool) {
	if v4 := ip.To4(); v4 != nil {
		return netip.AddrFromSlice(v4)
	}
	return netip.AddrFromSlice(ip)
}

// isHostNet reports whether n is a single address of its family (/32 or
// /128) and which.
func isHostNet(n *net.IPNet) (netip.Addr, bool) {
	if n == nil {
		return netip.Addr{}, false
	}
	ip, ok := addrOf(n.IP)
	if !ok {
		return netip.Addr{}, false
	}
	ones, bits := n.Mask.Size()
	if ones != ip.BitLen() || (bits != 32 && bits != 128) {
		return netip.Addr{}, false
	}
	return ip, true
}

// addrs are the addresses the pod's interface gets: IP, then IP6 of a
// dual-stack one, then the egress address of an IPv6-only one.
func (p Pod) addrs() []netip.Addr {
	out := []netip.Addr{p.IP}
	if p.IP6.IsValid() {
		out = append(out, p.IP6)
	}
	if p.Egress4.IsValid() {
		out = append(out, p.Egress4)
	}
	return out
}

func (p Pod) hasIPv6() bool { return p.IP6.IsValid() || p.IP.Is6() }

func (p Pod) hasIPv4() bool { return p.IP.Is4() || p.Egress4.IsValid() }

// prepareIPv6Host turns duplicate address detection off on the host veth
// (before it is up, so its own link-local address skips it too) and gives
// it the pod's gateway, fe80::1. A node with IPv6 disabled has no
// /proc/sys/net/ipv6/conf/<veth>: that is said, not hidden.
func prepareIPv6Host(hostVeth string) error {
	path := "/proc/sys/net/ipv6/conf/" + hostVeth + "/accept_dad"
	if err := os.WriteFile(path, []byte("0"), 0o644); err != nil {
		return fmt.Errorf("turn off duplicate address detection on %s (is IPv6 disabled on the node?): %w", hostVeth, err)
	}
	return nil
}

// awaitLocal waits until the pod accepts packets for its IPv6 addresses.
// An address added without duplicate address detection is usable at once
// as a source, but its local route, without which the pod does not take
// packets for it in, is added by the kernel's address work queue: under
// load the first packet for the pod arrived before it and was dropped
// (measured: with the host veth able to send, 33 first pings in 300 lost,
// the local route missing each time). The wait is bounded: a pod whose
// route is still missing after it is left as it was before, ADD does not
// fail for it.
func awaitLocal(h netlinksafe.Handle, p Pod) {
	deadline := time.Now().Add(localWait)
	filter := &netlink.Route{Table: unix.RT_TABLE_LOCAL}
	for _, ip := range p.addrs() {
		for ip.Is6() && time.Now().Before(deadline) {
			routes, err := retryDump(func() ([]netlink.Route, error) {
				return h.RouteListFiltered(unix.AF_INET6, filter, netlink.RT_FILTER_TABLE)
			})
			if err != nil || hasHostRoute(routes, ip) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// localWait bounds awaitLocal: the work queue runs within milliseconds
// even on a loaded node.
const localWait = time.Second

func hasHostRoute(routes []netlink.Route, ip netip.Addr) bool {
	for _, r := range routes {
		if a, ok := isHostNet(r.Dst); ok && a == ip {
			return true
		}
	}
	return false
}

// enableForwarding6 turns on IPv6 forwarding in the node's namespace.
// Forwarding makes the kernel ignore router advertisements on interfaces
// with accept_ra 1, and a node whose IPv6 default route comes from them
// (an EC2 instance) would lose it when it expires: those interfaces get
// accept_ra 2 (accept them while forwarding) first, as the VPC CNI does
// for its primary ENI. Reading first keeps the common case free of writes.
func enableForwarding6() error {
	const path = "/proc/sys/net/ipv6/conf/all/forwarding"
	b, err := os.ReadFile(path)
	if err == nil && len(b) > 0 && b[0] == '1' {
		return nil
	}
	confs, _ := filepath.Glob("/proc/sys/net/ipv6/conf/*/accept_ra")
	for _, c := range confs {
		name := filepath.Base(filepath.Dir(c))
		if name == "all" || name == "default" || name == "lo" {
			continue
		}
		if v, err := os.ReadFile(c); err == nil && strings.TrimSpace(string(v)) == "1" {
			if err := os.WriteFile(c, []byte("2"), 0o644); err != nil {
				return fmt.Errorf("keep accepting router advertisements on %s while forwarding: %w", name, err)
			}
		}
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable ipv6 forwarding: %w", err)
	}
	return nil
}

// seedNeighbours gives the node a neighbour entry for the pod's IPv6
// address, in state STALE: used at once, then confirmed by the kernel. A
// new pod joins the solicited-node group of its address asynchronously
// (the kernel's address work queue), and the node's first solicitation,
// sent when the first packet for the pod arrives right after ADD, went
// unanswered: that packet waited a second for the retransmission
// (measured here: the first ping after ADD lost, every later one fine).
// Not PERMANENT: a later plugin of the chain may change the pod's MAC
// (tuning), and a stale entry is probed and corrected, a permanent one
// never.
//
// The egress address gets one too: the first reply to an egress flow,
// de-masqueraded on its way in, waited a second for the node's ARP
// retransmission (measured in TestEgress4: the first ping after ADD lost
// one time in three).
func seedNeighbours(p Pod, host netlink.Link, podMAC net.HardwareAddr) error {
	for _, ip := range p.addrs() {
		if !ip.Is6() && ip != p.Egress4 {
			continue
		}
		n := &netlink.Neigh{LinkIndex: host.Attrs().Index, Family: familyOf(ip), State: netlink.NUD_STALE, IP: ip.AsSlice(), HardwareAddr: podMAC}
		if err := netlink.NeighSet(n); err != nil {
			return fmt.Errorf("add neighbour %s on %s: %w", ip, p.HostVeth, err)
		}
	}
	return nil
}

// NodeHasIPv4Route reports whether the node's namespace has an IPv4
// default route: a way out for an IPv6-only pod's egress, and with it an
// address to masquerade to (the route's interface's). An IPv4 address
// alone, with nowhere to send the pods' packets, is not enough.
func NodeHasIPv4Route() (bool, error) {
	filter := &netlink.Route{Table: unix.RT_TABLE_MAIN}
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(unix.AF_INET, filter, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return false, fmt.Errorf("list the node's IPv4 routes: %w", err)
	}
	for _, r := range routes {
		if isDefaultRoute(r) {
			return true, nil
		}
	}
	return false, nil
}
