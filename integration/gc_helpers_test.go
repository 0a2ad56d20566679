package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/eni-cni/eni-cni/gc/crifake"
)

// ---------------------------------------------------------------- libcni as the runtime

// gcCall is one plugin exec libcni made: the CNI verb and, for
// per-attachment verbs, the container ID.
type gcCall struct{ cmd, containerID string }

// recordingExec is nsExec (plugins run in the node namespace) that also
// records every call, so a test can tell what libcni itself DELeted from
// what the plugin's GC verb freed.
type recordingExec struct {
	nsExec
	mu    sync.Mutex
	calls []gcCall
}

func (e *recordingExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	var c gcCall
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "CNI_COMMAND="); ok {
			c.cmd = v
		}
		if v, ok := strings.CutPrefix(kv, "CNI_CONTAINERID="); ok {
			c.containerID = v
		}
	}
	e.mu.Lock()
	e.calls = append(e.calls, c)
	e.mu.Unlock()
	return e.nsExec.ExecPlugin(ctx, pluginPath, stdin, environ)
}

// take returns the calls of the given verbs recorded so far and forgets
// every recorded call.
func (e *recordingExec) take(verbs ...string) []gcCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []gcCall
	for _, c := range e.calls {
		if slices.Contains(verbs, c.cmd) {
			out = append(out, c)
		}
	}
	e.calls = nil
	return out
}

// gcRuntime is a container runtime's libcni: one CNI bin dir holding
// eni-cni, one result cache shared by every network, plugins run in the
// node namespace.
type gcRuntime struct {
	cni  *libcni.CNIConfig
	exec *recordingExec
}

func newGCRuntime(t *testing.T, n *node) *gcRuntime {
	t.Helper()
	binDir := t.TempDir()
	if err := os.Symlink(pluginBin, filepath.Join(binDir, "eni-cni")); err != nil {
		t.Fatal(err)
	}
	ex := &recordingExec{nsExec: nsExec{nodePath: n.path()}}
	return &gcRuntime{cni: libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), ex), exec: ex}
}

// conflist is nw's plugin config as the only plugin of a conflist with the
// network's name and cniVersion (1.1.0 for libcni to call GC at all).
func (nw *network) conflist(t *testing.T) *libcni.NetworkConfigList {
	t.Helper()
	ours := map[string]any{}
	for k, v := range nw.conf {
		if k != "name" && k != "cniVersion" {
			ours[k] = v
		}
	}
	b, err := json.Marshal(map[string]any{"cniVersion": nw.conf["cniVersion"], "name": nw.name, "plugins": []any{ours}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatalf("parse conflist: %v\n%s", err, b)
	}
	return list
}

// add runs AddNetworkList, so libcni caches the attachment.
func (r *gcRuntime) add(t *testing.T, list *libcni.NetworkConfigList, p *pod) attached {
	t.Helper()
	res, err := r.cni.AddNetworkList(t.Context(), list, runtimeConf(p))
	if err != nil {
		t.Fatalf("libcni AddNetworkList %s (%s): %v", p.name, p.containerID[:12], err)
	}
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatalf("libcni AddNetworkList %s: result: %v", p.name, err)
	}
	return attached{pod: p, res: cur, ip: resultIP(t, cur), veth: hostVethOf(t, cur)}
}

// gc runs GCNetworkList with the given pods as the valid attachments; a nil
// valid slice is sent as null.
func (r *gcRuntime) gc(t *testing.T, list *libcni.NetworkConfigList, valid []*pod) error {
	t.Helper()
	var va []types.GCAttachment
	for _, p := range valid {
		va = append(va, types.GCAttachment{ContainerID: p.containerID, IfName: p.ifName})
	}
	return r.cni.GCNetworkList(t.Context(), list, &libcni.GCArgs{ValidAttachments: va})
}

// addDirect execs ADD as a runtime would but outside libcni, so libcni has
// no cache entry for the attachment and only the plugin's GC can free it.
func (nw *network) addDirect(t *testing.T, p *pod) attached {
	t.Helper()
	res, _ := nw.add(t, p)
	return attached{pod: p, res: res, ip: resultIP(t, res), veth: hostVethOf(t, res)}
}

// ---------------------------------------------------------------- eni-cni gc

