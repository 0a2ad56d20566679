// Package plugin is eni-cni's CNI plugin: the verbs ADD, DEL, CHECK,
// STATUS and GC over a store (alloc) and the node's wiring (netsetup), the
// Provider that says where a network's addresses come from (static ranges
// here, the node's ENIs in ec2/provider), the gc and repair work the
// subcommands drive, node metrics, and the list and status reports. It
// links neither grpc nor the AWS SDK: the lean build carries it into every
// pod's ADD, and benchmarks and tests import it.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/fault"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
	"github.com/eni-cni/eni-cni/netsetup/snat"
)

// Wirer is the kernel side of an attachment: netsetup in production (Kernel),
// a fake in tests of the verb logic, a timing wrapper in the benchmark.
type Wirer interface {
	Setup(netsetup.Pod) (netsetup.Links, error)
	Check(netsetup.Pod) (netsetup.Links, error)
	// Unroute removes the host routes and rules of attachments: after it,
	// their addresses reach the old veths no more.
	Unroute([]netsetup.Attachment) error
	// DeleteVeths deletes host veths (slow: the kernel waits for RCU).
	DeleteVeths(names ...string) error
	// PodRoutes lists the /32 routes through the node's veths named like
	// ours (prefix): the wiring of pods, whatever the store says.
	PodRoutes(prefix string) ([]netsetup.PodRoute, error)
}

// egressWirer is a Wirer that can give IPv6-only pods IPv4 egress
// (Kernel): a link-local address masqueraded by the node. A Wirer without
// it gives them none.
type egressWirer interface {
	// NodeHasIPv4Route reports whether the node has an IPv4 default
	// route, a way out to masquerade to (ipv4Egress absent: egress only
	// then).
	NodeHasIPv4Route() (bool, error)
	// EnsureEgress4 installs the masquerade: once per boot (ADD), or
	// whatever the record says (repair).
	EnsureEgress4(stateDir, bootID string, once bool) error
	// CheckEgress4 fails when the masquerade is not in place.
	CheckEgress4() error
}

// teardown removes an attachment's wiring: routes and rules of each of its
// addresses, then the veth.
func teardown(w Wirer, hostVeth string, ips ...netip.Addr) error {
	return errors.Join(w.Unroute(unrouteOf(hostVeth, "", "", ips)), w.DeleteVeths(hostVeth))
}

// unrouteOf is what Unroute takes for a pod's addresses: one attachment
// per address.
func unrouteOf(hostVeth, netns, ifName string, ips []netip.Addr) []netsetup.Attachment {
	out := make([]netsetup.Attachment, len(ips))
	for i, ip := range ips {
		out[i] = netsetup.Attachment{HostVeth: hostVeth, IP: ip, Netns: netns, IfName: ifName}
	}
	return out
}

// Kernel is the real Wirer.
type Kernel struct{}

func (Kernel) Setup(p netsetup.Pod) (netsetup.Links, error) { return netsetup.Setup(p) }
func (Kernel) Check(p netsetup.Pod) (netsetup.Links, error) { return netsetup.Check(p) }
func (Kernel) DeleteVeths(names ...string) error            { return netsetup.DeleteVeths(names...) }
func (Kernel) NodeHasIPv4Route() (bool, error)              { return netsetup.NodeHasIPv4Route() }
func (Kernel) EnsureEgress4(stateDir, bootID string, once bool) error {
	if once {
		return snat.EnsureEgress4Once(stateDir, bootID, alloc.Egress4Range())
	}
	_, err := snat.EnsureEgress4(stateDir, alloc.Egress4Range())
	return err
}

// Unroute is netsetup.Unroute, and then the conntrack entries of the
// egress addresses unrouted are forgotten: their masqueraded flows'
// replies would otherwise reach the next pod given the address.
func (Kernel) Unroute(a []netsetup.Attachment) error {
	if err := netsetup.Unroute(a); err != nil {
		return err
	}
	var egress []netip.Addr
	for _, at := range a {
		if alloc.Egress4Range().Contains(at.IP) {
			egress = append(egress, at.IP)
		}
	}
	if len(egress) == 0 {
		return nil
	}
	return netsetup.ForgetFlows(egress...)
}

func (Kernel) CheckEgress4() error {
	missing, err := snat.CheckEgress4(alloc.Egress4Range())
	if err != nil {
		return fmt.Errorf("look at the egress masquerade: %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s (`eni-cni repair` restores it)", netsetup.ErrHostMismatch, strings.Join(missing, "; "))
	}
	return nil
}

