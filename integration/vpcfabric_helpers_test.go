package integration

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// The VPC fabric makes the EC2 tests' "vpc" namespace behave as the VPC
// does for the node's ENIs: a router that delivers each address EC2 has
// assigned to an ENI (and each of its prefixes) to that ENI's link, answers
// for the subnets' gateways, and enforces the source/destination check: a
// packet that comes from ENI X with a source that is not one of X's
// addresses is dropped, and counted. A "client" namespace stands for
// anything else in the VPC (another instance, a load balancer in instance
// mode) and reaches the node through the router. MTU 9001 everywhere.
const (
	fabricClientNet = "10.98.32.0/24" // in the VPC (10.98.0.0/16), no ENI of the node's there
	fabricClientIP  = "10.98.32.10"
	fabricMTU       = 9001
)

// vpcFabric is the router (the ec2Node's vpc namespace) and the client.
type vpcFabric struct {
	en       *ec2Node
	rh       *netlink.Handle // in the router
	client   *netNS
	clientIP netip.Addr
	ports    map[string]bool                  // router links set up
	allowed  map[string]map[netip.Prefix]bool // router link -> sources its check lets through
}

// newVPCFabric turns en's vpc namespace into the router, adds the client
// and routes what EC2 has assigned so far. Call sync after EC2 changes.
func newVPCFabric(t *testing.T, en *ec2Node) *vpcFabric {
	t.Helper()
	f := &vpcFabric{en: en, rh: openHandle(t, en.vpc.path()), client: newNetNS(t), clientIP: netip.MustParseAddr(fabricClientIP),
		ports: map[string]bool{}, allowed: map[string]map[netip.Prefix]bool{}}
	t.Cleanup(f.rh.Close)
	// rp_filter off: the only check that drops here is the counted one.
	sysctls(t, en.vpc.path(), "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0")
	f.clientLink(t)
	f.sync(t)
	return f
}

// clientLink wires the client: cl0 (10.98.32.10/24, default via .1) to
// the router's "client" link.
func (f *vpcFabric) clientLink(t *testing.T) {
	t.Helper()
	ch := openHandle(t, f.client.path())
	defer ch.Close()
	clientNS, err := netns.GetFromPath(f.client.path())
	if err != nil {
		t.Fatal(err)
	}
	defer clientNS.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "client", MTU: fabricMTU}, PeerName: "cl0", PeerNamespace: netlink.NsFd(clientNS)}
	if err := f.rh.LinkAdd(veth); err != nil {
		t.Fatalf("router: create the client link: %v", err)
	}
	subnet := netip.MustParsePrefix(fabricClientNet)
	gw := subnet.Addr().Next()
	linkUp(t, f.rh, "client", netip.PrefixFrom(gw, subnet.Bits()))
	linkUp(t, ch, "lo", netip.Prefix{})
	linkUp(t, ch, "cl0", netip.PrefixFrom(f.clientIP, subnet.Bits()))
	if err := ch.LinkSetMTU(linkIn(t, ch, "cl0"), fabricMTU); err != nil {
		t.Fatal(err)
	}
	if err := ch.RouteAdd(&netlink.Route{LinkIndex: linkIn(t, ch, "cl0").Attrs().Index, Gw: gw.AsSlice()}); err != nil {
		t.Fatalf("client: default via %s: %v", gw, err)
	}
}

// sync makes the router follow EC2: each attached ENI with a link on the
// node has its addresses and prefixes routed (and their neighbours pinned
// to the ENI's MAC, as the VPC knows them) to its link, and only them let
// through its source check. Addresses EC2 took away lose all of that.
func (f *vpcFabric) sync(t *testing.T) {
	t.Helper()
	for _, e := range f.en.fake.ENIs() {
		f.en.mu.Lock()
		name, ok := f.en.links[e.MAC]
		f.en.mu.Unlock()
		if !ok {
			continue
		}
		port := name + "p"
		if !f.ports[port] {
			f.setupPort(t, port, e)
		}
		want := map[netip.Prefix]bool{}
		if e.DeviceIndex >= 0 {
			for _, a := range append([]string{e.PrimaryIP}, e.SecondaryIPs...) {
				if a != "" {
					want[netip.PrefixFrom(netip.MustParseAddr(a), 32)] = true
				}
			}
			for _, p := range e.Prefixes {
				want[netip.MustParsePrefix(p)] = true
			}
		}
		mac, _ := net.ParseMAC(e.MAC)
		for p := range want {
			if !f.allowed[port][p] {
				f.route(t, port, p, mac, true)
			}
		}
		for p := range f.allowed[port] {
			if !want[p] {
				f.route(t, port, p, mac, false)
			}
		}
		f.allowed[port] = want
	}
}

// setupPort readies the router's end of an ENI's link: up with MTU 9001
// and the subnet's gateway address (the node resolves the gateway there),
// and the link's source check: a chain in raw PREROUTING that returns for
// the ENI's addresses and drops, counting, everything else.
func (f *vpcFabric) setupPort(t *testing.T, port string, e ec2fake.ENI) {
	t.Helper()
	subnet := netip.MustParsePrefix(e.SubnetCIDR)
	if err := f.rh.LinkSetMTU(linkIn(t, f.rh, port), fabricMTU); err != nil {
		t.Fatalf("router: mtu of %s: %v", port, err)
	}
	linkUp(t, f.rh, port, netip.PrefixFrom(subnet.Addr().Next(), 32))
	sysctls(t, f.en.vpc.path(), "net.ipv4.conf."+port+".rp_filter=0")
	chain := srcCheckChain(port)
	f.iptables(t, "-t", "raw", "-N", chain)
	f.iptables(t, "-t", "raw", "-A", chain, "-j", "DROP")
	f.iptables(t, "-t", "raw", "-A", "PREROUTING", "-i", port, "-j", chain)
	if e.DeviceIndex == 0 {
		// The node's primary link: the instance's own, at the VPC's MTU.
		if err := f.en.h.LinkSetMTU(linkIn(t, f.en.h, strings.TrimSuffix(port, "p")), fabricMTU); err != nil {
			t.Fatal(err)
		}
	}
	f.ports[port] = true
}

