// Package netsetup owns the kernel side of a pod attachment: the veth pair,
// the pod's address, routes and static neighbour, and the node's host route
// and policy rules for the pod's address. Teardown works from recorded names
// alone, because DEL often arrives after the pod's netns is gone.
//
// The shape is the AWS VPC CNI's, so it interoperates with VPC routing: the
// pod has IP/32 and a default route via the link-local 169.254.1.1, which is
// pinned in the pod's neighbour table to the host veth's MAC; the node has a
// /32 route to the pod through the host veth and a `to IP lookup main` rule.
// An IPv6 address is laid out the same way (family.go): IP/128, a default
// via fe80::1 pinned to the host veth's MAC, a /128 host route and its
// rules, with duplicate address detection off on both ends.
package netsetup

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/fault"
)

// GatewayIP is the pod's link-local gateway, pinned in the pod's neighbour
// table to the host veth's MAC (the VPC CNI's layout).
func GatewayIP() netip.Addr { return netip.AddrFrom4([4]byte{169, 254, 1, 1}) }

// Priorities that are part of the contract with the VPC CNI layout; tests
// and operators look for them.
const (
	// RulePriorityToPod is the priority of `to IP lookup main`: traffic to a
	// pod must use the main table even when a `from` rule would send it
	// elsewhere.
	RulePriorityToPod = 512
	// RulePriorityFromPod is the priority of `from IP lookup <ENI table>`
	// for pods whose address lives on a secondary ENI.
	RulePriorityFromPod = 1536
	mainTable           = unix.RT_TABLE_MAIN
)

// ErrNetNS reports a pod network namespace that cannot be opened.
var ErrNetNS = errors.New("cannot open network namespace")

// ErrRouteTaken reports a pod address that the node already routes to
// another interface: another pod's veth, most likely, because the store
// that should have known was lost, edited or shared by two networks with
// overlapping pools. Setup never moves such a route (a replace would cut
// the live pod off without a trace); it fails and touches nothing of it.
var ErrRouteTaken = errors.New("address already routed to another interface")

// ErrIfNameTaken reports a pod interface name that the pod's namespace
// already has and that is not the pod end of this attachment's veth.
var ErrIfNameTaken = errors.New("interface name already in use in the pod")

// Pod describes one attachment to wire.
type Pod struct {
	Netns    string // path of the pod's network namespace
	IfName   string // interface name inside the pod
	HostVeth string // host end of the veth pair
	// IP is the pod's address (IPv4, or IPv6 on a network of IPv6 only);
	// IP6 the IPv6 address of a dual-stack pod.
	IP, IP6 netip.Addr
	// Egress4 is the link-local IPv4 address an IPv6-only pod reaches
	// IPv4 with (egress4.go): wired as an IPv4 pod address is, but never
	// policy-routed to an ENI's table, as the node masquerades it.
	Egress4 netip.Addr
	MTU     int
	// Table is the route table of the secondary ENI that holds IP, or 0
	// when the address is on the primary ENI or comes from a static pool.
	Table int
	// FromDsts limits the `from IP lookup Table` rule to these
	// destinations (the VPC's CIDRs when the node SNATs the rest through
	// the primary ENI); empty means all traffic from IP uses Table.
	FromDsts []netip.Prefix
	// Default says which interface of the pod carries its default route.
	Default DefaultRoute
}

// DefaultRoute says whether an interface gets the pod's default route
// (the netconf key defaultRoute).
type DefaultRoute int

const (
	// DefaultIfFirst: the interface gets it when the pod has no default
	// route yet, so the first interface attached (eth0) carries it and a
	// second network (net1, as Multus adds) does not.
	DefaultIfFirst DefaultRoute = iota
	// DefaultAlways: the interface takes it, replacing another's.
	DefaultAlways
	// DefaultNever: the interface never carries it.
	DefaultNever
)

// Links are the MAC addresses of a wired attachment, for the CNI result,
// and whether its interface carries the pod's default route.
type Links struct {
	HostMAC, PodMAC net.HardwareAddr
	Default         bool
}