// gc runs `eni-cni gc --config <nw> args...` in the node namespace.
func (nw *network) gc(t *testing.T, args ...string) output {
	t.Helper()
	argv := append([]string{pluginBin, "gc", "--config", nw.confFile}, args...)
	o, err := runIn(t.Context(), nw.node.path(), nil, nil, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// gcVerb runs the CNI GC verb directly with the given valid attachments.
func (nw *network) gcVerb(t *testing.T, valid ...*pod) output {
	t.Helper()
	va := []map[string]string{}
	for _, p := range valid {
		va = append(va, map[string]string{"containerID": p.containerID, "ifname": p.ifName})
	}
	conf := nw.config(t, func(c map[string]any) { c["cni.dev/valid-attachments"] = va })
	return nw.run(t, cniEnv("GC", nil), conf)
}

// sandboxOf is the runtime's view of a pod: its sandbox, READY or NOTREADY.
func sandboxOf(p *pod, ready bool) *runtimeapi.PodSandbox {
	return crifake.PodSandbox(p.containerID, p.namespace, p.name, p.uid, ready, time.Now())
}

func readySandboxes(pods ...*pod) []*runtimeapi.PodSandbox {
	out := make([]*runtimeapi.PodSandbox, len(pods))
	for i, p := range pods {
		out[i] = sandboxOf(p, true)
	}
	return out
}

// splitLines splits output into lines without the trailing newline.
func splitLines(b []byte) []string {
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// freeLineRE matches the line `eni-cni gc` prints per freed attachment:
// gc: freed IP sandbox CID12/IFNAME pod NS/NAME network NET age AGE: REASON
var freeLineRE = regexp.MustCompile(`^gc: freed (\S+) sandbox ([0-9a-f]{12})/(\S+) pod (\S+)/(\S+) network (\S+) age (\S+): (.+)$`)

// freeLine is one parsed freed line.
type freeLine struct{ ip, cid12, ifName, podNS, podName, network, age, reason string }

func parseFreeLines(lines []string) []freeLine {
	var out []freeLine
	for _, l := range lines {
		if m := freeLineRE.FindStringSubmatch(l); m != nil {
			out = append(out, freeLine{m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8]})
		}
	}
	return out
}

// summaryRE matches the summary line; the counts are freed, young, alive.
var summaryRE = regexp.MustCompile(`^gc: (refused, )?freed (\d+), kept (\d+) young, (\d+) alive(, \d+ of other networks)?, (\d+) host leftovers$`)

type gcSummary struct {
	refused                        bool
	freed, young, alive, leftovers int
}

// parseSummary finds the summary line in gc's stdout.
func parseSummary(t *testing.T, o output) gcSummary {
	t.Helper()
	for _, l := range splitLines(o.stdout) {
		if m := summaryRE.FindStringSubmatch(l); m != nil {
			atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
			return gcSummary{refused: m[1] != "", freed: atoi(m[2]), young: atoi(m[3]), alive: atoi(m[4]), leftovers: atoi(m[6])}
		}
	}
	t.Fatalf("gc printed no summary line: %s", o)
	return gcSummary{}
}

// oneLineReason checks stderr is exactly one line "eni-cni: ..." and
// contains every one of want.
func oneLineReason(t *testing.T, o output, want ...string) {
	t.Helper()
	lines := splitLines(o.stderr)
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "eni-cni: ") {
		t.Errorf("stderr: want one line `eni-cni: <reason>`, got %d lines: %q", len(lines), o.stderr)
		return
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("stderr %q: want it to mention %q", lines[0], w)
		}
	}
}

// ---------------------------------------------------------------- node state

