package integration

import (
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/netsetup/connmark"
)

// nodePortCase is one way into a pod from the client: through a port of
// the node's primary address that the node DNATs to the pod (NodePort,
// hostPort), or straight to the pod's address.
type nodePortCase struct {
	name      string
	to        netip.AddrPort
	pod       ec2Pod
	viaNode   bool // enters the primary ENI for a node address
	masq      bool // the node also SNATs it (kube-proxy, externalTrafficPolicy: Cluster)
	secondary bool // the pod's address is on the secondary ENI
}

// TestNodePortToSecondaryENI is the data path of issue 17 on the VPC
// fabric: a connection that enters the primary ENI for a node port and is
// DNATed to a pod on a secondary ENI must be answered through the primary
// ENI. Without eni-cni's connection marking the reply follows the pod's
// `from` rule out of the secondary ENI with the primary's address and the
// VPC drops it (counted); with it every way in works and nothing is
// dropped; strict rp_filter on the primary breaks it again until Ensure
// puts loose back; Remove brings the bug back.
func TestNodePortToSecondaryENI(t *testing.T) {
	en := newEC2Node(t, ec2fake.Config{})
	primary := en.fake.PrimaryENI()
	if _, err := en.fake.SeedIPs(primary.ID, 2); err != nil {
		t.Fatal(err)
	}
	sec, err := en.fake.SeedENI(ec2fake.ENISpec{SecondaryIPCount: 2, DeleteOnTermination: true})
	if err != nil {
		t.Fatal(err)
	}
	primaryLink, secLink := en.primaryLink(t), en.addENILink(t, sec)
	nw := newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": 4}, nil)
	nw.mustWarm(t)
	var onPrimary, onSecondary *ec2Pod
	for _, p := range newPods(t, 4) {
		a := en.addEC2(t, nw, p)
		switch {
		case a.eni.ID == primary.ID && onPrimary == nil:
			onPrimary = &a
		case a.eni.ID == sec.ID && onSecondary == nil:
			assertSecondaryPod(t, en.node, a)
			onSecondary = &a
		}
	}
	if onPrimary == nil || onSecondary == nil {
		t.Fatalf("no pod on each ENI (primary %v, secondary %v); ENIs %+v", onPrimary, onSecondary, en.fake.ENIs())
	}
	f := newVPCFabric(t, en)
	ens5p, ens6p := primaryLink+"p", secLink+"p"
	// rp_filter off on the node: only the VPC may drop a reply here (the
	// namespace inherits the machine's values). Loose on the secondary ENI
	// is the plugin's.
	sysctls(t, en.path(), "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf."+primaryLink+".rp_filter=0")

	node := netip.MustParseAddr(primary.PrimaryIP)
	const podPort = 8080
	var stops []func()
	serve := func() {
		for _, stop := range stops {
			stop()
		}
		stops = nil
		for _, a := range []*ec2Pod{onPrimary, onSecondary} {
			stops = append(stops, serveTCP(t, a.pod.path(), podPort))
		}
	}
	serve()
	cases := kubeProxyRules(t, en, node, *onPrimary, *onSecondary, podPort)

	// Without connection marking: the node ports to the secondary pod
	// fail, and the VPC is what drops their replies.
	try := func(phase string, c nodePortCase, wantOK bool) {
		t.Helper()
		before5, _ := f.counters(t, ens5p)
		before6, drops6 := f.counters(t, ens6p)
		line, err := dialTCP(f.client.path(), c.to)
		after5, _ := f.counters(t, ens5p)
		after6, nowDrops6 := f.counters(t, ens6p)
		if !wantOK {
			if err == nil {
				t.Errorf("%s: %s worked (%q); want the reply dropped by the VPC", phase, c.name, line)
			}
			return
		}
		if err != nil {
			t.Errorf("%s: %s: %v (router drops on %s: %d)", phase, c.name, err, ens6p, nowDrops6)
			return
		}
		// The server saw the client, or the node when it masquerades.
		local, remote, _ := strings.Cut(line, " ")
		fromClient := strings.HasPrefix(remote, f.clientIP.String()+":")
		if local != netip.AddrPortFrom(c.pod.ip, podPort).String() || fromClient == c.masq {
			t.Errorf("%s: %s: server says %q, want %s:%d seeing the client (%s) unless masqueraded (%t)", phase, c.name, line, c.pod.ip, podPort, f.clientIP, c.masq)
		}
		if nowDrops6 != drops6 {
			t.Errorf("%s: %s worked but the VPC dropped %d packets from %s", phase, c.name, nowDrops6-drops6, secLink)
		}
		// Where the replies left: the node's address through the primary
		// ENI, or the pod's own through its ENI.
		port, src, counts := ens5p, node, [2]map[netip.Prefix]int{before5, after5}
		if !c.viaNode {
			src = c.pod.ip
			if c.secondary {
				port, counts = ens6p, [2]map[netip.Prefix]int{before6, after6}
			}
		}
		if k := netip.PrefixFrom(src, 32); counts[1][k] <= counts[0][k] {
			t.Errorf("%s: %s: no reply from %s came in from %s", phase, c.name, src, port)
		}
	}
	_, drops := f.counters(t, ens6p)
	for _, c := range cases {
		try("without connmark", c, !(c.viaNode && c.secondary))
	}
	if _, now := f.counters(t, ens6p); now <= drops {
		t.Errorf("without connmark: the VPC dropped nothing from %s (%d before, %d after)", secLink, drops, now)
	} else {
		t.Logf("without connmark: the VPC dropped %d packets from %s", now-drops, secLink)
	}

	spec := connmark.Spec{PrimaryMAC: primary.MAC, VethPrefix: vethPrefix}
	ensure := func(want int) {
		t.Helper()
		err := en.ns.Do(func(ns.NetNS) error {
			changed, err := connmark.Ensure(spec)
			if err == nil && len(changed) != want {
				t.Errorf("connmark.Ensure: changed %q, want %d things", changed, want)
			}
			return err
		})
		if err != nil {
			t.Fatalf("connmark.Ensure: %v", err)
		}
	}
	ensure(4) // chain, jump, ip rule, rp_filter
	serve()   // new listeners: the pods' half-open connections go
	for _, c := range cases {
		try("with connmark", c, true)
	}
	for _, to := range []netip.Addr{node, onSecondary.ip} {
		o, err := runIn(t.Context(), f.client.path(), nil, nil, "ping", "-c1", "-W1", "-M", "do", "-s", "8972", to.String())
		if err != nil || o.exit != 0 {
			t.Errorf("ping with 9000-byte packets, DF set, to %s: %v %s", to, err, o)
		}
	}

	// Strict rp_filter on the primary ENI drops the DNATed first packet on
	// the node (its source routes out of the secondary ENI by the pod's
	// rule): the VPC sees nothing. Ensure puts loose back.
	sysctls(t, en.path(), "net.ipv4.conf."+primaryLink+".rp_filter=1")
	nodePort := cases[0]
	_, drops = f.counters(t, ens6p)
	try("strict rp_filter", nodePort, false)
	if _, now := f.counters(t, ens6p); now != drops {
		t.Errorf("strict rp_filter: the VPC dropped %d packets; want the node to drop them", now-drops)
	}
	ensure(1)
	try("rp_filter put back", nodePort, true)

	// Remove brings the bug back: the test sees it.
	err = en.ns.Do(func(ns.NetNS) error { _, err := connmark.Remove(); return err })
	if err != nil {
		t.Fatalf("connmark.Remove: %v", err)
	}
	_, drops = f.counters(t, ens6p)
	try("after Remove", nodePort, false)
	if _, now := f.counters(t, ens6p); now <= drops {
		t.Errorf("after Remove: the VPC dropped nothing from %s", secLink)
	}
	if d := f.drops(t)[ens5p]; d != 0 {
		t.Errorf("the VPC dropped %d packets from the primary ENI %s", d, primaryLink)
	}
}