func srcCheckChain(port string) string { return "SRC-CHECK-" + port }

// route adds (or removes) what delivers p to an ENI and lets it out again.
func (f *vpcFabric) route(t *testing.T, port string, p netip.Prefix, mac net.HardwareAddr, add bool) {
	t.Helper()
	link := linkIn(t, f.rh, port)
	r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixNet(p), Scope: netlink.SCOPE_LINK}
	verb := "-I"
	if add {
		if err := f.rh.RouteReplace(r); err != nil {
			t.Fatalf("router: route %s dev %s: %v", p, port, err)
		}
	} else {
		verb = "-D"
		if err := f.rh.RouteDel(r); err != nil {
			t.Fatalf("router: delete route %s dev %s: %v", p, port, err)
		}
	}
	for a := p.Addr(); p.Contains(a); a = a.Next() {
		n := &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT, IP: a.AsSlice(), HardwareAddr: mac}
		var err error
		if add {
			err = f.rh.NeighSet(n)
		} else {
			err = f.rh.NeighDel(n)
		}
		if err != nil {
			t.Fatalf("router: neighbour %s dev %s (add %t): %v", a, port, add, err)
		}
	}
	args := []string{"-t", "raw", verb, srcCheckChain(port)}
	if add {
		args = append(args, "1")
	}
	f.iptables(t, append(args, "-s", p.String(), "-j", "RETURN")...)
}

// counters reads a router link's source check: packets let through per
// source, and packets dropped.
func (f *vpcFabric) counters(t *testing.T, port string) (passed map[netip.Prefix]int, dropped int) {
	t.Helper()
	passed = map[netip.Prefix]int{}
	for _, l := range strings.Split(f.iptables(t, "-t", "raw", "-v", "-S", srcCheckChain(port)), "\n") {
		fs := strings.Fields(l)
		var src netip.Prefix
		pkts := -1
		for i := 0; i+1 < len(fs); i++ {
			switch fs[i] {
			case "-s":
				src, _ = netip.ParsePrefix(fs[i+1])
			case "-c":
				pkts, _ = strconv.Atoi(fs[i+1])
			}
		}
		switch {
		case pkts < 0:
		case strings.HasSuffix(l, "-j DROP"):
			dropped = pkts
		case src.IsValid():
			passed[src] = pkts
		}
	}
	return passed, dropped
}

// drops is what the source checks of all ENI links have dropped.
func (f *vpcFabric) drops(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for port := range f.ports {
		_, out[port] = f.counters(t, port)
	}
	return out
}

// passedFrom is how many packets with source a the router let in from port.
func (f *vpcFabric) passedFrom(t *testing.T, port string, a netip.Addr) int {
	t.Helper()
	passed, _ := f.counters(t, port)
	return passed[netip.PrefixFrom(a, 32)]
}

func (f *vpcFabric) iptables(t *testing.T, args ...string) string {
	t.Helper()
	o, err := runIn(t.Context(), f.en.vpc.path(), nil, nil, append([]string{"iptables"}, args...)...)
	if err == nil && o.exit != 0 {
		err = fmt.Errorf("router: iptables %v: %s", args, o)
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(o.stdout)
}

// ---------------------------------------------------------------- TCP

// serveTCP listens on port in the namespace at nsPath and answers each
// connection with one line: "<local address> <remote address>", so the
// caller sees which address the server saw it come from. Closed in
// t.Cleanup or by the function it returns: a closed listener also stops
// the SYN-ACK retransmits of connections whose replies the VPC dropped,
// which would otherwise be counted later.
func serveTCP(t *testing.T, nsPath string, port int) (stop func()) {
	t.Helper()
	var l net.Listener
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp4", ":"+strconv.Itoa(port))
		return err
	})
	if err != nil {
		t.Fatalf("listen on %d in %s: %v", port, nsPath, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s %s\n", c.LocalAddr(), c.RemoteAddr())
			c.Close()
		}
	}()
	return func() { l.Close() }
}

// dialTCP connects from the namespace at nsPath to to and returns the
// server's line. A reply the VPC drops shows as a timeout.
func dialTCP(nsPath string, to netip.AddrPort) (string, error) {
	var line string
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp4", to.String(), 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	return strings.TrimSpace(line), err
}

// ---------------------------------------------------------------- small helpers

func sysctls(t *testing.T, nsPath string, kv ...string) {
	t.Helper()
	o, err := runIn(t.Context(), nsPath, nil, nil, append([]string{"sysctl", "-qw"}, kv...)...)
	if err == nil && o.exit != 0 {
		err = fmt.Errorf("sysctl -w %v: %s", kv, o)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func linkIn(t *testing.T, h *netlink.Handle, name string) netlink.Link {
	t.Helper()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l
}

// linkUp sets the link up with addr on it (none if addr is not valid).
func linkUp(t *testing.T, h *netlink.Handle, name string, addr netip.Prefix) {
	t.Helper()
	l := linkIn(t, h, name)
	if addr.IsValid() {
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(addr)}); err != nil {
			t.Fatalf("add %s to %s: %v", addr, name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatalf("set %s up: %v", name, err)
	}
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
}