func (Kernel) PodRoutes(prefix string) ([]netsetup.PodRoute, error) {
	veths, err := netsetup.OurVeths(prefix)
	if err != nil {
		return nil, err
	}
	return netsetup.OurRoutes(veths)
}

// attachment is what a CNI call says about the sandbox being attached.
type attachment struct {
	alloc.Key
	Netns                         string
	PodNamespace, PodName, PodUID string
}

var (
	// errNoAllocation: CHECK of an attachment the store does not know.
	errNoAllocation = errors.New("no allocation recorded")
	// errPrevResult: CHECK with a prevResult that is not ours.
	errPrevResult = errors.New("prevResult does not match the allocation")
)

// Plugin carries the dependencies of the verbs.
type Plugin struct {
	Cfg      *netconf.Config
	Mgr      *alloc.Manager
	wire     Wirer
	provider Provider
	// addAttrs are what the last ADD's allocation adds to its log line
	// (how long it waited on a dry pool, how warm was started).
	addAttrs []any
	log      *slog.Logger // nil: slog.Default()
}

// newPluginWith wires the verbs' dependencies together; the store refuses
// to start from nothing on a node that has pods (stateLost).
func newPluginWith(cfg *netconf.Config, mgr *alloc.Manager, w Wirer, prov Provider) *Plugin {
	p := &Plugin{Cfg: cfg, Mgr: mgr, wire: w, provider: prov}
	mgr.Network, mgr.OnMissing = cfg.Network, p.stateLost
	return p
}

func (p *Plugin) logger() *slog.Logger {
	if p.log != nil {
		return p.log
	}
	return slog.Default()
}

// stateLost tells a brand-new node (no state file, no pods of ours) from
// one whose state file was lost or whose stateDir changed (no state file,
// but veths of ours routing addresses of this network's pool). On the
// second, starting from an empty state would hand the live pods'
// addresses to new pods, so every verb but DEL refuses until `eni-cni
// repair` has rebuilt the state from the node and the CRI runtime. ADD
// cannot do that repair itself: the host veth's name is a hash of the
// sandbox ID, and only the runtime's listing maps it back to a sandbox.
//
// It is asked too when the file exists but does not record this network
// (several networks sharing a stateDir: another one wrote a fresh file
// after the loss). Then wiring the file explains (an allocation of that
// address through that veth, another network's pod) does not count.
//
// For a static pool, "this network's" means routed to an address of its
// ranges, so another network's pods (own stateDir, same veth prefix) do not
// count. An ec2 pool is only known from the lost state, so every routed
// veth of ours counts.
func (p *Plugin) stateLost(st *alloc.State) error {
	what := p.statePath() + " is missing"
	if !st.Missing() {
		what = fmt.Sprintf("%s does not record network %q (another network sharing the stateDir wrote it)", p.statePath(), p.Cfg.Network)
	}
	routes, err := p.wire.PodRoutes(p.Cfg.VethPrefix)
	if err != nil {
		return fmt.Errorf("%w: %s and the node's pod routes cannot be listed to tell a new network from a lost state: %w",
			alloc.ErrStateLost, what, err)
	}
	explained := make(map[netip.Addr]string, len(st.Allocations))
	for _, a := range st.Allocations {
		for _, ip := range a.Wired() {
			explained[ip] = a.HostVeth
		}
	}
	var ours []string
	for _, r := range routes {
		if p.Cfg.Provider == netconf.Static && !p.Cfg.Pool.Contains(nil, r.IP) {
			continue
		}
		if veth, ok := explained[r.IP]; ok && (veth == r.Veth || veth == "") {
			continue
		}
		ours = append(ours, r.IP.String()+" dev "+r.Veth)
	}
	if len(ours) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s, but the node routes %d addresses of network %q through eni-cni veths (%s): "+
		"the state was lost or stateDir changed, and handing addresses out now could give a live pod's address to another; "+
		"run `eni-cni repair` to rebuild the state from the node and the CRI runtime",
		alloc.ErrStateLost, what, len(ours), p.Cfg.Network, abbreviate(ours, 3))
}

func (p *Plugin) statePath() string { return filepath.Join(p.Cfg.StateDir, alloc.StateFileName) }

