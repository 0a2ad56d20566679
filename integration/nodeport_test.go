package integration

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
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

// nodePortRig is a node on the VPC fabric with a pod on each ENI serving
// TCP, and the ways in to them kube-proxy and portmap would make.
type nodePortRig struct {
	en                       *ec2Node
	nw                       *network
	f                        *vpcFabric
	primaryLink, secLink     string
	node                     netip.Addr // the primary ENI's address
	onPrimary, onSecondary   *ec2Pod
	cases                    []nodePortCase
	stops                    []func()
	primaryPort, secPort     string // the router's ends of the ENI links
	primaryENI, secondaryENI ec2fake.ENI
}

const nodePortPodPort = 8080

// newNodePortRig makes the node with its two ENIs, runs the first warm
// pass (its output returned), then before (the test's chance to change the
// node between warm and the ADDs) and ADDs pods until one is on each ENI,
// calling added after each.
func newNodePortRig(t *testing.T, before func(r *nodePortRig), added func(r *nodePortRig, a ec2Pod)) (*nodePortRig, output) {
	t.Helper()
	r := &nodePortRig{en: newEC2Node(t, ec2fake.Config{})}
	en := r.en
	r.primaryENI = en.fake.PrimaryENI()
	if _, err := en.fake.SeedIPs(r.primaryENI.ID, 2); err != nil {
		t.Fatal(err)
	}
	sec, err := en.fake.SeedENI(ec2fake.ENISpec{SecondaryIPCount: 2, DeleteOnTermination: true})
	if err != nil {
		t.Fatal(err)
	}
	r.secondaryENI = sec
	r.primaryLink, r.secLink = en.primaryLink(t), en.addENILink(t, sec)
	r.primaryPort, r.secPort = r.primaryLink+"p", r.secLink+"p"
	r.nw = newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": 4}, nil)
	warm := r.nw.mustWarm(t)
	if before != nil {
		before(r)
	}
	for _, p := range newPods(t, 4) {
		a := en.addEC2(t, r.nw, p)
		if added != nil {
			added(r, a)
		}
		switch {
		case a.eni.ID == r.primaryENI.ID && r.onPrimary == nil:
			r.onPrimary = &a
		case a.eni.ID == sec.ID && r.onSecondary == nil:
			assertSecondaryPod(t, en.node, a)
			r.onSecondary = &a
		}
	}
	if r.onPrimary == nil || r.onSecondary == nil {
		t.Fatalf("no pod on each ENI (primary %v, secondary %v); ENIs %+v", r.onPrimary, r.onSecondary, en.fake.ENIs())
	}
	r.f = newVPCFabric(t, en)
	// rp_filter off on the node: only the VPC may drop a reply here (the
	// namespace inherits the machine's values). Loose on the ENIs is the
	// plugin's.
	sysctls(t, en.path(), "net.ipv4.conf.all.rp_filter=0")
	r.node = netip.MustParseAddr(r.primaryENI.PrimaryIP)
	r.serve(t)
	r.cases = kubeProxyRules(t, en, r.node, *r.onPrimary, *r.onSecondary, nodePortPodPort)
	return r, warm
}

// serve (re)starts the pods' servers: new listeners, so half-open
// connections of an earlier phase go.
func (r *nodePortRig) serve(t *testing.T) {
	t.Helper()
	for _, stop := range r.stops {
		stop()
	}
	r.stops = nil
	for _, a := range []*ec2Pod{r.onPrimary, r.onSecondary} {
		r.stops = append(r.stops, serveTCP(t, a.pod.path(), nodePortPodPort))
	}
}

