package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// The simulated VPC of the EC2 tests. Like every address of the package it
// lives only inside namespaces the tests create (10.98.0.0/16 is a pool
// range in doc.go).
const (
	ec2VPCCIDR     = "10.98.0.0/16"
	ec2SubnetCIDR  = "10.98.0.0/20"       // the primary ENI's subnet
	ec2Subnet2CIDR = "10.98.16.0/20"      // a second subnet, for ENIs created elsewhere
	ec2Unreachable = "http://127.0.0.1:1" // nothing listens there in a fresh node namespace
	ec2MTU         = 9001                 // not a veth's default 1500, so we see that the plugin set it
	ec2Type        = "t3.medium"          // 3 ENIs x 6 IPv4 slots: 5 secondary addresses per ENI
)

// ec2Creds are the dummy static credentials `warm` gets, so the SDK never
// asks IMDS for an instance role (or anything real for anything).
var ec2Creds = map[string]string{"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}

// ec2Node is a node namespace on a simulated EC2 instance: the fake IMDS +
// EC2 server listens on 127.0.0.1 *inside* the node namespace (loopback is
// per namespace, and the plugin runs in the node's), and each ENI the fake
// attaches gets a link on the node carrying the ENI's MAC: a veth whose
// peer sits in a throwaway "vpc" namespace (this kernel has no dummy links).
type ec2Node struct {
	*node
	fake *ec2fake.Server
	vpc  *netNS

	mu    sync.Mutex
	links map[string]string // MAC -> link name on the node
}

// newEC2Node starts the fake in-process: the listening socket is created
// while the thread is in the node namespace (ns.Do) and stays there; the
// goroutines serving it run anywhere. The test keeps the fake's hooks
// (faults, call counts, seeding). Closed in t.Cleanup before the namespace
// goes (cleanups run in reverse order).
func newEC2Node(t *testing.T, cfg ec2fake.Config) *ec2Node {
	t.Helper()
	n := newNode(t)
	en := &ec2Node{node: n, vpc: newNetNS(t), links: map[string]string{}}
	if cfg.InstanceType == "" {
		cfg.InstanceType = ec2Type
	}
	if len(cfg.VPCCIDRs) == 0 {
		cfg.VPCCIDRs = []string{ec2VPCCIDR}
	}
	if len(cfg.Subnets) == 0 {
		cfg.Subnets = []ec2fake.SubnetConfig{{CIDR: ec2SubnetCIDR}}
	}
	fake, err := ec2fake.New(cfg)
	if err != nil {
		t.Fatalf("ec2fake: %v", err)
	}
	if err := n.ns.Do(func(ns.NetNS) error { return fake.Start() }); err != nil {
		t.Fatalf("start ec2fake in the node namespace: %v", err)
	}
	t.Cleanup(fake.Close)
	en.fake = fake
	return en
}

// url is the fake's one URL for IMDS and EC2, valid inside the node namespace.
func (en *ec2Node) url() string { return en.fake.URL() }

// primaryLink gives the node its primary ENI as a real node has it: a link
// with the ENI's MAC, its primary address on the subnet and the main
// table's default route via the subnet's router. Returns the link name.
func (en *ec2Node) primaryLink(t *testing.T) string {
	t.Helper()
	e := en.fake.PrimaryENI()
	name := en.addENILink(t, e)
	link, err := en.h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := en.h.LinkSetUp(link); err != nil {
		t.Fatalf("set %s up: %v", name, err)
	}
	cidr := netip.MustParsePrefix(e.SubnetCIDR)
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(e.PrimaryIP).To4(), Mask: net.CIDRMask(cidr.Bits(), 32)}}
	if err := en.h.AddrAdd(link, addr); err != nil {
		t.Fatalf("add %s to %s: %v", addr, name, err)
	}
	gw := cidr.Addr().Next()
	if err := en.h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
		t.Fatalf("default via %s dev %s: %v", gw, name, err)
	}
	return name
}