// abbreviate joins the first n items and says how many more there are.
func abbreviate(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

func (p *Plugin) podSpec(a alloc.Allocation, netns string, r netsetup.Routing) netsetup.Pod {
	return netsetup.Pod{
		Netns: netns, IfName: a.IfName, HostVeth: a.HostVeth, IP: a.IP, IP6: a.IP6, Egress4: a.Egress4,
		MTU: p.Cfg.MTU, Table: r.Table, FromDsts: r.FromDsts, Default: defaultRoute(p.Cfg.DefaultRoute),
	}
}

func defaultRoute(b *bool) netsetup.DefaultRoute {
	switch {
	case b == nil:
		return netsetup.DefaultIfFirst
	case *b:
		return netsetup.DefaultAlways
	}
	return netsetup.DefaultNever
}

// waitingProvider is a provider whose ADD may wait for addresses (ec2):
// it allocates itself, so that a dry pool costs one lock round.
type waitingProvider interface {
	Waits() bool
	Allocate(ctx context.Context, req alloc.Request) (a alloc.Allocation, existed bool, sec *section.EC2, attrs []any, err error)
}

// allocate takes an address; when the pool is empty the provider may find
// one (IMDS) or wait for one (ec2: warm, started for this ADD), or says why
// there is none.
func (p *Plugin) allocate(ctx context.Context, req alloc.Request) (alloc.Allocation, bool, *section.EC2, error) {
	if w, ok := p.provider.(waitingProvider); ok && w.Waits() {
		a, existed, sec, attrs, err := w.Allocate(ctx, req)
		p.addAttrs = attrs
		return a, existed, sec, err
	}
	a, existed, sec, err := p.Mgr.AllocateWithSection(ctx, req)
	if errors.Is(err, provider.ErrIdentityUnchecked) {
		// First ADD of a boot: compare the store with IMDS, then retry.
		if _, rerr := p.provider.Refresh(ctx); rerr != nil {
			return a, existed, sec, fmt.Errorf("%w (%w)", err, rerr)
		}
		a, existed, sec, err = p.Mgr.AllocateWithSection(ctx, req)
	}
	if !errors.Is(err, alloc.ErrPoolExhausted) {
		return a, existed, sec, err
	}
	a, existed, sec, p.addAttrs, err = p.provider.Dry(ctx, req, err)
	return a, existed, sec, err
}

// add gives the attachment an address and wires it. Repeating ADD returns
// the same address, repairing the wiring if it is incomplete. On failure
// neither wiring nor allocation is left behind.
func (p *Plugin) add(ctx context.Context, at attachment) (*current.Result, error) {
	req := alloc.Request{
		Key: at.Key, Netns: at.Netns,
		PodNamespace: at.PodNamespace, PodName: at.PodName, PodUID: at.PodUID,
		HostVeth: netsetup.HostVethName(p.Cfg.VethPrefix, at.ContainerID, at.IfName),
	}
	var err error
	if req.Egress4, err = p.wantsEgress4(); err != nil {
		return nil, err
	}
	a, existed, sec, err := p.allocate(ctx, req)
	if err != nil {
		return nil, err
	}
	fault.Point("add:after-allocate")
	routing, err := p.provider.Prepare(ctx, a, sec)
	if err == nil && a.Egress4.IsValid() {
		err = p.ensureEgress4(true)
	}
	if err != nil {
		return nil, p.undo(ctx, at, a, existed, err)
	}
	spec := p.podSpec(a, at.Netns, routing)
	if existed {
		if links, err := p.wire.Check(spec); err == nil {
			return p.result(a, at.Netns, links), nil
		}
		// Incomplete wiring from an ADD that died half-way: start over.
		if err := teardown(p.wire, a.HostVeth, a.Wired()...); err != nil {
			return nil, fmt.Errorf("repair %s: %w", at.Key, err)
		}
		fault.Point("add:after-repair-teardown")
	}
	links, err := p.wire.Setup(spec)
	if err != nil {
		return nil, p.undo(ctx, at, a, existed, fmt.Errorf("wire %s with %s: %w", at.Key, a.IP, err))
	}
	fault.Point("add:after-wire")
	return p.result(a, at.Netns, links), nil
}

// undo releases the allocation of a failed ADD (without cooldown: no pod
// ever used it) and returns cause, with the release's own error if any. An
// allocation that existed before this ADD is kept: the pod may be using it,
// and the runtime's DEL releases it with cooldown.
func (p *Plugin) undo(ctx context.Context, at attachment, a alloc.Allocation, existed bool, cause error) error {
	if existed {
		return cause
	}
	fault.Point("add:before-undo")
	if err := p.Mgr.Undo(context.WithoutCancel(ctx), at.Key, a.IP); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

// result is the ADD result. The gateway and the default route are only
// the interface's that carries the pod's default route: a runtime or
// Multus reads them as this attachment's claim to it.
//
// A dual-stack result lists its addresses in the order of ipFamilies,
// IPv4 first by default: containerd takes the first IPv4 address of the
// result as the pod's primary IP whatever the order (its ip_pref "ipv4",
// the default; "cni" takes the result's order), CRI-O the first listed,
// and kubelet reports the primary as status.podIP.
func (p *Plugin) result(a alloc.Allocation, netns string, l netsetup.Links) *current.Result {
	r := &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{
			{Name: a.HostVeth, Mac: l.HostMAC.String()},
			{Name: a.IfName, Mac: l.PodMAC.String(), Sandbox: netns},
		},
	}
	for _, ip := range p.resultOrder(a) {
		c := &current.IPConfig{
			Interface: current.Int(1),
			Address:   net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())},
		}
		if l.Default {
			gw := netsetup.GatewayIP()
			if ip.Is6() {
				gw = netsetup.GatewayIP6()
			}
			c.Gateway = gw.AsSlice()
			r.Routes = append(r.Routes, &types.Route{Dst: net.IPNet{IP: defaultDst(ip), Mask: net.CIDRMask(0, ip.BitLen())}, GW: c.Gateway})
		}
		r.IPs = append(r.IPs, c)
	}
	return r
}