// hostState is a printable summary of everything on the node a GC may
// touch: veths (with up/down), rules at our priorities and /32 routes of
// the main table. Two equal summaries mean the GC changed nothing there.
func (n *node) hostState(t *testing.T) string {
	t.Helper()
	var lines []string
	names := map[int]string{}
	for name, l := range n.veths(t) {
		names[l.Attrs().Index] = name
		lines = append(lines, fmt.Sprintf("veth %s up=%t", name, l.Attrs().Flags&net.FlagUp != 0))
	}
	for _, r := range n.podRules(t) {
		lines = append(lines, fmt.Sprintf("rule prio %d from %v to %v table %d", r.Priority, r.Src, r.Dst, r.Table))
	}
	for _, r := range n.mainRoutes(t) {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones == 32 {
				dev := names[r.LinkIndex]
				if dev == "" {
					dev = fmt.Sprintf("ifindex %d", r.LinkIndex)
				}
				lines = append(lines, fmt.Sprintf("route %s dev %s", r.Dst, dev))
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// hasRuleFor reports whether the node has a rule at prio for to (or from) ip/32.
func (n *node) hasRuleFor(t *testing.T, prio int, ip netip.Addr, from bool) bool {
	t.Helper()
	want := ip.String() + "/32"
	rules := dump(t, "node rules", func() ([]netlink.Rule, error) { return n.h.RuleList(netlink.FAMILY_V4) })
	for _, r := range rules {
		sel := r.Dst
		if from {
			sel = r.Src
		}
		if r.Priority == prio && sel != nil && sel.String() == want {
			return true
		}
	}
	return false
}

// addStrayRule adds `[from|to] ip/32 lookup table prio prio` on the node.
func (n *node) addStrayRule(t *testing.T, prio int, ip netip.Addr, from bool, table int) {
	t.Helper()
	r := netlink.NewRule()
	ipn := &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(32, 32)}
	if from {
		r.Src = ipn
	} else {
		r.Dst = ipn
	}
	r.Table, r.Priority, r.Family = table, prio, unix.AF_INET
	if err := n.h.RuleAdd(r); err != nil {
		t.Fatalf("node: add rule %s: %v", r, err)
	}
}

// addStrayVeth creates a veth named name on the node, up, whose peer peerName is
// in the namespace other (which then owns it for cleanup).
func (n *node) addStrayVeth(t *testing.T, name string, other *netNS, peerName string) netlink.Link {
	t.Helper()
	peerNS, err := netns.GetFromPath(other.path())
	if err != nil {
		t.Fatal(err)
	}
	defer peerNS.Close()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peerName, PeerNamespace: netlink.NsFd(int(peerNS))}
	if err := n.h.LinkAdd(v); err != nil {
		t.Fatalf("node: add veth %s (peer %s in %s): %v", name, peerName, other.path(), err)
	}
	l, err := n.h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.h.LinkSetUp(l); err != nil {
		t.Fatalf("node: set %s up: %v", name, err)
	}
	return l
}

// addStrayRoute adds `ip/32 dev link scope link` to the node's main table.
func (n *node) addStrayRoute(t *testing.T, ip netip.Addr, link netlink.Link) {
	t.Helper()
	r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}
	if err := n.h.RouteAdd(r); err != nil {
		t.Fatalf("node: add route %s dev %s: %v", r.Dst, link.Attrs().Name, err)
	}
}

// ---------------------------------------------------------------- attachments

// assertAlive checks a kept attachment: still allocated to its sandbox in
// the listing, wired as ADD left it, and reachable from the node.
func assertAlive(t *testing.T, nw *network, l listing, a attached) {
	t.Helper()
	got, ok := l.byContainer()[a.pod.containerID]
	if !ok {
		t.Errorf("%s (%s, %s): no longer allocated in network %s; allocations %+v", a.pod.name, a.pod.containerID[:12], a.ip, nw.name, l.Allocations)
		return
	}
	if got.IP != a.ip.String() || got.HostVeth != a.veth {
		t.Errorf("%s: listed with %s / %s, want %s / %s", a.pod.name, got.IP, got.HostVeth, a.ip, a.veth)
	}
	assertWired(t, nw.node, a.pod, a.ip, a.veth)
	if err := ping(t.Context(), nw.node.path(), a.ip); err != nil {
		t.Errorf("%s: node cannot reach it: %v", a.pod.name, err)
	}
}

// assertFreed checks a collected attachment: gone from the listing, no
// host veth, /32 route or rule left, and the pod end gone with its veth.
func assertFreed(t *testing.T, n *node, l listing, a attached) {
	t.Helper()
	if got, ok := l.byContainer()[a.pod.containerID]; ok {
		t.Errorf("%s (%s): still allocated %s, want it freed", a.pod.name, a.pod.containerID[:12], got.IP)
	}
	n.assertNoHostSide(t, a.ip, a.veth)
	a.pod.assertUnwired(t)
}

// ---------------------------------------------------------------- state file

// backdate moves the allocatedAt of the pods' allocations d into the past,
// as if they had been allocated that long ago. Nothing else of the file
// changes. Only for use while no plugin runs.
func (nw *network) backdate(t *testing.T, d time.Duration, pods ...*pod) {
	t.Helper()
	ids := map[string]bool{}
	for _, p := range pods {
		ids[p.containerID] = true
	}
	dec := json.NewDecoder(bytes.NewReader(nw.stateBytes(t)))
	dec.UseNumber()
	var st map[string]any
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("decode state file: %v", err)
	}
	allocs, _ := st["allocations"].([]any)
	moved := 0
	for _, x := range allocs {
		a := x.(map[string]any)
		if !ids[a["containerID"].(string)] {
			continue
		}
		shiftStamps(t, a, "allocatedAt", "allocatedBootNs", -d) // both clocks (alloc/clock.go)
		moved++
	}
	if moved != len(ids) {
		t.Fatalf("backdate: found %d of %d allocations in the state file", moved, len(ids))
	}
	b, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	tmp := nw.statePath() + ".backdate"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, nw.statePath()); err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond every few milliseconds until it holds, failing the
// test after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