// addENILink creates the node's link of ENI e (ens<5+device>, peer in the
// vpc namespace, both up) and returns its name. The plugin finds it by MAC.
func (en *ec2Node) addENILink(t *testing.T, e ec2fake.ENI) string {
	t.Helper()
	en.mu.Lock()
	defer en.mu.Unlock()
	if name, ok := en.links[e.MAC]; ok {
		return name
	}
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		t.Fatalf("ENI %s MAC %q: %v", e.ID, e.MAC, err)
	}
	name := fmt.Sprintf("ens%d", 5+e.DeviceIndex)
	vpcNS, err := netns.GetFromPath(en.vpc.path())
	if err != nil {
		t.Fatal(err)
	}
	defer vpcNS.Close()
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac},
		PeerName:  name + "p", PeerNamespace: netlink.NsFd(vpcNS),
	}
	if err := en.h.LinkAdd(veth); err != nil {
		t.Fatalf("create link %s (MAC %s) of %s: %v", name, e.MAC, e.ID, err)
	}
	vh := openHandle(t, en.vpc.path())
	defer vh.Close()
	peer, err := vh.LinkByName(name + "p")
	if err == nil {
		err = vh.LinkSetUp(peer)
	}
	if err != nil {
		t.Fatalf("set %sp up in the vpc namespace: %v", name, err)
	}
	// The node end stays down as after a real attach: the plugin sets it up.
	en.links[e.MAC] = name
	return name
}

// linkOf returns the name of ENI id's link on the node.
func (en *ec2Node) linkOf(t *testing.T, id string) string {
	t.Helper()
	e, ok := en.fake.ENI(id)
	if !ok {
		t.Fatalf("the fake has no ENI %s", id)
	}
	en.mu.Lock()
	defer en.mu.Unlock()
	name, ok := en.links[e.MAC]
	if !ok {
		t.Fatalf("ENI %s (%s) has no link on the node", id, e.MAC)
	}
	return name
}

// eniOf maps every address EC2 has assigned to the ENI holding it.
func (en *ec2Node) eniOf() map[netip.Addr]ec2fake.ENI {
	out := map[netip.Addr]ec2fake.ENI{}
	for _, e := range en.fake.ENIs() {
		for _, s := range e.SecondaryIPs {
			out[netip.MustParseAddr(s)] = e
		}
	}
	return out
}

// attached returns the ENIs attached to the instance, by device index.
func (en *ec2Node) attached() []ec2fake.ENI {
	var out []ec2fake.ENI
	for _, e := range en.fake.ENIs() {
		if e.DeviceIndex >= 0 {
			out = append(out, e)
		}
	}
	return out
}

// newEC2Network is an eni-cni network with pool.source ec2 pointed at the
// fake through the config keys imdsEndpoint/ec2Endpoint. pool are extra
// keys of "pool" (warmIPTarget, ...); extra are top-level keys.
func newEC2Network(t *testing.T, en *ec2Node, cniVersion string, pool, extra map[string]any) *network {
	t.Helper()
	p := map[string]any{"source": "ec2"}
	for k, v := range pool {
		p[k] = v
	}
	top := map[string]any{"pool": p, "mtu": ec2MTU, "imdsEndpoint": en.url(), "ec2Endpoint": en.url()}
	for k, v := range extra {
		top[k] = v
	}
	return newNetwork(t, en.node, cniVersion, nil, top)
}

// setConf changes the network's config, file included, for later calls.
func (nw *network) setConf(t *testing.T, mod func(map[string]any)) {
	t.Helper()
	nw.conf = mapOf(t, nw.config(t, mod))
	if err := os.WriteFile(nw.confFile, nw.config(t), 0o644); err != nil {
		t.Fatal(err)
	}
}