func defaultDst(ip netip.Addr) net.IP {
	if ip.Is4() {
		return net.IPv4zero.To4()
	}
	return net.IPv6zero
}

// resultOrder is a's addresses in the order of the network's ipFamilies.
func (p *Plugin) resultOrder(a alloc.Allocation) []netip.Addr {
	if !a.IP6.IsValid() {
		return []netip.Addr{a.IP}
	}
	var out []netip.Addr
	for _, f := range p.Cfg.Families {
		if ip, ok := a.Addr(f); ok {
			out = append(out, ip)
		}
	}
	if len(out) != 2 { // a network that changed its families: the store's order
		return a.Addrs()
	}
	return out
}

// del frees the attachment's address. It needs no netns: the host side is
// found by the names the store recorded. An unknown attachment gets a
// best-effort teardown by derived name and is not an error.
//
// The look-up, the unroute and the release are one hold of the state lock
// (Manager.Remove): the rules are found by address alone, and only under
// the lock does the address still belong to this attachment. Unrouting
// after the look-up's lock, a DEL stalled past the cooldown while the same
// attachment was released by a repeated DEL or gc and its address given to
// a new pod deleted that pod's rules (TestDelNeverUnroutesAReusedAddress).
// Re-checking under a second lock before an unlocked unroute would leave
// the same window; the unroute adds about a millisecond of netlink to the
// lock hold, and the lock is taken once instead of twice (look-up, then
// release). The veth deletion, the slow part (15–30 ms of RCU), stays out
// of the lock's way: it starts once nothing routes to the veth and runs
// while the release is saved.
func (p *Plugin) del(ctx context.Context, k alloc.Key, netns string) error {
	var deleted chan error
	// Remove also cancels an ADD of k still waiting on a dry pool: the
	// runtime has given up on it.
	_, _, err := p.Mgr.Remove(ctx, k, func(a alloc.Allocation) error {
		fault.Point("del:after-lookup")
		// The address may only be freed once nothing routes it to the old
		// veth, or a new pod could get an address still routed there.
		if err := p.wire.Unroute(unrouteOf(a.HostVeth, netns, k.IfName, a.Wired())); err != nil {
			return fmt.Errorf("tear down %s (%s): %w", k, addrList(a), err)
		}
		fault.Point("del:after-unroute")
		// From here the veth is only a dead end.
		deleted = make(chan error, 1)
		go func() { deleted <- p.wire.DeleteVeths(a.HostVeth) }()
		return nil
	})
	if deleted != nil {
		// Unrouted; released unless err says the save failed (the retry
		// finds the allocation and releases it).
		fault.Point("del:after-release")
		if verr := <-deleted; verr != nil {
			err = errors.Join(err, fmt.Errorf("delete host veth of %s: %w", k, verr))
		}
		return err
	}
	if storeUnusable(err) {
		return p.delWithoutStore(k, err)
	}
	if err != nil {
		return err // also a failed unroute: the address stays allocated
	}
	// Nothing recorded (a found allocation was unrouted above, or failed).
	return p.wire.DeleteVeths(netsetup.HostVethName(p.Cfg.VethPrefix, k.ContainerID, k.IfName))
}

