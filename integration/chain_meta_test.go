package integration

import (
	"net"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// withUplink gives the node what every real node has and a test node
// lacks: an interface with the default route (a veth pair of its own
// here, nothing is sent on it). The host veth answers a pod's ARP for its gateway only for
// an address the node routes out of another interface.
func (n *node) withUplink(t *testing.T) {
	t.Helper()
	up := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink0"}, PeerName: "uplink0p"}
	if err := n.h.LinkAdd(up); err != nil {
		t.Fatalf("add uplink: %v", err)
	}
	for _, name := range []string{"uplink0", "uplink0p"} {
		l, err := n.h.LinkByName(name)
		if err == nil {
			err = n.h.LinkSetUp(l)
		}
		if err != nil {
			t.Fatalf("set %s up: %v", name, err)
		}
	}
	link, err := n.h.LinkByName("uplink0")
	if err != nil {
		t.Fatal(err)
	}
	def := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Scope: netlink.SCOPE_LINK}
	if err := n.h.RouteAdd(def); err != nil {
		t.Fatalf("add default route via uplink: %v", err)
	}
}

// TestChainTuningMACPortmapBandwidth chains eni-cni with tuning (a new
// MAC for the pod's interface), portmap and bandwidth, through libcni. The
// MAC change flushes the pod's permanent neighbour entry for 169.254.1.1;
// the pod must still reach the node (the host veth answers its ARP), and
// CHECK of the whole chain passes. ADD used to succeed and leave the pod
// without a network.
func TestChainTuningMACPortmapBandwidth(t *testing.T) {
	binDir := pluginBinDir(t, "tuning", "portmap", "bandwidth")
	n := newNode(t)
	n.withUplink(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.34.0/24"}, nil)
	const mac = "02:42:ac:11:00:99"
	conflist := conflistOf(nw,
		map[string]any{"type": "tuning", "mac": mac},
		map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "backend": "iptables"},
		map[string]any{"type": "bandwidth", "ingressRate": 100_000_000, "ingressBurst": 1_000_000, "egressRate": 100_000_000, "egressBurst": 1_000_000},
	)
	run := newChainRunner(t, n, binDir, conflist)
	p := newPod(t, "pod-tuned")
	res := run.add(t, p)
	ip := resultIP(t, res)
	if got := podMAC(t, p); !strings.EqualFold(got, mac) {
		t.Fatalf("pod eth0 MAC %s, want tuning's %s", got, mac)
	}
	if err := pingFrom(t, p, ip, nodeIP()); err != nil {
		t.Errorf("the pod lost its network after tuning changed its MAC: %v", err)
	}
	if err := ping(t.Context(), n.path(), ip); err != nil {
		t.Errorf("node to the tuned pod: %v", err)
	}
	if err := run.check(t, p); err != nil {
		t.Errorf("CHECK of the chain: %v", err)
	}
	if err := run.del(t, p); err != nil {
		t.Fatalf("DEL of the chain: %v", err)
	}
	n.assertNoAttachmentsBut(t, map[string]bool{"uplink0": true, "uplink0p": true})
}

func podMAC(t *testing.T, p *pod) string {
	t.Helper()
	h := openHandle(t, p.path())
	defer h.Close()
	l, err := h.LinkByName(p.ifName)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().HardwareAddr.String()
}