// kubeProxyRules installs, in the node's nat table, what kube-proxy and the
// portmap plugin would for a few ports of the node's primary address, and
// returns every way in, the direct ones too. The rules go through
// iptables (nf_tables here, the engine kube-proxy's nftables mode uses as
// well) and, when it is installed, iptables-legacy (xtables hooks).
func kubeProxyRules(t *testing.T, en *ec2Node, node netip.Addr, onPrimary, onSecondary ec2Pod, podPort uint16) []nodePortCase {
	t.Helper()
	nat := func(bin string, args ...string) {
		t.Helper()
		o, err := runIn(t.Context(), en.path(), nil, nil, append([]string{bin, "-t", "nat"}, args...)...)
		if err == nil && o.exit != 0 {
			t.Fatalf("node: %s -t nat %v: %s", bin, args, o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	dnat := func(bin string, port uint16, a ec2Pod, match ...string) {
		t.Helper()
		args := append([]string{"-A", "PREROUTING"}, match...)
		args = append(args, "-p", "tcp", "--dport", strconv.Itoa(int(port)), "-j", "DNAT", "--to-destination", netip.AddrPortFrom(a.ip, podPort).String())
		nat(bin, args...)
	}
	toNode := []string{"-d", node.String()}
	local := []string{"-m", "addrtype", "--dst-type", "LOCAL"}
	dnat("iptables", 30080, onSecondary, toNode...)
	dnat("iptables", 30081, onPrimary, toNode...)
	dnat("iptables", 8443, onSecondary, local...) // hostPort, as portmap writes it
	// externalTrafficPolicy: Cluster: kube-proxy marks, DNATs, masquerades.
	nat("iptables", "-A", "PREROUTING", "-d", node.String(), "-p", "tcp", "--dport", "30083", "-j", "MARK", "--set-xmark", "0x4000/0x4000")
	dnat("iptables", 30083, onSecondary, toNode...)
	nat("iptables", "-A", "POSTROUTING", "-m", "mark", "--mark", "0x4000/0x4000", "-j", "MASQUERADE")
	at := func(a netip.Addr, p uint16) netip.AddrPort { return netip.AddrPortFrom(a, p) }
	cases := []nodePortCase{
		{name: "NodePort to the secondary ENI's pod", to: at(node, 30080), pod: onSecondary, viaNode: true, secondary: true},
		{name: "NodePort to the primary ENI's pod", to: at(node, 30081), pod: onPrimary, viaNode: true},
		{name: "hostPort to the secondary ENI's pod", to: at(node, 8443), pod: onSecondary, viaNode: true, secondary: true},
		{name: "NodePort with masquerade to the secondary ENI's pod", to: at(node, 30083), pod: onSecondary, viaNode: true, masq: true, secondary: true},
		{name: "straight to the secondary ENI's pod", to: at(onSecondary.ip, podPort), pod: onSecondary, secondary: true},
		{name: "straight to the primary ENI's pod", to: at(onPrimary.ip, podPort), pod: onPrimary},
	}
	if _, err := exec.LookPath("iptables-legacy"); err != nil {
		t.Log("iptables-legacy not installed: no NodePort through xtables")
		return cases
	}
	dnat("iptables-legacy", 30082, onSecondary, toNode...)
	return append(cases, nodePortCase{name: "NodePort (iptables-legacy) to the secondary ENI's pod", to: at(node, 30082), pod: onSecondary, viaNode: true, secondary: true})
}
