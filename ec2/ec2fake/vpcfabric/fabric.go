// Package vpcfabric carries the packets of an ec2fake world as the VPC
// does: it is the one thing that turns the fake's EC2 state into a data
// path. A router network namespace stands for the VPC router; each attached
// ENI's link on a node is one end of a veth whose other end (the ENI's
// port) sits in the router. Following the fake's OnChange and OnLink hooks
// (so with the fake's latencies, never by polling), the router delivers
// every address and prefix EC2 has assigned to an ENI to that ENI's port,
// answers ARP for the subnet gateways, and enforces the source/destination
// check: a packet entering from ENI X whose source is not one of X's
// addresses is dropped and counted, per ENI. The VPC's MTU is 9001.
//
// An optional internet namespace sits behind the router on a 1500-byte
// link, reachable only from the addresses with a public mapping (the
// instances' primary private addresses, as an internet gateway maps them):
// anything else sent toward it is dropped and counted.
//
// The namespaces are the caller's (made and removed by it); the fabric
// makes the links, routes and iptables rules in them. It needs root.
package vpcfabric

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// MTU is the VPC's: the router's ports and the links it makes.
const MTU = 9001

// Config says where the fabric lives.
type Config struct {
	// Router is the path of the router's network namespace.
	Router string
	// Internet is the path of the internet's network namespace; empty for
	// a VPC without an internet gateway.
	Internet string
	// LinkName names an ENI's link on its node; default "ens<5+device>",
	// as Nitro instances name them.
	LinkName func(ec2fake.ENI) string
	// Log receives the errors of the hooks (they run on the fake's
	// goroutines); nil discards them. Err returns them too.
	Log io.Writer
}

// Fabric is the VPC's data plane for one ec2fake world.
type Fabric struct {
	srv *ec2fake.Server
	cfg Config
	rns netns.NsHandle
	rh  *netlink.Handle

	mu       sync.Mutex
	nodes    map[string]*node          // instance id -> where its links go
	ports    map[string]*port          // ENI id -> its port
	latest   map[string]ec2fake.Change // ENI id -> newest change seen
	public   []netip.Addr              // addresses the internet gateway maps
	gone     map[string]int            // ENI id -> drops of ports removed
	errs     []error
	portSeq  int
	internet bool
	closed   bool
}

// node is an instance whose ENIs have links on a network namespace.
type node struct {
	nsPath string
	ns     netns.NsHandle
	h      *netlink.Handle
}

// New readies the router (forwarding on, reverse-path filters off: the
// only check that drops there is the counted one), the internet behind it,
// and follows srv from now on. Nodes join with AddNode, or links made by
// someone else with Adopt.
func New(srv *ec2fake.Server, cfg Config) (*Fabric, error) {
	if cfg.LinkName == nil {
		cfg.LinkName = func(e ec2fake.ENI) string { return fmt.Sprintf("ens%d", 5+e.DeviceIndex) }
	}
	rns, err := netns.GetFromPath(cfg.Router)
	if err != nil {
		return nil, fmt.Errorf("open router netns %s: %w", cfg.Router, err)
	}
	rh, err := netlink.NewHandleAt(rns)
	if err != nil {
		rns.Close()
		return nil, fmt.Errorf("netlink in router netns %s: %w", cfg.Router, err)
	}
	f := &Fabric{srv: srv, cfg: cfg, rns: rns, rh: rh, nodes: map[string]*node{}, ports: map[string]*port{},
		latest: map[string]ec2fake.Change{}, gone: map[string]int{}}
	if err := sysctls(cfg.Router, "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.unreachableVPC(); err != nil {
		f.Close()
		return nil, err
	}
	if cfg.Internet != "" {
		f.internet = true
		if err := newInternet(f, cfg.Internet); err != nil {
			f.Close()
			return nil, err
		}
	}
	srv.OnChange(f.change)
	srv.OnLink(f.linkAppeared)
	return f, nil
}

// unreachableVPC makes the VPC's addresses that no ENI holds unreachable
// (a /32 or prefix route to a port is more specific): neither sent toward
// the internet nor answered by proxy ARP.
func (f *Fabric) unreachableVPC() error {
	for _, c := range f.srv.Info().VPCCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("vpc cidr %q: %w", c, err)
		}
		if err := f.rh.RouteReplace(&netlink.Route{Dst: ipNet(p), Type: unix.RTN_UNREACHABLE}); err != nil {
			return fmt.Errorf("router: unreachable %s: %w", p, err)
		}
	}
	return nil
}

// Close forgets the nodes and drops the links the fabric made (each veth
// goes with its router end); rules and routes go with the caller's
// namespaces. Call it before they go; a second call does nothing.
func (f *Fabric) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	for id, p := range f.ports {
		if p.made {
			if l, err := f.rh.LinkByName(p.name); err == nil {
				_ = f.rh.LinkDel(l)
			}
		}
		delete(f.ports, id)
	}
	for id, n := range f.nodes {
		n.h.Close()
		n.ns.Close()
		delete(f.nodes, id)
	}
	f.rh.Close()
	f.rns.Close()
}