// try connects through c and checks the outcome: wantOK, the server saw
// the client (or the node, masqueraded), nothing dropped, the replies came
// from the right ENI; or the connection failed.
func (r *nodePortRig) try(t *testing.T, phase string, c nodePortCase, wantOK bool) {
	t.Helper()
	f := r.f
	before5, _ := f.counters(t, r.primaryPort)
	before6, drops6 := f.counters(t, r.secPort)
	line, err := dialTCP(f.client.path(), c.to)
	after5, _ := f.counters(t, r.primaryPort)
	after6, nowDrops6 := f.counters(t, r.secPort)
	if !wantOK {
		if err == nil {
			t.Errorf("%s: %s worked (%q); want the reply dropped by the VPC", phase, c.name, line)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: %s: %v (router drops on %s: %d)", phase, c.name, err, r.secPort, nowDrops6)
		return
	}
	// The server saw the client, or the node when it masquerades.
	local, remote, _ := strings.Cut(line, " ")
	fromClient := strings.HasPrefix(remote, f.clientIP.String()+":")
	if local != netip.AddrPortFrom(c.pod.ip, nodePortPodPort).String() || fromClient == c.masq {
		t.Errorf("%s: %s: server says %q, want %s:%d seeing the client (%s) unless masqueraded (%t)", phase, c.name, line, c.pod.ip, nodePortPodPort, f.clientIP, c.masq)
	}
	if nowDrops6 != drops6 {
		t.Errorf("%s: %s worked but the VPC dropped %d packets from %s", phase, c.name, nowDrops6-drops6, r.secLink)
	}
	// Where the replies left: the node's address through the primary
	// ENI, or the pod's own through its ENI.
	port, src, counts := r.primaryPort, r.node, [2]map[netip.Prefix]int{before5, after5}
	if !c.viaNode {
		src = c.pod.ip
		if c.secondary {
			port, counts = r.secPort, [2]map[netip.Prefix]int{before6, after6}
		}
	}
	if k := netip.PrefixFrom(src, 32); counts[1][k] <= counts[0][k] {
		t.Errorf("%s: %s: no reply from %s came in from %s", phase, c.name, src, port)
	}
}

// all tries every way in: all work, or (broken) those through the node to
// the secondary ENI's pod fail, and the VPC counts their dropped replies.
func (r *nodePortRig) all(t *testing.T, phase string, broken bool) {
	t.Helper()
	r.serve(t)
	_, drops := r.f.counters(t, r.secPort)
	for _, c := range r.cases {
		r.try(t, phase, c, !(broken && c.viaNode && c.secondary))
	}
	_, now := r.f.counters(t, r.secPort)
	switch {
	case broken && now <= drops:
		t.Errorf("%s: the VPC dropped nothing from %s (%d before, %d after)", phase, r.secLink, drops, now)
	case broken:
		t.Logf("%s: the VPC dropped %d packets from %s", phase, now-drops, r.secLink)
	case now != drops:
		t.Errorf("%s: the VPC dropped %d packets from %s", phase, now-drops, r.secLink)
	}
}

// marking reports whether the node holds the chain or the fwmark rule.
func (r *nodePortRig) marking(t *testing.T) bool {
	t.Helper()
	var present bool
	err := r.en.ns.Do(func(ns.NetNS) (err error) { present, err = connmark.Present(); return err })
	if err != nil {
		t.Fatalf("connmark.Present: %v", err)
	}
	return present
}

// unmark takes the marking away, as a reboot or a flushed node does.
func (r *nodePortRig) unmark(t *testing.T) {
	t.Helper()
	if err := r.en.ns.Do(func(ns.NetNS) error { _, err := connmark.Remove(); return err }); err != nil {
		t.Fatalf("connmark.Remove: %v", err)
	}
}

// TestNodePortToSecondaryENI is the data path of issue 17 on the VPC
// fabric, through the binary: a connection that enters the primary ENI for
// a node port and is DNATed to a pod on a secondary ENI must be answered
// through the primary ENI. `eni-cni warm` sets up the connection marking
// (its first pass) and puts it back whatever part is lost (the whole of
// it, strict rp_filter, a flushed mangle chain); without it the reply
// follows the pod's `from` rule out of the secondary ENI with the
// primary's address and the VPC drops it (counted). `eni-cni uninstall`
// removes it, and the drops come back.
func TestNodePortToSecondaryENI(t *testing.T) {
	r, first := newNodePortRig(t, nil, nil)
	if !strings.Contains(string(first.stdout), "warm: set up nodeport: chain "+connmark.Chain) {
		t.Errorf("the first warm pass did not report the marking set up:\n%s", first.stdout)
	}
	if strings.Contains(string(first.stdout), "put back: nodeport") {
		t.Errorf("the first warm pass on a new node warns of a lost marking (it set it up):\n%s", first.stdout)
	}
	r.all(t, "set up by warm", false)
	for _, to := range []netip.Addr{r.node, r.onSecondary.ip} {
		o, err := runIn(t.Context(), r.f.client.path(), nil, nil, "ping", "-c1", "-W1", "-M", "do", "-s", "8972", to.String())
		if err != nil || o.exit != 0 {
			t.Errorf("ping with 9000-byte packets, DF set, to %s: %v %s", to, err, o)
		}
	}

	r.unmark(t)
	r.all(t, "without the marking", true)
	// All of it gone is what a reboot leaves: set up again, no warning;
	// part of it gone is a loss that warm warns of as it puts it back.
	warmSays := func(what, says, want string) {
		t.Helper()
		o := r.nw.mustWarm(t)
		if !strings.Contains(string(o.stdout), says) || !strings.Contains(string(o.stdout), want) {
			t.Errorf("warm after %s: output lacks %q and %q:\n%s", what, says, want, o.stdout)
		}
	}
	warm := func(what string, want string) { t.Helper(); warmSays(what, "put back: nodeport: ", want) }
	warmSays("the marking was removed", "warm: set up nodeport: ", "ip rule fwmark 0x80/0x80 lookup main")
	r.all(t, "put back by warm", false)

	// Strict rp_filter on the primary ENI drops the DNATed first packet on
	// the node (its source routes out of the secondary ENI by the pod's
	// rule): the VPC sees nothing. warm puts loose back.
	sysctls(t, r.en.path(), "net.ipv4.conf."+r.primaryLink+".rp_filter=1")
	nodePort := r.cases[0]
	_, drops := r.f.counters(t, r.secPort)
	r.try(t, "strict rp_filter", nodePort, false)
	if _, now := r.f.counters(t, r.secPort); now != drops {
		t.Errorf("strict rp_filter: the VPC dropped %d packets; want the node to drop them", now-drops)
	}
	warm("strict rp_filter", "loose rp_filter on "+r.primaryLink)
	r.try(t, "rp_filter put back", nodePort, true)

	// A flushed mangle chain, the rule still in place: warm's every-pass
	// look sees it too.
	r.en.sh(t, "iptables", "-t", "mangle", "-F", connmark.Chain)
	r.all(t, "mangle chain flushed", true)
	warm("a flushed mangle chain", "chain "+connmark.Chain)
	r.all(t, "chain put back by warm", false)
	if o := r.nw.mustWarm(t); strings.Contains(string(o.stdout), "nodeport") {
		t.Errorf("a warm pass on a settled node spoke of the marking:\n%s", o.stdout)
	}

	// uninstall removes it. It uninstalls here a network that does not
	// know these pods (a static one, its own veth prefix), so that their
	// wiring stays and the data path shows the marking gone.
	root := t.TempDir()
	confDir := filepath.Join(root, "etc/cni/net.d")
	conf := `{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"eni-cni","stateDir":"/state","hostVethPrefix":"zzz","pool":{"source":"static","ranges":["10.97.250.0/29"]}}]}`
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "10-eni-cni.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := runIn(t.Context(), r.en.path(), nil, nil, pluginBin, "uninstall", "--root", root, "--activate", "--no-ec2")
	if err != nil || o.exit != 0 {
		t.Fatalf("uninstall: %v %s", err, o)
	}
	if !strings.Contains(string(o.stdout), "remove the NodePort marking") || r.marking(t) {
		t.Errorf("uninstall left the marking (present %t):\n%s", r.marking(t), o.stdout)
	}
	r.all(t, "after uninstall", true)
	if d := r.f.drops(t)[r.primaryPort]; d != 0 {
		t.Errorf("the VPC dropped %d packets from the primary ENI %s", d, r.primaryLink)
	}
}

// TestNodePortSetUpByFirstADD: after a reboot the marking is gone and no
// warm pass may have run yet; the first ADD of the boot of a pod on a
// secondary ENI sets it up (a pod on the primary ENI needs none and does
// not), and a NodePort to that pod works before any warm pass.
func TestNodePortSetUpByFirstADD(t *testing.T) {
	var rebooted, primaryFirst bool
	var secondaryADDs int
	r, _ := newNodePortRig(t, func(r *nodePortRig) {
		// "Reboot": the marking goes with the kernel, the store remembers
		// another boot.
		r.unmark(t)
		var st map[string]any
		if err := json.Unmarshal(r.nw.stateBytes(t), &st); err != nil {
			t.Fatal(err)
		}
		st["bootID"] = "a-previous-boot"
		b, _ := json.Marshal(st)
		if err := os.WriteFile(r.nw.statePath(), b, 0o600); err != nil {
			t.Fatal(err)
		}
		rebooted = true
	}, func(r *nodePortRig, a ec2Pod) {
		if a.eni.ID != r.primaryENI.ID {
			secondaryADDs++
			return
		}
		if secondaryADDs == 0 {
			primaryFirst = true
			if r.marking(t) {
				t.Errorf("the ADD of %s on the primary ENI set the marking up", a.ip)
			}
		}
	})
	if !rebooted || !primaryFirst {
		t.Errorf("rebooted %t; a pod on the primary ENI before any on the secondary %t", rebooted, primaryFirst)
	}
	if !r.marking(t) {
		t.Fatal("the first ADD of a pod on the secondary ENI did not set the marking up")
	}
	r.all(t, "set up by the first ADD", false)
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
