package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Addresses of the contract (docs/ARCHITECTURE.md, Networking).
const (
	nodeAddr        = "10.97.0.1/32" // on the node namespace's lo: source of node->pod pings
	gatewayIP       = "169.254.1.1"
	rulePrioToPod   = 512
	rulePrioFromPod = 1536
	vethPrefix      = "eni"
	maxIfNameLen    = 15
)

// execTimeout bounds one exec of the plugin or a tool, so a hang fails the
// test instead of eating the package's whole time budget.
const execTimeout = 60 * time.Second

func randHex(nbytes int) string {
	b := make([]byte, nbytes)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// ---------------------------------------------------------------- namespaces

// netNS is a bind-mounted network namespace (cnitest-<random> under
// /var/run/netns) that the test created and removes in t.Cleanup.
type netNS struct {
	ns   ns.NetNS
	once sync.Once
	err  error
}

func newNetNS(t *testing.T) *netNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create network namespace: %v", err)
	}
	x := &netNS{ns: n}
	t.Cleanup(func() {
		if err := x.remove(); err != nil {
			t.Errorf("remove network namespace %s: %v", x.path(), err)
		}
	})
	return x
}

func (n *netNS) path() string { return n.ns.Path() }

// remove deletes the namespace; safe to call more than once.
func (n *netNS) remove() error {
	n.once.Do(func() {
		n.err = errors.Join(n.ns.Close(), testutils.UnmountNS(n.ns))
	})
	return n.err
}

// openHandle returns a netlink handle acting in the namespace at path.
func openHandle(t *testing.T, path string) *netlink.Handle {
	t.Helper()
	nsh, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatalf("open namespace %s: %v", path, err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", path, err)
	}
	return h
}

// node is the "host" network namespace the plugin runs in, standing in for
// the machine's root namespace, which the tests never touch.
type node struct {
	*netNS
	h *netlink.Handle
}

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{netNS: newNetNS(t)}
	n.h = openHandle(t, n.path())
	t.Cleanup(n.h.Close)
	lo, err := n.h.LinkByName("lo")
	if err != nil {
		t.Fatalf("node lo: %v", err)
	}
	if err := n.h.LinkSetUp(lo); err != nil {
		t.Fatalf("set node lo up: %v", err)
	}
	addr, err := netlink.ParseAddr(nodeAddr)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.h.AddrAdd(lo, addr); err != nil {
		t.Fatalf("add %s to node lo: %v", nodeAddr, err)
	}
	// A new namespace inherits ip_forward from the machine's root namespace,
	// where a container runtime has usually turned it on; a fresh node has
	// it off, and the plugin must turn it on for pod-to-pod traffic.
	err = n.ns.Do(func(ns.NetNS) error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("0"), 0o644)
	})
	if err != nil {
		t.Fatalf("turn off ip_forward in the node namespace: %v", err)
	}
	return n
}

// dump repeats a netlink dump that the kernel reports as interrupted.
func dump[T any](t *testing.T, what string, f func() ([]T, error)) []T {
	t.Helper()
	var err error
	for range 10 {
		var out []T
		out, err = f()
		if errors.Is(err, netlink.ErrDumpInterrupted) {
			continue
		}
		if err != nil {
			break
		}
		return out
	}
	t.Fatalf("list %s: %v", what, err)
	return nil
}

// veths returns the node's veth links by name.
func (n *node) veths(t *testing.T) map[string]netlink.Link {
	t.Helper()
	out := map[string]netlink.Link{}
	for _, l := range dump(t, "node links", n.h.LinkList) {
		if l.Type() == "veth" {
			out[l.Attrs().Name] = l
		}
	}
	return out
}