// storeUnusable: the store cannot be read until an operator acts (corrupt,
// newer version, untrusted, lost). Not a lock timeout or an I/O error,
// which a retry may get past.
func storeUnusable(err error) bool {
	return errors.Is(err, alloc.ErrCorrupt) || errors.Is(err, alloc.ErrUnsupportedVersion) ||
		errors.Is(err, alloc.ErrInsecure) || errors.Is(err, alloc.ErrStateLost)
}

// delWithoutStore is DEL when the store cannot be read. Failing would make
// the runtime retry for ever and keep the pod Terminating, with nothing
// ever freed. Instead it tears down the host side by the derived veth name
// (the /32 routes through that veth say which addresses it had, and their
// rules go too) and succeeds, logging at error level. The address is not
// released, as the store cannot record it: it stays out of use, the safe
// side, and ADD and STATUS keep failing until `eni-cni repair` rebuilds the
// state, which then finds the veth gone and the address free.
func (p *Plugin) delWithoutStore(k alloc.Key, cause error) error {
	veth := netsetup.HostVethName(p.Cfg.VethPrefix, k.ContainerID, k.IfName)
	routes, err := p.wire.PodRoutes(p.Cfg.VethPrefix)
	if err != nil {
		return errors.Join(cause, fmt.Errorf("tear down %s without the store: %w", k, err))
	}
	var atts []netsetup.Attachment
	var ips []string
	for _, r := range routes {
		if r.Veth == veth {
			atts = append(atts, netsetup.Attachment{HostVeth: veth, IP: r.IP})
			ips = append(ips, r.IP.String())
		}
	}
	if err := errors.Join(p.wire.Unroute(atts), p.wire.DeleteVeths(veth)); err != nil {
		return errors.Join(cause, fmt.Errorf("tear down %s (%s) without the store: %w", k, veth, err))
	}
	p.logger().Error("DEL tore down the host side without the store; its address stays out of use until `eni-cni repair`",
		"network", k.Network, "containerID", k.ContainerID, "ifname", k.IfName, "hostVeth", veth,
		"addresses", strings.Join(ips, ","), "store", cause)
	return nil
}

// check verifies the allocation, prevResult and wiring agree. prev is nil
// only where the spec makes it optional (before 1.0.0; Check enforces
// it). Each kind of disagreement has its own error, and so its own CNI
// code (toCNIError).
func (p *Plugin) check(ctx context.Context, at attachment, prev *current.Result) error {
	a, found, sec, err := p.Mgr.GetWithSection(ctx, at.Key)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("check %s: %w", at.Key, errNoAllocation)
	}
	if prev != nil {
		for _, ip := range a.Addrs() {
			if err := prevMatches(prev, a, ip, at.Netns); err != nil {
				return fmt.Errorf("check %s: %w: %w", at.Key, errPrevResult, err)
			}
		}
	}
	routing, err := p.provider.Routing(a, sec)
	if err != nil {
		return fmt.Errorf("check %s (%s): %w: %w", at.Key, addrList(a), errCheckRouting, err)
	}
	if _, err := p.wire.Check(p.podSpec(a, at.Netns, routing)); err != nil {
		return fmt.Errorf("check %s (%s): %w", at.Key, addrList(a), err)
	}
	if a.Egress4.IsValid() {
		if err := p.checkEgress4(); err != nil {
			return fmt.Errorf("check %s (%s): %w", at.Key, addrList(a), err)
		}
	}
	return nil
}

// errCheckRouting: CHECK cannot tell how the address is routed (the ENI
// its allocation names is not in the store), so it cannot check the
// `from` rule; that is a failure, not a skipped check.
var errCheckRouting = errors.New("cannot tell the address's policy routing")

// addrList names a's addresses for messages: "10.0.0.1", "10.0.0.1,
// fd00::1", or "fd00::1, egress 169.254.172.1".
func addrList(a alloc.Allocation) string {
	s := a.IP.String()
	if a.IP6.IsValid() {
		s += ", " + a.IP6.String()
	}
	if a.Egress4.IsValid() {
		s += ", egress " + a.Egress4.String()
	}
	return s
}