// Err returns what went wrong in the hooks so far.
func (f *Fabric) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

func (f *Fabric) failLocked(err error) {
	f.errs = append(f.errs, err)
	if f.cfg.Log != nil {
		fmt.Fprintf(f.cfg.Log, "vpcfabric: %v\n", err)
	}
}

// AddNode puts an instance of the world on the fabric: its ENI links go
// into the network namespace at nsPath. Its attached ENIs get their links
// at once (as when the instance boots), later ones when the fake says their
// link appears. The primary link comes configured as DHCP leaves it on a
// real instance (up, MTU 9001, the primary address on its subnet, default
// via the gateway), and the primary address gets its public mapping.
func (f *Fabric) AddNode(instanceID, nsPath string) error {
	in := f.srv.Instance(instanceID)
	if in == nil {
		return fmt.Errorf("add node %s: no such instance in the world", instanceID)
	}
	nsh, err := netns.GetFromPath(nsPath)
	if err != nil {
		return fmt.Errorf("add node %s: open netns %s: %w", instanceID, nsPath, err)
	}
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		nsh.Close()
		return fmt.Errorf("add node %s: netlink in %s: %w", instanceID, nsPath, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, dup := f.nodes[instanceID]; dup {
		h.Close()
		nsh.Close()
		return fmt.Errorf("add node %s: already on the fabric", instanceID)
	}
	n := &node{nsPath: nsPath, ns: nsh, h: h}
	f.nodes[instanceID] = n
	for _, e := range in.ENIs() {
		cur, ok := f.currentLocked(e.ID)
		if !ok || cur.InstanceID != instanceID {
			continue
		}
		if err := f.plugLocked(n, cur); err != nil {
			return fmt.Errorf("add node %s: %w", instanceID, err)
		}
	}
	primary := in.PrimaryENI()
	if err := dhcp(n, f.cfg.LinkName(primary), primary); err != nil {
		return fmt.Errorf("add node %s: %w", instanceID, err)
	}
	return f.mapPublicLocked(netip.MustParseAddr(primary.PrimaryIP))
}

// Adopt makes the router end (routerEnd, already in the router namespace)
// of a link someone else made for ENI eniID its port. Adopted links are
// never deleted by the fabric. The ENI's instance gets no public mapping:
// MapPublic gives one.
func (f *Fabric) Adopt(eniID, routerEnd string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.currentLocked(eniID)
	if !ok {
		return fmt.Errorf("adopt %s: no such ENI", eniID)
	}
	if _, dup := f.ports[eniID]; dup {
		return fmt.Errorf("adopt %s: it has a port", eniID)
	}
	p := &port{name: routerEnd, eni: eniID, instance: e.InstanceID, attachment: e.AttachmentID}
	if err := f.openPortLocked(p, e); err != nil {
		return fmt.Errorf("adopt %s: %w", eniID, err)
	}
	return nil
}

// MapPublic gives a the internet gateway's public mapping.
func (f *Fabric) MapPublic(a netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mapPublicLocked(a)
}

// change follows one EC2 change (an OnChange hook).
func (f *Fabric) change(c ec2fake.Change) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if prev, ok := f.latest[c.ENI.ID]; f.closed || ok && prev.Seq >= c.Seq {
		return
	}
	f.latest[c.ENI.ID] = c
	p := f.ports[c.ENI.ID]
	if p == nil {
		return // no link yet: linkAppeared routes what is assigned by then
	}
	if c.Deleted || c.ENI.AttachmentID != p.attachment {
		if err := f.unplugLocked(p); err != nil {
			f.failLocked(err)
		}
		return
	}
	if err := f.routeLocked(p, c.ENI); err != nil {
		f.failLocked(err)
	}
}

// linkAppeared makes the link of an ENI the fake attached (an OnLink
// hook), if its instance is on the fabric and it is still attached. The
// hook may run before the Change of the attach reached change, so it
// starts from the ENI as it is now.
func (f *Fabric) linkAppeared(appeared ec2fake.ENI) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	e, ok := f.currentLocked(appeared.ID)
	if !ok || e.AttachmentID != appeared.AttachmentID || f.ports[e.ID] != nil {
		return
	}
	n := f.nodes[e.InstanceID]
	if n == nil {
		return
	}
	if err := f.plugLocked(n, e); err != nil {
		f.failLocked(err)
	}
}

// currentLocked is ENI id as it is now; from here on change ignores the
// Changes older than this state (still on their way to it).
func (f *Fabric) currentLocked(id string) (ec2fake.ENI, bool) {
	cur, ok := f.srv.Current(id)
	if !ok {
		return ec2fake.ENI{}, false
	}
	if prev, seen := f.latest[id]; seen && prev.Seq > cur.Seq {
		return prev.ENI, !prev.Deleted
	}
	f.latest[id] = cur
	return cur.ENI, true
}