func (n *node) vethNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for name := range n.veths(t) {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// mainRoutes returns the IPv4 routes of the node's main table.
func (n *node) mainRoutes(t *testing.T) []netlink.Route {
	t.Helper()
	return dump(t, "node routes", func() ([]netlink.Route, error) {
		return n.h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
}

// podRules returns the node's rules at the priorities eni-cni uses.
func (n *node) podRules(t *testing.T) []netlink.Rule {
	t.Helper()
	var out []netlink.Rule
	for _, r := range dump(t, "node rules", func() ([]netlink.Rule, error) { return n.h.RuleList(netlink.FAMILY_V4) }) {
		if r.Priority == rulePrioToPod || r.Priority == rulePrioFromPod {
			out = append(out, r)
		}
	}
	return out
}

// hostRouteTo returns the main-table route IP/32 and the name of its device.
func (n *node) hostRouteTo(t *testing.T, ip netip.Addr) (netlink.Route, string, bool) {
	t.Helper()
	want := ip.String() + "/32"
	for _, r := range n.mainRoutes(t) {
		if r.Dst != nil && r.Dst.String() == want {
			dev := fmt.Sprintf("ifindex %d", r.LinkIndex)
			if l, err := n.h.LinkByIndex(r.LinkIndex); err == nil {
				dev = l.Attrs().Name
			}
			return r, dev, true
		}
	}
	return netlink.Route{}, "", false
}

// assertNoAttachments fails unless the node has no veth, no /32 route in
// main and no rule at eni-cni's priorities: everything DEL must remove.
func (n *node) assertNoAttachments(t *testing.T) {
	t.Helper()
	n.assertNoAttachmentsBut(t, nil)
}

// assertNoAttachmentsBut is assertNoAttachments on a node that also has
// veths of its own (simulated ENI links), named in keep.
func (n *node) assertNoAttachmentsBut(t *testing.T, keep map[string]bool) {
	t.Helper()
	for _, v := range n.vethNames(t) {
		if !keep[v] {
			t.Errorf("node still has veth %s, want none but %v", v, keep)
		}
	}
	for _, r := range n.mainRoutes(t) {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones == 32 {
				t.Errorf("node still has host route %s (ifindex %d), want none", r.Dst, r.LinkIndex)
			}
		}
	}
	for _, r := range n.podRules(t) {
		t.Errorf("node still has rule %s, want none at priorities %d/%d", r, rulePrioToPod, rulePrioFromPod)
	}
}

// assertNoHostSide fails if the node has anything for ip or hostVeth.
func (n *node) assertNoHostSide(t *testing.T, ip netip.Addr, hostVeth string) {
	t.Helper()
	if _, ok := n.veths(t)[hostVeth]; ok {
		t.Errorf("host veth %s still exists", hostVeth)
	}
	if _, dev, ok := n.hostRouteTo(t, ip); ok {
		t.Errorf("host route %s/32 dev %s still exists", ip, dev)
	}
	for _, r := range n.podRules(t) {
		if (r.Dst != nil && r.Dst.String() == ip.String()+"/32") || (r.Src != nil && r.Src.String() == ip.String()+"/32") {
			t.Errorf("rule %s for %s still exists", r, ip)
		}
	}
}

// ---------------------------------------------------------------- pods

// pod is a sandbox: its own network namespace and the identity a runtime
// gives the plugin for it.
type pod struct {
	*netNS
	containerID string
	ifName      string
	namespace   string
	name        string
	uid         string
}

func newPod(t *testing.T, name string) *pod {
	t.Helper()
	u := randHex(16)
	return &pod{
		netNS:       newNetNS(t),
		containerID: randHex(32), // 64 hex digits, like containerd's sandbox IDs
		ifName:      "eth0",
		namespace:   "eni-it",
		name:        name,
		uid:         u[0:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:32],
	}
}

func newPods(t *testing.T, n int) []*pod {
	t.Helper()
	pods := make([]*pod, n)
	for i := range pods {
		pods[i] = newPod(t, fmt.Sprintf("pod-%02d", i))
	}
	return pods
}

func (p *pod) cniArgs() string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", p.namespace, p.name, p.uid)
}

// links returns the names of the links in the pod's namespace.
func (p *pod) links(t *testing.T) []string {
	t.Helper()
	h := openHandle(t, p.path())
	defer h.Close()
	var names []string
	for _, l := range dump(t, "pod links", h.LinkList) {
		names = append(names, l.Attrs().Name)
	}
	sort.Strings(names)
	return names
}

// assertUnwired fails if the pod has anything but lo.
func (p *pod) assertUnwired(t *testing.T) {
	t.Helper()
	if l := p.links(t); len(l) != 1 || l[0] != "lo" {
		t.Errorf("pod %s has links %v, want only lo", p.name, l)
	}
}

// ---------------------------------------------------------------- network config

// network is one eni-cni network: a plugin config with its own state dir,
// used on one node.
type network struct {
	node     *node
	name     string
	stateDir string
	conf     map[string]any
	confFile string
}

// newNetwork returns a static-pool network named it-<random> whose state
// lives in a fresh temp dir. extra keys are added to the plugin config.
func newNetwork(t *testing.T, n *node, cniVersion string, ranges []string, extra map[string]any) *network {
	t.Helper()
	dir := t.TempDir()
	nw := &network{node: n, name: "it-" + randHex(4), stateDir: filepath.Join(dir, "state"), confFile: filepath.Join(dir, "eni-cni.conf")}
	nw.conf = map[string]any{
		"cniVersion": cniVersion,
		"name":       nw.name,
		"type":       "eni-cni",
		"stateDir":   nw.stateDir,
		"pool":       map[string]any{"source": "static", "ranges": ranges},
	}
	for k, v := range extra {
		nw.conf[k] = v
	}
	if err := os.WriteFile(nw.confFile, nw.config(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return nw
}

// config returns the plugin config as JSON, after applying mods to a copy.
func (nw *network) config(t *testing.T, mods ...func(map[string]any)) []byte {
	t.Helper()
	b, err := json.Marshal(nw.conf)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) == 0 {
		return b
	}
	var c map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		m(c)
	}
	if b, err = json.Marshal(c); err != nil {
		t.Fatal(err)
	}
	return b
}

func (nw *network) statePath() string { return filepath.Join(nw.stateDir, "state.json") }

// stateBytes returns the state file's content, nil if it does not exist.
func (nw *network) stateBytes(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(nw.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ---------------------------------------------------------------- running the plugin

// cniEnv is the environment a runtime gives the plugin for cmd on p (p may
// be nil for STATUS and GC).
func cniEnv(cmd string, p *pod) map[string]string {
	env := map[string]string{"CNI_COMMAND": cmd, "CNI_PATH": filepath.Dir(pluginBin)}
	if p != nil {
		env["CNI_CONTAINERID"] = p.containerID
		env["CNI_NETNS"] = p.path()
		env["CNI_IFNAME"] = p.ifName
		env["CNI_ARGS"] = p.cniArgs()
	}
	return env
}

// output is what one exec of the plugin produced.
type output struct {
	stdout, stderr []byte
	exit           int
}

func (o output) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", o.exit, o.stdout, o.stderr)
}

// runIn execs argv inside the network namespace at nsPath via nsenter, with
// exactly env (plus PATH) and stdin. Only failures to run at all are errors;
// a non-zero exit is reported in output.
func runIn(ctx context.Context, nsPath string, env map[string]string, stdin []byte, argv ...string) (output, error) {
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + nsPath, "--"}, argv...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	o := output{stdout: stdout.Bytes(), stderr: stderr.Bytes()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		o.exit = ee.ExitCode()
	default:
		return o, fmt.Errorf("run %v in %s: %w (%s)", argv, nsPath, err, o)
	}
	return o, nil
}

// run execs the plugin on the node as a runtime would.
func (nw *network) run(t *testing.T, env map[string]string, stdin []byte) output {
	t.Helper()
	o, err := runIn(t.Context(), nw.node.path(), env, stdin, pluginBin)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// addOut runs ADD for p with the network's config.
func (nw *network) addOut(t *testing.T, p *pod) output {
	t.Helper()
	return nw.run(t, cniEnv("ADD", p), nw.config(t))
}

// add runs ADD for p and returns the parsed result and stdout; any failure
// is fatal.
func (nw *network) add(t *testing.T, p *pod) (*current.Result, []byte) {
	t.Helper()
	o := nw.addOut(t, p)
	if o.exit != 0 {
		t.Fatalf("ADD %s (%s): want exit 0, got %s", p.name, p.containerID[:12], o)
	}
	res, err := current.NewResult(o.stdout)
	if err != nil {
		t.Fatalf("ADD %s: stdout is not a CNI 1.0 result: %v\n%s", p.name, err, o.stdout)
	}
	return res.(*current.Result), o.stdout
}

// del runs DEL for p with the given CNI_NETNS and wants exit 0.
func (nw *network) del(t *testing.T, p *pod, netnsPath string) {
	t.Helper()
	env := cniEnv("DEL", p)
	env["CNI_NETNS"] = netnsPath
	if o := nw.run(t, env, nw.config(t)); o.exit != 0 {
		t.Fatalf("DEL %s (%s) with CNI_NETNS=%q: want exit 0, got %s", p.name, p.containerID[:12], netnsPath, o)
	}
}

// cniError parses the CNI error a failed call printed, failing the test if
// the call succeeded or printed something else.
func cniError(t *testing.T, what string, o output) *types.Error {
	t.Helper()
	if o.exit == 0 {
		t.Fatalf("%s: want failure, got exit 0 with stdout %s", what, o.stdout)
	}
	var e types.Error
	if err := json.Unmarshal(o.stdout, &e); err != nil || e.Code == 0 {
		t.Fatalf("%s: stdout is not a CNI error (code, msg): %v; %s", what, err, o)
	}
	return &e
}

// wantCNIError checks code and that the message contains every string of
// wantMsg.
func wantCNIError(t *testing.T, what string, o output, code uint, wantMsg ...string) *types.Error {
	t.Helper()
	e := cniError(t, what, o)
	if e.Code != code {
		t.Errorf("%s: want CNI error code %d, got %d (msg %q, details %q)", what, code, e.Code, e.Msg, e.Details)
	}
	for _, s := range wantMsg {
		if !strings.Contains(e.Msg, s) {
			t.Errorf("%s: want the message to contain %q, got %q (details %q)", what, s, e.Msg, e.Details)
		}
	}
	return e
}

// resultIP returns the single pod address of an ADD result.
func resultIP(t *testing.T, res *current.Result) netip.Addr {
	t.Helper()
	if len(res.IPs) != 1 {
		t.Fatalf("result has %d IPs, want 1: %+v", len(res.IPs), res.IPs)
	}
	ip, ok := netip.AddrFromSlice(res.IPs[0].Address.IP)
	if !ok {
		t.Fatalf("result IP %v is not an address", res.IPs[0].Address.IP)
	}
	if ones, bits := res.IPs[0].Address.Mask.Size(); ones != 32 || bits != 32 {
		t.Errorf("result address %s: want a /32", res.IPs[0].Address.String())
	}
	return ip.Unmap()
}

// hostVethOf returns the host veth named in an ADD result.
func hostVethOf(t *testing.T, res *current.Result) string {
	t.Helper()
	for _, i := range res.Interfaces {
		if i.Sandbox == "" {
			return i.Name
		}
	}
	t.Fatalf("result has no host interface: %+v", res.Interfaces)
	return ""
}

// ---------------------------------------------------------------- list --json

// listing is `eni-cni list --json`.
type listing struct {
	Network   string `json:"network"`
	StateFile string `json:"stateFile"`
	Pool      struct {
		Total     int `json:"total"`
		Free      int `json:"free"`
		Cooling   int `json:"cooling"`
		Allocated int `json:"allocated"`
	} `json:"pool"`
	Allocations []listed `json:"allocations"`
}

type listed struct {
	Network      string    `json:"network"`
	ContainerID  string    `json:"containerID"`
	IfName       string    `json:"ifname"`
	IP           string    `json:"ip"`
	PodNamespace string    `json:"podNamespace"`
	PodName      string    `json:"podName"`
	PodUID       string    `json:"podUID"`
	HostVeth     string    `json:"hostVeth"`
	ENI          string    `json:"eni"`
	AllocatedAt  time.Time `json:"allocatedAt"`
}

// listFields are the allocation fields docs/operations.md (Commands) promises in `list`.
var listFields = []string{"network", "containerID", "ifname", "ip", "podNamespace", "podName", "podUID", "hostVeth", "eni", "allocatedAt"}

// list runs `eni-cni list --json --config F` on the node and checks every
// allocation has the promised fields.
func (nw *network) list(t *testing.T) listing {
	t.Helper()
	o, err := runIn(t.Context(), nw.node.path(), nil, nil, pluginBin, "list", "--json", "--config", nw.confFile)
	if err != nil {
		t.Fatal(err)
	}
	if o.exit != 0 {
		t.Fatalf("eni-cni list: want exit 0, got %s", o)
	}
	var l listing
	if err := json.Unmarshal(o.stdout, &l); err != nil {
		t.Fatalf("eni-cni list --json: %v\n%s", err, o.stdout)
	}
	var raw struct {
		Allocations []map[string]json.RawMessage `json:"allocations"`
	}
	if err := json.Unmarshal(o.stdout, &raw); err != nil {
		t.Fatal(err)
	}
	for i, a := range raw.Allocations {
		for _, f := range listFields {
			if _, ok := a[f]; !ok {
				t.Errorf("list --json: allocation %d has no field %q: %v", i, f, a)
			}
		}
	}
	if l.Network != nw.name {
		t.Errorf("list --json: network %q, want %q", l.Network, nw.name)
	}
	return l
}

// byContainer indexes a listing's allocations by container ID.
func (l listing) byContainer() map[string]listed {
	m := make(map[string]listed, len(l.Allocations))
	for _, a := range l.Allocations {
		m[a.ContainerID] = a
	}
	return m
}

// ---------------------------------------------------------------- wiring

// wiring is what assertWired found.
type wiring struct {
	hostMAC, podMAC net.HardwareAddr
}

// assertWired checks the kernel state docs/ARCHITECTURE.md (Networking) promises for
// an attachment: on the node the host veth (name <= 15 chars, prefix "eni",
// up), route IP/32 dev veth in main and rule `to IP lookup main` prio 512;
// in the pod eth0 up with exactly IP/32, route 169.254.1.1 dev eth0 scope
// link, default via 169.254.1.1 and a PERMANENT neighbour 169.254.1.1 ->
// host veth MAC.
func assertWired(t *testing.T, n *node, p *pod, ip netip.Addr, hostVeth string) wiring {
	t.Helper()
	var w wiring
	if len(hostVeth) > maxIfNameLen || !strings.HasPrefix(hostVeth, vethPrefix) {
		t.Errorf("host veth name %q: want at most %d characters starting with %q", hostVeth, maxIfNameLen, vethPrefix)
	}
	host, ok := n.veths(t)[hostVeth]
	if !ok {
		t.Fatalf("pod %s: node has no veth %s (veths: %v)", p.name, hostVeth, n.vethNames(t))
	}
	w.hostMAC = host.Attrs().HardwareAddr
	if host.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("host veth %s is down", hostVeth)
	}
	pfx := ip.String() + "/32"
	if r, dev, ok := n.hostRouteTo(t, ip); !ok {
		t.Errorf("node has no route %s dev %s in main", pfx, hostVeth)
	} else if dev != hostVeth || r.Scope != netlink.SCOPE_LINK || r.Gw != nil {
		t.Errorf("node route to %s: got %s (dev %s), want %s dev %s scope link", pfx, r, dev, pfx, hostVeth)
	}
	var rule bool
	for _, r := range n.podRules(t) {
		if r.Priority == rulePrioToPod && r.Dst != nil && r.Dst.String() == pfx && r.Src == nil && r.Table == unix.RT_TABLE_MAIN {
			rule = true
		}
	}
	if !rule {
		t.Errorf("node has no rule `to %s lookup main` priority %d; rules at our priorities: %v", pfx, rulePrioToPod, n.podRules(t))
	}

	h := openHandle(t, p.path())
	defer h.Close()
	eth, err := h.LinkByName(p.ifName)
	if err != nil {
		t.Fatalf("pod %s: no %s: %v", p.name, p.ifName, err)
	}
	w.podMAC = eth.Attrs().HardwareAddr
	if eth.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("pod %s: %s is down", p.name, p.ifName)
	}
	addrs := dump(t, "pod addresses", func() ([]netlink.Addr, error) { return h.AddrList(eth, netlink.FAMILY_V4) })
	if len(addrs) != 1 || addrs[0].IPNet.String() != pfx {
		t.Errorf("pod %s: %s has IPv4 addresses %v, want exactly %s", p.name, p.ifName, addrs, pfx)
	}
	var gwRoute, defRoute bool
	routes := dump(t, "pod routes", func() ([]netlink.Route, error) { return h.RouteList(eth, netlink.FAMILY_V4) })
	for _, r := range routes {
		isDefault := r.Dst == nil || r.Dst.String() == "0.0.0.0/0"
		switch {
		case r.Dst != nil && r.Dst.String() == gatewayIP+"/32" && r.Scope == netlink.SCOPE_LINK && r.Gw == nil:
			gwRoute = true
		case isDefault && r.Gw != nil && r.Gw.String() == gatewayIP:
			defRoute = true
		}
	}
	if !gwRoute || !defRoute {
		t.Errorf("pod %s: want routes `%s dev %s scope link` (%t) and `default via %s` (%t), got %v",
			p.name, gatewayIP, p.ifName, gwRoute, gatewayIP, defRoute, routes)
	}
	var neigh bool
	neighs := dump(t, "pod neighbours", func() ([]netlink.Neigh, error) { return h.NeighList(eth.Attrs().Index, netlink.FAMILY_V4) })
	for _, nb := range neighs {
		if nb.IP.String() == gatewayIP && nb.State&netlink.NUD_PERMANENT != 0 && nb.HardwareAddr.String() == w.hostMAC.String() {
			neigh = true
		}
	}
	if !neigh {
		t.Errorf("pod %s: want PERMANENT neighbour %s lladdr %s (host veth), got %v", p.name, gatewayIP, w.hostMAC, neighs)
	}
	return w
}

// defaultRoutes returns the pod's IPv4 default routes.
func (p *pod) defaultRoutes(t *testing.T) []netlink.Route {
	t.Helper()
	h := openHandle(t, p.path())
	defer h.Close()
	var out []netlink.Route
	for _, r := range dump(t, "pod routes", func() ([]netlink.Route, error) { return h.RouteList(nil, netlink.FAMILY_V4) }) {
		if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
			out = append(out, r)
		}
	}
	return out
}

// ping sends one echo request from the namespace at nsPath to ip.
func ping(ctx context.Context, nsPath string, ip netip.Addr) error {
	o, err := runIn(ctx, nsPath, nil, nil, "ping", "-c1", "-W1", ip.String())
	if err != nil {
		return err
	}
	if o.exit != 0 {
		return fmt.Errorf("ping -c1 -W1 %s from %s: exit %d\n%s%s", ip, nsPath, o.exit, o.stdout, o.stderr)
	}
	return nil
}

// inRange reports whether first <= ip <= last.
func inRange(ip, first, last netip.Addr) bool {
	return first.Compare(ip) <= 0 && ip.Compare(last) <= 0
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