// prevMatches checks that the ADD result the runtime kept is ours: the
// allocation's address ip as a /32 (/128) on the pod's interface, that
// interface in the pod's namespace, and the host veth. A later plugin of
// the chain may have added to the result; nothing is required to be absent.
func prevMatches(r *current.Result, a alloc.Allocation, want netip.Addr, netns string) error {
	pod, host := -1, -1
	for i, itf := range r.Interfaces {
		switch {
		case itf.Name == a.IfName && itf.Sandbox != "":
			if netns != "" && itf.Sandbox != netns {
				return fmt.Errorf("interface %s is in %s, CNI_NETNS is %s", itf.Name, itf.Sandbox, netns)
			}
			pod = i
		case itf.Name == a.HostVeth && itf.Sandbox == "":
			host = i
		}
	}
	if pod < 0 {
		return fmt.Errorf("no interface %s in a sandbox", a.IfName)
	}
	if host < 0 {
		return fmt.Errorf("no host interface %s", a.HostVeth)
	}
	var listed []string
	for _, c := range r.IPs {
		got, ok := netip.AddrFromSlice(c.Address.IP)
		if !ok {
			continue
		}
		ones, bits := c.Address.Mask.Size()
		listed = append(listed, fmt.Sprintf("%s/%d", got.Unmap(), ones))
		if got.Unmap() != want {
			continue
		}
		if n := want.BitLen(); ones != n || bits != n {
			return fmt.Errorf("address %s has prefix /%d, eni-cni assigns a /%d", want, ones, n)
		}
		if c.Interface != nil && *c.Interface != pod {
			return fmt.Errorf("address %s is on interface %d, not on %s", want, *c.Interface, a.IfName)
		}
		return nil
	}
	return fmt.Errorf("no address %s/%d (it lists %v); the allocation holds %s", want, want.BitLen(), listed, addrList(a))
}

// errNotReady: STATUS found the plugin unable to serve any ADD.
var errNotReady = errors.New("cannot serve ADD")

// Status is the STATUS verb: whether the network is ready for pods (see
// Provider.Ready), starting what makes it ready.
func (p *Plugin) Status(ctx context.Context) (alloc.Counts, error) {
	return p.status(ctx, true)
}

// status reports whether the network is ready for pods: ADD can work at
// all, and for an ec2 pool with readyWhenFilled, the pool was filled in
// this boot and can grow or has addresses (provider.PoolReady). act: see
// Provider.Ready.
func (p *Plugin) status(ctx context.Context, act bool) (alloc.Counts, error) {
	// Read without the lock: saves replace the file by rename, so a read
	// sees one whole state, and STATUS must not queue behind a busy ADD.
	// Peek applies what the next locked call would (a new boot, expired
	// cooling) to its copy only.
	st, counts, err := p.Mgr.Peek()
	if err != nil {
		return alloc.Counts{}, fmt.Errorf("%w: %w", errNotReady, err)
	}
	if err := p.provider.Ready(ctx, st, act); err != nil {
		return alloc.Counts{}, fmt.Errorf("%w: %w", errNotReady, err)
	}
	return counts, nil
}

// wantsEgress4 decides whether an ADD gives its pod an egress address:
// ipv4Egress true, or absent on a node with an IPv4 default route (an
// IPv6-only node has nowhere to send the pods' IPv4 packets).
func (p *Plugin) wantsEgress4() (bool, error) {
	ew, ok := p.wire.(egressWirer)
	if !ok || p.Cfg.Egress4 == netconf.Egress4Off {
		return false, nil
	}
	if p.Cfg.Egress4 == netconf.Egress4On {
		return true, nil
	}
	has, err := ew.NodeHasIPv4Route()
	if err != nil {
		return false, fmt.Errorf("look for the node's IPv4 default route (ipv4Egress): %w", err)
	}
	return has, nil
}

// ensureEgress4 installs the egress masquerade for pods given an egress
// address: once per boot for ADD, always for repair.
func (p *Plugin) ensureEgress4(once bool) error {
	ew, ok := p.wire.(egressWirer)
	if !ok {
		return nil
	}
	if err := ew.EnsureEgress4(p.Cfg.StateDir, p.Mgr.BootID, once); err != nil {
		return fmt.Errorf("set up the IPv4 egress masquerade: %w", err)
	}
	return nil
}

func (p *Plugin) checkEgress4() error {
	if ew, ok := p.wire.(egressWirer); ok {
		return ew.CheckEgress4()
	}
	return nil
}