// withConf returns the network with a modified copy of its config in its
// own file: same name and state, for calls that must not see the change.
func (nw *network) withConf(t *testing.T, mod func(map[string]any)) *network {
	t.Helper()
	c := *nw
	c.conf = mapOf(t, nw.config(t, mod))
	c.confFile = filepath.Join(t.TempDir(), "eni-cni.conf")
	if err := os.WriteFile(c.confFile, c.config(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return &c
}

func mapOf(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// warm runs `eni-cni warm --config F` on the node with dummy credentials.
func (nw *network) warm(t *testing.T) output {
	t.Helper()
	o, err := runIn(t.Context(), nw.node.path(), ec2Creds, nil, pluginBin, "warm", "--config", nw.confFile)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// mustWarm runs warm and wants exit 0.
func (nw *network) mustWarm(t *testing.T) output {
	t.Helper()
	o := nw.warm(t)
	if o.exit != 0 {
		t.Fatalf("eni-cni warm: want exit 0, got %s", o)
	}
	return o
}

// warmAttaching runs warm while playing the part of the hypervisor: each
// ENI the fake attaches gets its link on the node (warm waits for it, up
// to 60 s, then sets it up). Returns warm's output and the links made.
func (en *ec2Node) warmAttaching(t *testing.T, nw *network) (output, []string) {
	t.Helper()
	type result struct {
		o   output
		err error
	}
	done := make(chan result, 1)
	go func() {
		o, err := runIn(t.Context(), nw.node.path(), ec2Creds, nil, pluginBin, "warm", "--config", nw.confFile)
		done <- result{o, err}
	}()
	var made []string
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, e := range en.attached() {
			en.mu.Lock()
			_, have := en.links[e.MAC]
			en.mu.Unlock()
			if !have {
				made = append(made, en.addENILink(t, e))
			}
		}
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatal(r.err)
			}
			return r.o, made
		case <-tick.C:
		}
	}
}

// callsDelta is how many calls of each EC2 action the fake got since before.
func callsDelta(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func formatCalls(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// ---------------------------------------------------------------- node checks

// assertNoPods is assertNoAttachments for a node whose ENI links are veths
// too: no veth but those, no /32 route in main, no rule at our priorities.
func (en *ec2Node) assertNoPods(t *testing.T) {
	t.Helper()
	en.mu.Lock()
	eniLinks := map[string]bool{}
	for _, name := range en.links {
		eniLinks[name] = true
	}
	en.mu.Unlock()
	en.assertNoAttachmentsBut(t, eniLinks)
}

// fromRule returns the node's `from IP lookup T` rule at priority 1536.
func (n *node) fromRule(t *testing.T, ip netip.Addr) (netlink.Rule, bool) {
	t.Helper()
	for _, r := range n.podRules(t) {
		if r.Priority == rulePrioFromPod && r.Src != nil && r.Src.String() == ip.String()+"/32" {
			return r, true
		}
	}
	return netlink.Rule{}, false
}

// tableRoutes returns the routes of a policy-routing table as "dst dev gw".
func (n *node) tableRoutes(t *testing.T, table int) []string {
	t.Helper()
	routes := dump(t, fmt.Sprintf("routes of table %d", table), func() ([]netlink.Route, error) {
		return n.h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	})
	var out []string
	for _, r := range routes {
		dst := "default"
		if r.Dst != nil && r.Dst.String() != "0.0.0.0/0" {
			dst = r.Dst.String()
		}
		dev := fmt.Sprintf("if%d", r.LinkIndex)
		if l, err := n.h.LinkByIndex(r.LinkIndex); err == nil {
			dev = l.Attrs().Name
		}
		s := dst + " dev " + dev
		if r.Gw != nil {
			s = dst + " via " + r.Gw.String() + " dev " + dev
		}
		out = append(out, s)
	}
	return out
}

// assertENITable checks what EnsureENI promises for a secondary ENI: its
// link up with the configured MTU and loose rp_filter, and its table
// holding `<subnet> dev <link> scope link` and `default via <subnet .1>`.
func (en *ec2Node) assertENITable(t *testing.T, link string, table int, subnet netip.Prefix) {
	t.Helper()
	l, err := en.h.LinkByName(link)
	if err != nil {
		t.Fatalf("ENI link %s: %v", link, err)
	}
	if l.Attrs().Flags&net.FlagUp == 0 || l.Attrs().MTU != ec2MTU {
		t.Errorf("ENI link %s: up %t, mtu %d; want up with mtu %d", link, l.Attrs().Flags&net.FlagUp != 0, l.Attrs().MTU, ec2MTU)
	}
	if rp := en.sysctl(t, "net/ipv4/conf/"+link+"/rp_filter"); rp != "2" {
		t.Errorf("ENI link %s: rp_filter %s, want 2 (loose)", link, rp)
	}
	gw := subnet.Masked().Addr().Next()
	want := map[string]bool{subnet.Masked().String() + " dev " + link: false, "default via " + gw.String() + " dev " + link: false}
	got := en.tableRoutes(t, table)
	for _, r := range got {
		if _, ok := want[r]; ok {
			want[r] = true
		}
	}
	for r, ok := range want {
		if !ok {
			t.Errorf("table %d: no route %q; has %q", table, r, got)
		}
	}
	routes := dump(t, "table routes", func() ([]netlink.Route, error) {
		return en.h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	})
	for _, r := range routes {
		if r.Dst != nil && r.Dst.String() == subnet.Masked().String() && r.Scope != netlink.SCOPE_LINK {
			t.Errorf("table %d: subnet route %s has scope %s, want link", table, r.Dst, r.Scope)
		}
	}
}

// sysctl reads /proc/sys/<key> as seen from the node namespace.
func (n *node) sysctl(t *testing.T, key string) string {
	t.Helper()
	var v []byte
	err := n.ns.Do(func(ns.NetNS) error {
		var err error
		v, err = os.ReadFile("/proc/sys/" + key)
		return err
	})
	if err != nil {
		t.Fatalf("read %s in the node namespace: %v", key, err)
	}
	return strings.TrimSpace(string(v))
}

// routeGet asks the node's kernel how it would forward a packet from src
// arriving on iif to dst: `ip route get`'s answer.
func (n *node) routeGet(t *testing.T, dst, src netip.Addr, iif string) string {
	t.Helper()
	o, err := runIn(t.Context(), n.path(), nil, nil, "ip", "-4", "route", "get", dst.String(), "from", src.String(), "iif", iif)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(o.stdout) + string(o.stderr))
}

// ---------------------------------------------------------------- the ec2fake command

// ec2fakeCmd is the ec2fake command running inside a node namespace.
type ec2fakeCmd struct {
	url, describe string
	cmd           *exec.Cmd
}

// ec2fakeDescription is the part of the --describe file the tests read.
type ec2fakeDescription struct {
	IMDSURL string         `json:"imdsURL"`
	EC2URL  string         `json:"ec2URL"`
	ENIs    []ec2fake.ENI  `json:"enis"`
	Calls   map[string]int `json:"calls"`
}

// startEC2FakeCmd builds the ec2fake command and starts it inside the node
// namespace with args, reading its URL from stdout. Killed by PID in
// t.Cleanup.
func startEC2FakeCmd(t *testing.T, n *node, args ...string) *ec2fakeCmd {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "ec2fake")
	build := exec.Command("go", "build", "-o", bin, "github.com/eni-cni/eni-cni/ec2/ec2fake/cmd/ec2fake")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ec2fake: %v\n%s", err, out)
	}
	f := &ec2fakeCmd{describe: filepath.Join(dir, "ec2.json")}
	f.cmd = exec.Command("nsenter", append([]string{"--net=" + n.path(), "--", bin, "--describe", f.describe, "--listen", "127.0.0.1:0"}, args...)...)
	f.cmd.Stderr = os.Stderr
	stdout, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		t.Fatalf("start ec2fake: %v", err)
	}
	t.Cleanup(func() {
		// nsenter execs ec2fake (no fork for a net namespace): this PID is
		// the fake. SIGTERM lets it stop its listener; SIGKILL if it hangs.
		_ = f.cmd.Process.Signal(syscall.SIGTERM)
		waited := make(chan error, 1)
		go func() { waited <- f.cmd.Wait() }()
		select {
		case <-waited:
		case <-time.After(5 * time.Second):
			_ = f.cmd.Process.Kill()
			<-waited
		}
	})
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok || !strings.HasPrefix(l, "http://127.0.0.1:") {
			t.Fatalf("ec2fake printed %q, want its URL", l)
		}
		f.url = l
	case <-time.After(30 * time.Second):
		t.Fatal("ec2fake printed no URL within 30s")
	}
	go func() {
		for range lines { // keep the pipe drained
		}
	}()
	return f
}

func (f *ec2fakeCmd) read(t *testing.T) ec2fakeDescription {
	t.Helper()
	var d ec2fakeDescription
	b, err := os.ReadFile(f.describe)
	if err == nil {
		err = json.Unmarshal(b, &d)
	}
	if err != nil {
		t.Fatalf("read %s: %v", f.describe, err)
	}
	return d
}