// HostVethName derives the host-side interface name from the attachment's
// identity, so DEL can find it even with nothing recorded. The result fits
// the kernel's 15-character limit.
func HostVethName(prefix, containerID, ifName string) string {
	sum := sha1.Sum([]byte(containerID + "/" + ifName))
	n := unix.IFNAMSIZ - 1 - len(prefix)
	return prefix + hex.EncodeToString(sum[:])[:n]
}

// Setup creates and configures the veth pair for p. The pod end is created
// directly inside the pod's namespace: moving a link between namespaces
// costs 10–25 ms of kernel time. On failure nothing it made is left behind.
func Setup(p Pod) (l Links, err error) {
	podNS, err := netns.GetFromPath(p.Netns)
	if err != nil {
		return l, fmt.Errorf("%w %s: %v", ErrNetNS, p.Netns, err)
	}
	defer podNS.Close()
	if err := p.enableForwarding(); err != nil {
		return l, err
	}
	host, err := createVeth(p, podNS)
	if err != nil {
		return l, err
	}
	fault.Point("add:after-veth")
	defer func() {
		if err != nil {
			// Before the veth goes: a default route it took is handed back.
			for _, ip := range p.addrs() {
				_ = unwirePod(Attachment{HostVeth: p.HostVeth, IP: ip, Netns: p.Netns, IfName: p.IfName})
			}
		}
		switch {
		case errors.Is(err, ErrRouteTaken):
			// The address's rules belong to whoever has its route.
			_ = DeleteVeths(p.HostVeth)
		case err != nil:
			_ = Teardown(p.HostVeth, p.addrs()...)
		}
	}()
	l.HostMAC = host.Attrs().HardwareAddr
	if p.hasIPv6() {
		if err = prepareIPv6Host(p.HostVeth); err != nil {
			return l, err
		}
		gw := &netlink.Addr{IPNet: &net.IPNet{IP: GatewayIP6().AsSlice(), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}
		if err = netlink.AddrAdd(host, gw); err != nil {
			return l, fmt.Errorf("add gateway %s to %s: %w", GatewayIP6(), p.HostVeth, err)
		}
	}
	if err = netlink.LinkSetUp(host); err != nil {
		return l, fmt.Errorf("set %s up: %w", p.HostVeth, err)
	}
	if p.hasIPv4() {
		if err = answerForGateway(p.HostVeth); err != nil {
			return l, err
		}
	}
	if l.PodMAC, l.Default, err = configurePod(p, podNS, l.HostMAC); err != nil {
		return l, err
	}
	awaitCarrier(p.HostVeth)
	fault.Point("add:after-pod-config")
	if err = configureHost(p, host); err != nil {
		return l, err
	}
	if err = seedNeighbours(p, host, l.PodMAC); err != nil {
		return l, err
	}
	return l, nil
}

// awaitCarrier waits until the host veth can send. The pod end coming up
// turns the host end's carrier on, but the host end gets its queue only
// from the kernel's link-watch work, run later under the RTNL lock, and
// until then drops every packet it sends (noop qdisc): under load that
// work ran after the first packet for the pod, which was lost (measured:
// the first ping after Setup lost 1 time in 200, the drop counted on the
// host veth, operstate still down when Setup returned). Asking for the
// link runs its pending link-watch work at once (rtnl_getlink syncs the
// carrier state); the operstate says it ran, and a kernel that does not
// sync is polled briefly. A link still down after that is left as it was
// before: no ADD fails for it.
func awaitCarrier(name string) {
	deadline := time.Now().Add(carrierWait)
	for {
		l, err := netlinksafe.LinkByName(name)
		if err != nil || l.Attrs().OperState == netlink.OperUp || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// carrierWait bounds awaitCarrier's polling on kernels whose link query
// does not run the link-watch work itself.
const carrierWait = 200 * time.Millisecond

func createVeth(p Pod, podNS netns.NsHandle) (netlink.Link, error) {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: p.HostVeth, MTU: p.MTU, TxQLen: -1},
		PeerName:      p.IfName,
		PeerNamespace: netlink.NsFd(podNS),
		PeerMTU:       uint32(p.MTU),
		PeerTxQLen:    -1,
	}
	err := netlink.LinkAdd(veth)
	if errors.Is(err, unix.EEXIST) {
		// A host veth of ours with this name is a leftover of an ADD
		// that crashed or of a DEL that never came: ours to replace.
		old, lerr := netlinksafe.LinkByName(p.HostVeth)
		if lerr == nil {
			if derr := netlink.LinkDel(old); derr != nil {
				return nil, fmt.Errorf("delete stale %s: %w", p.HostVeth, derr)
			}
			err = netlink.LinkAdd(veth)
		}
		if errors.Is(err, unix.EEXIST) {
			// Not the host end: the pod already has an interface of that
			// name (another plugin's, or a second ADD with its ifname).
			return nil, fmt.Errorf("create veth %s: %w: %s exists in %s", p.HostVeth, ErrIfNameTaken, p.IfName, p.Netns)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create veth %s (pod end %s in %s): %w", p.HostVeth, p.IfName, p.Netns, err)
	}
	host, err := netlinksafe.LinkByName(p.HostVeth)
	if err != nil {
		_ = netlink.LinkDel(veth)
		return nil, fmt.Errorf("find new veth %s: %w", p.HostVeth, err)
	}
	return host, nil
}

// configurePod gives the pod end its address, its gateway's route and
// permanent neighbour entry, and the routes through it. Several interfaces
// of one pod each have their own gateway route on their own device (IPv4
// routes are not told apart by device: a second `169.254.1.1 dev net1` in
// main is EEXIST). The interface that carries the default route has them
// in main, as the VPC CNI lays them out; every other one has them in a
// table of its own that a rule selects for traffic from its address, so
// replies leave by the interface the request came in on.
func configurePod(p Pod, podNS netns.NsHandle, hostMAC net.HardwareAddr) (mac net.HardwareAddr, carries bool, err error) {
	h, link, err := podLink(p, podNS)
	if err != nil {
		return nil, false, err
	}
	defer h.Close()
	idx := link.Attrs().Index
	for _, ip := range p.addrs() {
		addr := &netlink.Addr{IPNet: hostNet(ip)}
		if ip.Is6() {
			// No duplicate address detection: the pool hands each
			// address to one pod, and detection would hold the address
			// tentative (unusable) for a second or more.
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(link, addr); err != nil {
			return nil, false, fmt.Errorf("add %s to %s in %s: %w", ip, p.IfName, p.Netns, err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return nil, false, fmt.Errorf("set %s up in %s: %w", p.IfName, p.Netns, err)
	}
	if carries, err = carriesDefault(h, p); err != nil {
		return nil, false, err
	}
	for _, ip := range p.addrs() {
		if err := addPodRoutes(h, p, ip, idx, carries); err != nil {
			return nil, false, err
		}
		gw := gatewayOf(ip)
		neigh := &netlink.Neigh{
			LinkIndex: idx, Family: familyOf(ip), State: netlink.NUD_PERMANENT,
			IP: gw.AsSlice(), HardwareAddr: hostMAC,
		}
		if err := h.NeighSet(neigh); err != nil {
			return nil, false, fmt.Errorf("add neighbour %s in %s: %w", gw, p.Netns, err)
		}
	}
	awaitLocal(h, p)
	return link.Attrs().HardwareAddr, carries, nil
}

// PodRulePriority is the priority of the rule in the pod that sends
// traffic from an interface's address, other than the default route's, to
// that interface's table.
const PodRulePriority = 1000

// podTable is the pod-side table of an interface that does not carry the
// default route: derived from its index so that CHECK finds it again.
func podTable(linkIndex int) int { return 1000 + linkIndex }

// carriesDefault decides whether p's interface gets the default route:
// for all its families, as the default of its first address's family
// decides (a pod's first interface has none of either).
func carriesDefault(h netlinksafe.Handle, p Pod) (bool, error) {
	switch p.Default {
	case DefaultAlways:
		return true, nil
	case DefaultNever:
		return false, nil
	}
	routes, err := h.RouteListFiltered(familyOf(p.IP), &netlink.Route{Table: mainTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return false, fmt.Errorf("list routes in %s: %w", p.Netns, err)
	}
	for _, r := range routes {
		if isDefaultRoute(r) {
			return false, nil
		}
	}
	return true, nil
}

func isDefaultRoute(r netlink.Route) bool {
	return r.Dst == nil || (r.Dst.IP.IsUnspecified() && r.Dst.Mask != nil && maskOnes(r.Dst.Mask) == 0)
}

// isGateway reports whether a route's gateway is gw.
func isGateway(r netlink.Route, gw netip.Addr) bool {
	if r.Gw == nil {
		return false
	}
	a, ok := addrOf(r.Gw)
	return ok && a == gw
}

func maskOnes(m net.IPMask) int { ones, _ := m.Size(); return ones }

// addPodRoutes adds, for ip's family, the gateway's link route and the
// default via it: in main for the interface that carries the default route
// (replacing another's only when told to, after moving that one to its
// own table), else in the interface's own table with the rule `from IP
// lookup table`.
func addPodRoutes(h netlinksafe.Handle, p Pod, ip netip.Addr, idx int, carries bool) error {
	gw := gatewayOf(ip)
	if !carries {
		table := podTable(idx)
		if err := routeViaGateway(h, idx, table, p.Default == DefaultAlways, gw); err != nil {
			return fmt.Errorf("add routes of %s in %s: %w", p.IfName, p.Netns, err)
		}
		if err := addSourceRule(h, ip, table); err != nil {
			return fmt.Errorf("add rule from %s lookup %d in %s: %w", ip, table, p.Netns, err)
		}
		return nil
	}
	if p.Default == DefaultAlways {
		if err := moveDefaultAside(h, p, idx, gw); err != nil {
			return err
		}
	}
	if err := routeViaGateway(h, idx, mainTable, p.Default == DefaultAlways, gw); err != nil {
		return fmt.Errorf("add routes of %s in %s: %w", p.IfName, p.Netns, err)
	}
	return nil
}

// podLink opens a netlink handle inside the pod's namespace (no thread
// switching needed for the calls made through it) and finds the pod end.
// The caller closes the handle.
func podLink(p Pod, podNS netns.NsHandle) (netlinksafe.Handle, netlink.Link, error) {
	h, err := netlinksafe.NewHandleAt(podNS)
	if err != nil {
		return h, nil, fmt.Errorf("netlink handle in %s: %w", p.Netns, err)
	}
	link, err := h.LinkByName(p.IfName)
	if err != nil {
		h.Close()
		return h, nil, fmt.Errorf("find %s in %s: %w", p.IfName, p.Netns, err)
	}
	return h, link, nil
}

// configureHost adds the node's routes to the pod and their policy rules.
func configureHost(p Pod, host netlink.Link) error {
	for _, ip := range p.addrs() {
		if err := configureHostAddr(p, ip, host); err != nil {
			return err
		}
	}
	return nil
}

func configureHostAddr(p Pod, ip netip.Addr, host netlink.Link) error {
	route := &netlink.Route{LinkIndex: host.Attrs().Index, Dst: hostNet(ip), Scope: netlink.SCOPE_LINK}
	if err := netlink.RouteAdd(route); err != nil {
		if !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add host route %s dev %s: %w", ip, p.HostVeth, err)
		}
		if err := routedElsewhere(p, ip, host.Attrs().Index); err != nil {
			return err
		}
	}
	fault.Point("add:after-host-route")
	if err := addRule(toPodRule(ip)); err != nil {
		return fmt.Errorf("add rule to %s lookup main: %w", ip, err)
	}
	if p.Table == 0 || ip != p.IP {
		// Table is IP's ENI's: a dual-stack pod's IPv6 address is of the
		// primary ENI's /80, routed by the main table.
		return nil
	}
	dsts := p.FromDsts
	if len(dsts) == 0 {
		dsts = []netip.Prefix{{}}
	}
	if ip == p.Egress4 {
		return nil // masqueraded: it leaves by the node's own route
	}
	for _, d := range dsts {
		if d.IsValid() && d.Addr().Is4() != ip.Is4() {
			continue // a destination of the other family
		}
		if err := addRule(fromPodRule(ip, p.Table, d)); err != nil {
			return fmt.Errorf("add rule from %s to %s lookup %d: %w", ip, d, p.Table, err)
		}
	}
	return nil
}

// routedElsewhere explains an EEXIST from adding the pod's /32 (or /128):
// nil if the route is already through the pod's own veth, else
// ErrRouteTaken naming the interface that has it.
func routedElsewhere(p Pod, ip netip.Addr, ownIndex int) error {
	filter := &netlink.Route{Dst: hostNet(ip), Table: mainTable}
	routes, err := netlinksafe.RouteListFiltered(familyOf(ip), filter, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("add host route %s dev %s: exists, and listing it failed: %w", ip, p.HostVeth, err)
	}
	for _, r := range routes {
		if r.LinkIndex == ownIndex {
			return nil
		}
	}
	other := "another route"
	for _, r := range routes {
		other = fmt.Sprintf("ifindex %d", r.LinkIndex)
		if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
			other = fmt.Sprintf("%s (%s)", l.Attrs().Name, l.Type())
		}
		break
	}
	return fmt.Errorf("add host route %s dev %s: %w: %s routes it; refusing to take the address from it (state file lost or edited, or two networks with overlapping pools? `eni-cni list`, `eni-cni repair`)",
		ip, p.HostVeth, ErrRouteTaken, other)
}

func toPodRule(ip netip.Addr) *netlink.Rule {
	r := netlink.NewRule()
	r.Dst = hostNet(ip)
	r.Table = mainTable
	r.Priority = RulePriorityToPod
	r.Family = familyOf(ip)
	return r
}

// fromPodRule is `from ip [to dst] lookup table`; dst is optional.
func fromPodRule(ip netip.Addr, table int, dst netip.Prefix) *netlink.Rule {
	r := netlink.NewRule()
	r.Src = hostNet(ip)
	if dst.IsValid() {
		r.Dst = &net.IPNet{IP: dst.Masked().Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())}
	}
	r.Table = table
	r.Priority = RulePriorityFromPod
	r.Family = familyOf(ip)
	return r
}

func addRule(r *netlink.Rule) error {
	if err := netlink.RuleAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return nil
}

func isOurRule(r *netlink.Rule, ip netip.Addr) bool {
	want := hostNet(ip).String()
	switch r.Priority {
	case RulePriorityToPod:
		return r.Dst != nil && r.Dst.String() == want
	case RulePriorityFromPod:
		return r.Src != nil && r.Src.String() == want
	}
	return false
}

func isNotFound(err error) bool {
	var lnf netlink.LinkNotFoundError
	return errors.As(err, &lnf) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ESRCH)
}

func hostNet(ip netip.Addr) *net.IPNet {
	return &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())}
}

