package integration

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/ec2fake/vpcfabric"
	"github.com/eni-cni/eni-cni/netsetup/snat"
)

// A world of two instances on the VPC fabric (package vpcfabric): one
// account, one subnet, a router and an internet behind it. Each instance's
// node namespace runs the real binary on an ec2 pool against its own IMDS
// (the fake's listener inside that namespace) and the shared EC2 API; its
// ENIs' links come and go as EC2 attaches them.

// mnNode is one instance of the world and its node.
type mnNode struct {
	*node
	name    string
	inst    *ec2fake.Instance
	nw      *network
	primary netip.Addr
	// a pod whose address is on the primary ENI, and one on a secondary
	onPrimary, onSecondary ec2Pod
}

type mnWorld struct {
	fake     *ec2fake.Server
	fab      *vpcfabric.Fabric
	internet *netNS
	nodes    [2]*mnNode
}

const mnPort = 8080

// newMNWorld starts the world, puts both nodes on the fabric, runs warm on
// each (which creates and attaches a second ENI through the API: the
// fabric makes its link and routes its addresses) and ADDs pods until each
// node has one on its primary ENI and one on a secondary.
func newMNWorld(t *testing.T) *mnWorld {
	t.Helper()
	fake, err := ec2fake.New(ec2fake.Config{InstanceType: ec2Type, VPCCIDRs: []string{ec2VPCCIDR},
		Subnets: []ec2fake.SubnetConfig{{CIDR: ec2SubnetCIDR}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	w := &mnWorld{fake: fake, internet: newNetNS(t)}
	router := newNetNS(t)
	w.fab, err = vpcfabric.New(fake, vpcfabric.Config{Router: router.path(), Internet: w.internet.path()})
	if err != nil {
		t.Fatalf("vpc fabric: %v", err)
	}
	t.Cleanup(func() {
		if err := w.fab.Err(); err != nil {
			t.Errorf("vpc fabric: %v", err)
		}
		w.fab.Close()
	})
	second, err := fake.AddInstance(ec2fake.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i, inst := range []*ec2fake.Instance{fake.Instances()[0], second} {
		w.nodes[i] = w.newNode(t, fmt.Sprintf("node%d", i+1), inst)
	}
	// Before the nodes' namespaces go (cleanups run last first).
	t.Cleanup(w.fab.Close)
	return w
}

func (w *mnWorld) newNode(t *testing.T, name string, inst *ec2fake.Instance) *mnNode {
	t.Helper()
	n := &mnNode{node: newNode(t), name: name, inst: inst, primary: netip.MustParseAddr(inst.PrimaryENI().PrimaryIP)}
	var url string
	err := n.ns.Do(func(ns.NetNS) (err error) {
		url, err = inst.StartIMDSHandler("127.0.0.1:0", inst.Handler())
		return err
	})
	if err != nil {
		t.Fatalf("%s: listener: %v", name, err)
	}
	if err := w.fab.AddNode(inst.ID(), n.path()); err != nil {
		t.Fatal(err)
	}
	// warmIPTarget 8 on a t3.medium (5 secondary addresses per ENI): the
	// first pass fills the primary ENI and attaches a second one.
	n.nw = newNetwork(t, n.node, "1.0.0", nil, map[string]any{
		"pool": map[string]any{"source": "ec2", "warmIPTarget": 8},
		"mtu":  ec2MTU, "snat": true, "imdsEndpoint": url, "ec2Endpoint": url,
	})
	n.nw.mustWarm(t)
	byIP := map[netip.Addr]ec2fake.ENI{}
	for _, e := range inst.ENIs() {
		for _, s := range e.SecondaryIPs {
			byIP[netip.MustParseAddr(s)] = e
		}
	}
	var gotPrimary, gotSecondary bool
	for _, p := range newPods(t, 10) {
		res, out := n.nw.add(t, p)
		a := ec2Pod{attached: attached{pod: p, res: res, ip: resultIP(t, res), veth: hostVethOf(t, res)}, out: out}
		a.eni = byIP[a.ip]
		switch {
		case a.eni.DeviceIndex == 0 && !gotPrimary:
			n.onPrimary, gotPrimary = a, true
		case a.eni.DeviceIndex > 0 && !gotSecondary:
			assertSNATPod(t, n.node, a)
			n.onSecondary, gotSecondary = a, true
		}
		if gotPrimary && gotSecondary {
			return n
		}
	}
	t.Fatalf("%s: no pod on each ENI (primary %t, secondary %t); ENIs %+v", name, gotPrimary, gotSecondary, inst.ENIs())
	return nil
}

// assertSNATPod: a pod on a secondary ENI with SNAT has its `from` rule
// limited to the VPC (`from IP to 10.98.0.0/16 lookup <dev+1>`), so what
// leaves the VPC takes the main table, the primary ENI and the SNAT.
func assertSNATPod(t *testing.T, n *node, a ec2Pod) {
	t.Helper()
	assertWired(t, n, a.pod, a.ip, a.veth)
	r, ok := n.fromRule(t, a.ip)
	if !ok || r.Table != a.eni.DeviceIndex+1 || r.Dst == nil || r.Dst.String() != ec2VPCCIDR {
		t.Errorf("pod %s on %s: rule %v (found %t), want `from %s to %s lookup %d`", a.pod.name, a.eni.ID, r, ok, a.ip, ec2VPCCIDR, a.eni.DeviceIndex+1)
	}
}

// pods is every pod of the world with a name for messages.
func (w *mnWorld) pods() map[string]ec2Pod {
	out := map[string]ec2Pod{}
	for _, n := range w.nodes {
		out[n.name+"/primary-eni pod"] = n.onPrimary
		out[n.name+"/secondary-eni pod"] = n.onSecondary
	}
	return out
}

// dial connects from nsPath to to and returns the address the server saw
// the connection come from.
func dialFrom(t *testing.T, nsPath string, to netip.AddrPort) (netip.Addr, error) {
	t.Helper()
	line, err := dialTCP(nsPath, to)
	if err != nil {
		return netip.Addr{}, err
	}
	_, remote, _ := strings.Cut(line, " ")
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("server said %q: %w", line, err)
	}
	return ap.Addr(), nil
}

// expectSeen dials and wants the server to see want as the source.
func expectSeen(t *testing.T, what, nsPath string, to netip.AddrPort, want netip.Addr) {
	t.Helper()
	got, err := dialFrom(t, nsPath, to)
	switch {
	case err != nil:
		t.Errorf("%s: %v", what, err)
	case got != want:
		t.Errorf("%s: the server saw %s, want %s", what, got, want)
	}
}

func (w *mnWorld) dropped(t *testing.T) vpcfabric.Counters {
	t.Helper()
	c, err := w.fab.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mnPing(t *testing.T, nsPath string, args ...string) output {
	t.Helper()
	o, err := runIn(t.Context(), nsPath, nil, nil, append([]string{"ping", "-c1", "-W2"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestMultiNode is issue 17's data path between two nodes of one VPC,
// through the binary and the fabric: pod to pod on a node and across nodes
// (all four primary/secondary ENI combinations), node to pod across nodes,
// a pod to the other node's address without SNAT, a pod to the internet
// only through eni-cni's SNAT (the internet sees the node's primary
// address), MTU 9001 inside the VPC and 1500 beyond it; the router's drop
// counters stay 0 through all of it, and then show they are live.
func TestMultiNode(t *testing.T) {
	w := newMNWorld(t)
	for _, a := range w.pods() {
		serveTCP(t, a.pod.path(), mnPort)
	}
	for _, n := range w.nodes {
		serveTCP(t, n.path(), mnPort)
	}
	serveTCP(t, w.internet.path(), mnPort)
	internetHost := netip.MustParseAddr(vpcfabric.InternetHost)

	t.Run("pod to pod", func(t *testing.T) {
		for fromName, from := range w.pods() {
			for toName, to := range w.pods() {
				if fromName != toName {
					expectSeen(t, fromName+" to "+toName, from.pod.path(), netip.AddrPortFrom(to.ip, mnPort), from.ip)
				}
			}
		}
	})
	t.Run("node to pod across nodes", func(t *testing.T) {
		for i, n := range w.nodes {
			other := w.nodes[1-i]
			for _, a := range []ec2Pod{other.onPrimary, other.onSecondary} {
				expectSeen(t, n.name+" to "+other.name+"'s pod "+a.ip.String(), n.path(), netip.AddrPortFrom(a.ip, mnPort), n.primary)
			}
		}
	})
	t.Run("pod to the other node without SNAT", func(t *testing.T) {
		for i, n := range w.nodes {
			other := w.nodes[1-i]
			for _, a := range []ec2Pod{n.onPrimary, n.onSecondary} {
				expectSeen(t, n.name+"'s pod "+a.ip.String()+" to "+other.name, a.pod.path(), netip.AddrPortFrom(other.primary, mnPort), a.ip)
			}
		}
	})
	t.Run("pod to the internet through SNAT", func(t *testing.T) {
		for _, n := range w.nodes {
			for _, a := range []ec2Pod{n.onPrimary, n.onSecondary} {
				expectSeen(t, n.name+"'s pod "+a.ip.String()+" to the internet", a.pod.path(), netip.AddrPortFrom(internetHost, mnPort), n.primary)
			}
		}
	})
	t.Run("MTU", func(t *testing.T) {
		for i, n := range w.nodes {
			other := w.nodes[1-i]
			for _, a := range []ec2Pod{n.onPrimary, n.onSecondary} {
				if o := mnPing(t, a.pod.path(), "-M", "do", "-s", "8000", other.onSecondary.ip.String()); o.exit != 0 {
					t.Errorf("DF ping of 8000 bytes from %s to %s (on %s): %s", a.ip, other.onSecondary.ip, other.name, o)
				}
				if o := mnPing(t, a.pod.path(), "-M", "do", "-s", "1472", internetHost.String()); o.exit != 0 {
					t.Errorf("DF ping of 1472 bytes (1500 on the wire) from %s to the internet: %s", a.ip, o)
				}
				// The router says "fragmentation needed, MTU 1500" to the
				// node's address; the node's conntrack hands it to the pod
				// (PMTU discovery through the SNAT).
				if o := mnPing(t, a.pod.path(), "-M", "do", "-s", "1473", internetHost.String()); o.exit == 0 || !strings.Contains(string(o.stdout)+string(o.stderr), "1500") {
					t.Errorf("DF ping of 1473 bytes (1501 on the wire) from %s to the internet: want it refused with the path's MTU 1500, got %s", a.ip, o)
				}
			}
		}
	})
	t.Run("large upload to the internet", func(t *testing.T) {
		w.upload(t, internetHost)
	})
	t.Run("upload the internet cuts short", func(t *testing.T) {
		w.uploadCut(t, internetHost)
	})
	t.Run("conntrack-INVALID from pods does not leave unNATed", func(t *testing.T) {
		w.invalid(t, internetHost)
	})
	if c := w.dropped(t); c.Dropped() != 0 {
		t.Fatalf("the VPC dropped packets of a healthy cluster: %+v", c)
	}

	t.Run("source/destination check counts", func(t *testing.T) {
		w.spoof(t)
	})
	t.Run("no SNAT, no internet", func(t *testing.T) {
		w.withoutSNAT(t, internetHost)
	})
}

// spoof sends from node1 with a source no ENI of its holds (node2's
// address): the router drops it at node1's primary ENI and counts it there.
func (w *mnWorld) spoof(t *testing.T) {
	n, other := w.nodes[0], w.nodes[1]
	before := w.dropped(t)
	n.sh(t, "ip", "addr", "add", other.onPrimary.ip.String()+"/32", "dev", "lo")
	defer n.sh(t, "ip", "addr", "del", other.onPrimary.ip.String()+"/32", "dev", "lo")
	if o := mnPing(t, n.path(), "-I", other.onPrimary.ip.String(), other.primary.String()); o.exit == 0 {
		t.Errorf("a ping from %s with node2's pod address %s as its source got an answer", n.name, other.onPrimary.ip)
	}
	after := w.dropped(t)
	primary := n.inst.PrimaryENI().ID
	b, _ := before.Port(primary)
	a, ok := after.Port(primary)
	if !ok || a.Dropped != b.Dropped+1 {
		t.Errorf("%s's primary ENI %s: dropped %d, then %d; want one more", n.name, primary, b.Dropped, a.Dropped)
	}
	if after.Dropped() != before.Dropped()+1 {
		t.Errorf("the VPC dropped %d packets, want 1 (%+v)", after.Dropped()-before.Dropped(), after)
	}
}

// withoutSNAT takes node1's SNAT away. Its primary ENI's pod reaches the
// internet gateway with its own address, which has no public mapping:
// dropped and counted there. Its secondary ENI's pod leaves by the primary
// ENI (its rule keeps it on its own ENI only inside the VPC) with a source
// that ENI does not hold: the source/destination check drops it. warm puts
// the SNAT back and both work again.
func (w *mnWorld) withoutSNAT(t *testing.T, internetHost netip.Addr) {
	n := w.nodes[0]
	if err := n.ns.Do(func(ns.NetNS) error { _, err := snat.Remove(); return err }); err != nil {
		t.Fatalf("remove the SNAT: %v", err)
	}
	to := netip.AddrPortFrom(internetHost, mnPort)
	before := w.dropped(t)
	if got, err := dialFrom(t, n.onPrimary.pod.path(), to); err == nil {
		t.Errorf("without SNAT the primary ENI's pod reached the internet (which saw %s)", got)
	}
	mid := w.dropped(t)
	if mid.Internet <= before.Internet {
		t.Errorf("without SNAT the internet gateway dropped nothing of the primary ENI's pod (%d, then %d)", before.Internet, mid.Internet)
	}
	if got, err := dialFrom(t, n.onSecondary.pod.path(), to); err == nil {
		t.Errorf("without SNAT the secondary ENI's pod reached the internet (which saw %s)", got)
	}
	after := w.dropped(t)
	primary := n.inst.PrimaryENI().ID
	b, _ := mid.Port(primary)
	a, _ := after.Port(primary)
	if a.Dropped <= b.Dropped {
		t.Errorf("without SNAT the source/destination check of %s's primary ENI dropped nothing of the secondary ENI's pod (%d, then %d)", n.name, b.Dropped, a.Dropped)
	}
	n.nw.mustWarm(t)
	expectSeen(t, "primary ENI's pod after warm put the SNAT back", n.onPrimary.pod.path(), to, n.primary)
	expectSeen(t, "secondary ENI's pod after warm put the SNAT back", n.onSecondary.pod.path(), to, n.primary)
}

// mnSinkPort is where the internet host takes uploads.
const mnSinkPort = 8081

// uploadSize is large enough that segments are in flight when path MTU
// discovery shrinks the pod's 9001 to the internet's 1500: the kubeadm
// suite saw uploads of more than ~200 kB reset mid-way, the segments
// conntrack then calls INVALID leaving unNATed with the pod's source.
const uploadSize = 16 << 20

// upload sends uploadSize bytes from every pod to the internet host, each
// over one TCP connection, and wants each to arrive whole with nothing
// dropped at the internet gateway or by the source/destination check.
func (w *mnWorld) upload(t *testing.T, internetHost netip.Addr) {
	serveSink(t, w.internet.path(), mnSinkPort)
	to := netip.AddrPortFrom(internetHost, mnSinkPort)
	for name, a := range w.pods() {
		before := w.dropped(t)
		got, err := uploadTCP(a.pod.path(), to, uploadSize)
		switch {
		case err != nil:
			t.Errorf("%s (%s) uploading %d bytes to the internet: %v", name, a.ip, uploadSize, err)
		case got != uploadSize:
			t.Errorf("%s (%s) uploaded %d bytes to the internet, the server got %d", name, a.ip, uploadSize, got)
		}
		if after := w.dropped(t); after.Dropped() != before.Dropped() {
			t.Errorf("%s (%s) uploading to the internet: the VPC dropped %d packets (internet gateway %d, then %d)",
				name, a.ip, after.Dropped()-before.Dropped(), before.Internet, after.Internet)
		}
	}
}

// uploadCut posts uploadSize bytes from every pod to a web server on the
// internet host that answers without reading the body: net/http discards
// up to 256 kB of it and then closes, resetting the connection while the
// pod's segments are in flight (what the kubeadm cluster suite saw). The
// post may fail; nothing may leave without SNAT.
func (w *mnWorld) uploadCut(t *testing.T, internetHost netip.Addr) {
	serveWeb(t, w.internet.path(), mnWebPort)
	to := netip.AddrPortFrom(internetHost, mnWebPort)
	for name, a := range w.pods() {
		before := w.dropped(t)
		if err := postFrom(a.pod.path(), to, uploadSize); err != nil {
			t.Errorf("%s (%s) connecting to the web on the internet: %v", name, a.ip, err)
		}
		time.Sleep(100 * time.Millisecond) // segments still in flight
		if after := w.dropped(t); after.Dropped() != before.Dropped() {
			t.Errorf("%s (%s) posting %d bytes the server did not read: the VPC dropped %d packets (internet gateway %d, then %d)",
				name, a.ip, uploadSize, after.Dropped()-before.Dropped(), before.Internet, after.Internet)
		}
	}
}

// mnWebPort is the internet host's web server.
const mnWebPort = 8082

// invalid sends from every pod a segment conntrack calls INVALID. nat
// never sees such a packet: without eni-cni's drop it leaves with the
// pod's address, and the internet gateway (a pod on the primary ENI) or
// the source/destination check (a pod on a secondary ENI, leaving by the
// primary) drops it, counted.
func (w *mnWorld) invalid(t *testing.T, internetHost netip.Addr) {
	to := netip.AddrPortFrom(internetHost, mnSinkPort)
	for name, a := range w.pods() {
		before := w.dropped(t)
		if err := sendInvalidTCP(a.pod.path(), a.ip, to); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // through the node and the router
		if after := w.dropped(t); after.Dropped() != before.Dropped() {
			t.Errorf("%s (%s): an INVALID segment to the internet left the node without SNAT: the VPC dropped %d packets (internet gateway %d, then %d)",
				name, a.ip, after.Dropped()-before.Dropped(), before.Internet, after.Internet)
		}
	}
}