// answerForGateway makes the host veth answer the pod's ARP requests for
// its gateway (proxy ARP, at once rather than after a random delay of up
// to 0.8 s). The pod's permanent neighbour entry for 169.254.1.1 spares it
// the request, but a later plugin of the chain that changes the pod's MAC
// (tuning's mac) or flushes its neighbours removes that entry, and then
// only an answer keeps the pod on the network. The kernel answers for an
// address it routes out of another interface: on a node, the default
// route or the ENI table's.
func answerForGateway(hostVeth string) error {
	for _, set := range []struct{ path, value string }{
		{"/proc/sys/net/ipv4/conf/" + hostVeth + "/proxy_arp", "1"},
		{"/proc/sys/net/ipv4/neigh/" + hostVeth + "/proxy_delay", "0"},
	} {
		if err := os.WriteFile(set.path, []byte(set.value), 0o644); err != nil {
			return fmt.Errorf("answer ARP for %s on %s: %w", GatewayIP(), hostVeth, err)
		}
	}
	return nil
}

// enableForwarding turns on forwarding of the pod's families.
func (p Pod) enableForwarding() error {
	if p.hasIPv4() {
		if err := enableForwarding(); err != nil {
			return err
		}
	}
	if p.hasIPv6() {
		return enableForwarding6()
	}
	return nil
}

// enableForwarding turns on IPv4 forwarding in the node's namespace, without
// which pods cannot reach each other or anything else. Reading first keeps
// the common case free of a write.
func enableForwarding() error {
	const path = "/proc/sys/net/ipv4/ip_forward"
	b, err := os.ReadFile(path)
	if err == nil && len(b) > 0 && b[0] == '1' {
		return nil
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable ip forwarding: %w", err)
	}
	return nil
}
