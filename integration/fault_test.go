package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/fault"
	"github.com/eni-cni/eni-cni/fault/faultscan"
	"github.com/eni-cni/eni-cni/gc/crifake"
)

// The fault walk: for every crash point in the source (fault.Point call
// sites, found by faultscan), a build with -tags faultinject is killed
// with SIGKILL at that step of ADD, DEL, gc or warm; then the call a
// runtime or timer makes next runs (a repeated ADD or DEL, gc, warm) with
// the same binary minus the fault, and the invariants of audit_test.go
// must hold. A crash point without a scenario fails the walk.

// walkCase is one way to walk a crash point: kill at the point's hit-th
// occurrence, then follow up.
type walkCase struct {
	hit  int
	kind string // add, add-repair, add-undo, del, gc, warm-fill, warm-resync, warm-eni, warm-eni-late, warm-enis, warm-trim
}

// walkPlan maps each crash point to its cases. Generic points (the save,
// the lock, unroute) are walked in each verb that reaches them.
var walkPlan = map[string][]walkCase{
	"add:after-allocate":        {{1, "add"}},
	"add:after-veth":            {{1, "add"}},
	"add:after-pod-config":      {{1, "add"}},
	"add:after-host-route":      {{1, "add"}},
	"add:after-wire":            {{1, "add"}},
	"add:after-repair-teardown": {{1, "add-repair"}},
	"add:before-undo":           {{1, "add-undo"}},
	"del:after-lookup":          {{1, "del"}},
	"del:after-unroute":         {{1, "del"}},
	"del:after-release":         {{1, "del"}},
	"unroute:after-routes":      {{1, "del"}, {1, "gc"}},
	"save:before-rename":        {{1, "add"}, {1, "del"}, {1, "gc"}, {1, "warm-fill"}},
	"lock:after-load":           {{1, "add"}, {1, "del"}, {2, "gc"}},
	"gc:after-plan":             {{1, "gc"}},
	"gc:after-leftover-unroute": {{1, "gc"}},
	"gc:after-unroute":          {{1, "gc"}},
	"gc:after-veths":            {{1, "gc"}},
	"gc:after-release":          {{1, "gc"}},
	// warm
	"warm:after-dirty-mark":           {{1, "warm-fill"}},
	"warm:after-assign-before-record": {{1, "warm-fill"}},
	"warm:after-record":               {{1, "warm-fill"}},
	"warm:resync-after-describe":      {{1, "warm-resync"}},
	// warm-enis: a pass creating two ENIs at once, killed when the first
	// or the second of them reaches the point (the other anywhere on its
	// way).
	"warm:after-pending-mark":           {{1, "warm-eni-late"}, {1, "warm-enis"}},
	"warm:after-create-before-note":     {{1, "warm-eni-late"}, {1, "warm-enis"}, {2, "warm-enis"}},
	"warm:after-create-before-attach":   {{1, "warm-eni"}, {1, "warm-enis"}, {2, "warm-enis"}},
	"warm:after-attach-before-dot":      {{1, "warm-eni"}, {1, "warm-enis"}, {2, "warm-enis"}},
	"warm:after-attach-before-record":   {{1, "warm-eni"}, {1, "warm-enis"}, {2, "warm-enis"}},
	"warm:after-record-eni":             {{1, "warm-eni"}, {1, "warm-enis"}, {2, "warm-enis"}},
	"warm:after-unusable-mark":          {{1, "warm-trim"}},
	"warm:after-unassign-before-forget": {{1, "warm-trim"}},
}

// TestFaultWalk walks every crash point with every follow-up.
func TestFaultWalk(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	points, err := faultscan.Points(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range faultscan.Names(points) {
		if len(walkPlan[name]) == 0 {
			t.Errorf("crash point %q (%v) has no scenario in walkPlan", name, points[name])
		}
	}
	for name := range walkPlan {
		if _, ok := points[name]; !ok {
			t.Errorf("walkPlan names %q, which is no crash point in the source", name)
		}
	}
	bin := buildFaultBinary(t, root)
	for _, name := range faultscan.Names(points) {
		for _, c := range walkPlan[name] {
			point := fmt.Sprintf("%s@%d", name, c.hit)
			switch c.kind {
			case "add":
				for _, next := range []string{"repeat-add", "del", "abandon"} {
					t.Run(c.kind+"/"+point+"/"+next, func(t *testing.T) { walkAdd(t, bin, point, next) })
				}
			case "add-repair":
				for _, next := range []string{"repeat-add", "del", "abandon"} {
					t.Run(c.kind+"/"+point+"/"+next, func(t *testing.T) { walkAddRepair(t, bin, point, next) })
				}
			case "add-undo":
				for _, next := range []string{"repeat-add", "del", "abandon"} {
					t.Run(c.kind+"/"+point+"/"+next, func(t *testing.T) { walkAddUndo(t, bin, point, next) })
				}
			case "del":
				for _, next := range []string{"repeat-del", "abandon"} {
					t.Run(c.kind+"/"+point+"/"+next, func(t *testing.T) { walkDel(t, bin, point, next) })
				}
			case "gc":
				t.Run(c.kind+"/"+point, func(t *testing.T) { walkGC(t, bin, point) })
			case "warm-fill", "warm-resync", "warm-eni", "warm-eni-late", "warm-enis", "warm-trim":
				t.Run(c.kind+"/"+point, func(t *testing.T) { walkWarm(t, bin, c.kind, point) })
			default:
				t.Fatalf("unknown walk kind %q", c.kind)
			}
		}
	}
}

// buildFaultBinary builds the full build with the crash points compiled in.
func buildFaultBinary(t *testing.T, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "eni-cni-fault")
	cmd := exec.Command("go", "build", "-tags", "faultinject", "-o", bin, ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags faultinject: %v\n%s", err, out)
	}
	return bin
}

// ---------------------------------------------------------------- the world of one walk

// walkWorld is a node with one static network, a bystander pod that must
// survive everything untouched, and a fake CRI runtime that lists the pods
// the test says run.
type walkWorld struct {
	bin       string
	node      *node
	nw        *network
	cri       *crifake.Server
	bystander *pod
	exp       expectation
	results   map[*pod][]byte // last ADD result, for CHECK
}

func newWalkWorld(t *testing.T, bin string) *walkWorld {
	t.Helper()
	n := newNode(t)
	w := &walkWorld{
		bin: bin, node: n, cri: crifake.Start(t),
		nw:      newNetwork(t, n, "1.0.0", []string{"10.99.0.0/28"}, nil),
		exp:     expectation{alive: map[*pod]netip.Addr{}},
		results: map[*pod][]byte{},
	}
	w.bystander = newPod(t, "bystander")
	w.mustAdd(t, w.bystander)
	return w
}

// exec runs the fault binary in the node namespace; point "" means no
// fault.
func (w *walkWorld) exec(t *testing.T, point string, env map[string]string, stdin []byte, args ...string) (output, error) {
	t.Helper()
	e := map[string]string{}
	for k, v := range env {
		e[k] = v
	}
	if point != "" {
		e[fault.Env] = point
	}
	return runIn(t.Context(), w.node.path(), e, stdin, append([]string{w.bin}, args...)...)
}

// mustKill runs the call and wants it killed at point.
func (w *walkWorld) mustKill(t *testing.T, point string, env map[string]string, stdin []byte, args ...string) {
	t.Helper()
	o, err := w.exec(t, point, env, stdin, args...)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("want the call killed at %s, got %s (err %v)", point, o, err)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	name, _, _ := strings.Cut(point, "@")
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL || !bytes.Contains(o.stderr, []byte("fault: killed at "+name)) {
		t.Fatalf("want the call killed by SIGKILL at %s, got %v, stderr %q", point, err, o.stderr)
	}
}

func (w *walkWorld) add(t *testing.T, p *pod) output {
	t.Helper()
	o, err := w.exec(t, "", cniEnv("ADD", p), w.nw.config(t))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func (w *walkWorld) mustAdd(t *testing.T, p *pod) netip.Addr {
	t.Helper()
	o := w.add(t, p)
	if o.exit != 0 {
		t.Fatalf("ADD %s: want exit 0, got %s", p.name, o)
	}
	res, err := current.NewResult(o.stdout)
	if err != nil {
		t.Fatalf("ADD %s: %v", p.name, err)
	}
	ip := resultIP(t, res.(*current.Result))
	w.exp.alive[p] = ip
	w.results[p] = o.stdout
	w.listed()
	return ip
}

func (w *walkWorld) mustDel(t *testing.T, p *pod) {
	t.Helper()
	o, err := w.exec(t, "", cniEnv("DEL", p), w.nw.config(t))
	if err != nil || o.exit != 0 {
		t.Fatalf("DEL %s: want exit 0, got %s (%v)", p.name, o, err)
	}
	w.forget(p)
}

// forget: the runtime no longer runs p.
func (w *walkWorld) forget(p *pod) {
	delete(w.exp.alive, p)
	delete(w.results, p)
	w.exp.gone = append(w.exp.gone, p)
	w.listed()
}

// listed makes the fake runtime list the pods the test runs.
func (w *walkWorld) listed() {
	var sbs []*runtimeapi.PodSandbox
	for p := range w.exp.alive {
		sbs = append(sbs, sandboxOf(p, true))
	}
	w.cri.SetSandboxes(sbs...)
}

// gc runs `eni-cni gc` against the fake runtime on a store aged past the
// grace (--grace cannot go below its minimum): everything the runtime does
// not list is dead.
func (w *walkWorld) gc(t *testing.T, point string) output {
	t.Helper()
	if _, err := os.Lstat(w.nw.statePath()); err == nil {
		w.nw.ageAllocations(t, time.Hour)
	}
	args := []string{"gc", "--config", w.nw.confFile, "--cri-endpoint", w.cri.Endpoint()}
	if point != "" {
		w.mustKill(t, point, nil, nil, args...)
		return output{}
	}
	o, err := w.exec(t, "", nil, nil, args...)
	if err != nil || o.exit != 0 {
		t.Fatalf("gc: want exit 0, got %s (%v)", o, err)
	}
	return o
}

// audit checks the invariants, then CHECK of every running pod.
func (w *walkWorld) audit(t *testing.T, when string, afterGC bool) {
	t.Helper()
	e := w.exp
	e.noTemp = afterGC
	auditNetwork(t, w.bin, w.nw, e).report(t, when)
	for p, prev := range w.results {
		conf := w.nw.config(t, func(c map[string]any) { c["prevResult"] = json.RawMessage(prev) })
		if o, err := w.exec(t, "", cniEnv("CHECK", p), conf); err != nil || o.exit != 0 {
			t.Errorf("%s: CHECK of %s: %s (%v)", when, p.name, o, err)
		}
	}
}

// quick audit right after the kill: the store must already be readable
// and without duplicates (wiring may be half-made).
func (w *walkWorld) auditStore(t *testing.T) {
	t.Helper()
	o, err := w.exec(t, "", nil, nil, "list", "--json", "--config", w.nw.confFile)
	if err != nil || o.exit != 0 {
		t.Errorf("right after the kill: store unreadable: %s (%v)", o, err)
	}
}

// ---------------------------------------------------------------- ADD

// walkAdd kills ADD of a new pod at point, then follows up as a runtime
// would: repeat the ADD, or DEL the failed sandbox, or vanish (gc).
func walkAdd(t *testing.T, bin, point, next string) {
	w := newWalkWorld(t, bin)
	p := newPod(t, "victim")
	w.mustKill(t, point, cniEnv("ADD", p), w.nw.config(t))
	w.auditStore(t)
	w.followAdd(t, p, next)
}

func (w *walkWorld) followAdd(t *testing.T, p *pod, next string) {
	t.Helper()
	switch next {
	case "repeat-add":
		w.mustAdd(t, p)
	case "del":
		w.mustDel(t, p)
	case "abandon":
		w.forget(p)
	}
	if next != "abandon" { // else only gc can clean up
		w.audit(t, "after "+next, false)
	}
	w.gc(t, "")
	w.audit(t, "after "+next+" and gc", true)
}

// walkAddRepair: an ADD dies half-way (veth made, nothing else), the
// repeated ADD dies at point while repairing, then the follow-up.
func walkAddRepair(t *testing.T, bin, point, next string) {
	w := newWalkWorld(t, bin)
	p := newPod(t, "victim")
	w.mustKill(t, "add:after-veth", cniEnv("ADD", p), w.nw.config(t))
	w.mustKill(t, point, cniEnv("ADD", p), w.nw.config(t))
	w.auditStore(t)
	w.followAdd(t, p, next)
}

// walkAddUndo: ADD cannot wire (the pod already has an interface of the
// name) and dies at point while undoing its allocation. The pod's own
// interface is not ours: afterwards the pod is gone and so is it.
func walkAddUndo(t *testing.T, bin, point, next string) {
	w := newWalkWorld(t, bin)
	p := newPod(t, "victim")
	blockIfName(t, p)
	w.mustKill(t, point, cniEnv("ADD", p), w.nw.config(t))
	w.auditStore(t)
	if next == "repeat-add" {
		if o := w.add(t, p); o.exit == 0 {
			t.Fatalf("repeated ADD into a pod whose %s is taken: want failure, got %s", p.ifName, o)
		}
		next = "abandon" // the runtime gives the sandbox up
	}
	unblockIfName(t, p)
	w.followAdd(t, p, next)
}

// blockIfName gives the pod an interface named like the one ADD creates
// (a veth pair inside the pod), so ADD fails after allocating.
func blockIfName(t *testing.T, p *pod) {
	t.Helper()
	h := openHandle(t, p.path())
	defer h.Close()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.ifName}, PeerName: "blocker"}
	if err := h.LinkAdd(v); err != nil {
		t.Fatalf("add %s to pod %s: %v", p.ifName, p.name, err)
	}
}

func unblockIfName(t *testing.T, p *pod) {
	t.Helper()
	h := openHandle(t, p.path())
	defer h.Close()
	if l, err := h.LinkByName("blocker"); err == nil {
		if err := h.LinkDel(l); err != nil {
			t.Fatal(err)
		}
	}
}

// ---------------------------------------------------------------- DEL

// walkDel kills DEL of a running pod at point; the runtime repeats DEL (it
// retries a failed one), or the sandbox vanishes and gc collects it.
func walkDel(t *testing.T, bin, point, next string) {
	w := newWalkWorld(t, bin)
	p := newPod(t, "victim")
	w.mustAdd(t, p)
	w.mustKill(t, point, cniEnv("DEL", p), w.nw.config(t))
	w.auditStore(t)
	switch next {
	case "repeat-del":
		w.mustDel(t, p)
	case "abandon":
		// The runtime gives the sandbox up and removes its namespace,
		// which takes the veth pair with it. (Were the namespace kept, a
		// DEL killed after its release would leave the veth to whoever
		// repeats the DEL: runtimes do, until it succeeds.)
		w.forget(p)
		if err := p.remove(); err != nil {
			t.Fatal(err)
		}
	}
	if next != "abandon" { // else only gc can clean up
		w.audit(t, "after "+next, false)
	}
	w.gc(t, "")
	w.audit(t, "after "+next+" and gc", true)
}

// ---------------------------------------------------------------- gc

// walkGC kills gc at point while it frees a dead pod and sweeps a leftover
// (a wired veth whose allocation is gone); the next gc must finish both
// and leave the running pods alone.
func walkGC(t *testing.T, bin, point string) {
	w := newWalkWorld(t, bin)
	alive, dead, left := newPod(t, "alive"), newPod(t, "dead"), newPod(t, "leftover")
	w.mustAdd(t, alive)
	w.mustAdd(t, dead)
	w.mustAdd(t, left)
	w.dropAllocation(t, left)
	w.forget(dead)
	w.forget(left)
	w.mustKillGC(t, point)
	w.auditStore(t)
	if os.Getenv("WALK_DEBUG") != "" {
		t.Logf("host after the kill:\n%s", w.node.hostState(t))
	}
	w.gc(t, "")
	w.audit(t, "after the next gc", true)
}

func (w *walkWorld) mustKillGC(t *testing.T, point string) {
	t.Helper()
	w.gc(t, point)
}

// dropAllocation removes p's allocation from the state file, as a lost
// write would, leaving its wiring on the node. Only while no plugin runs.
func (w *walkWorld) dropAllocation(t *testing.T, p *pod) {
	t.Helper()
	var st map[string]json.RawMessage
	if err := json.Unmarshal(w.nw.stateBytes(t), &st); err != nil {
		t.Fatal(err)
	}
	var allocs []map[string]any
	if err := json.Unmarshal(st["allocations"], &allocs); err != nil {
		t.Fatal(err)
	}
	kept := allocs[:0]
	for _, a := range allocs {
		if a["containerID"] != p.containerID {
			kept = append(kept, a)
		}
	}
	b, _ := json.Marshal(kept)
	st["allocations"] = b
	out, _ := json.Marshal(st)
	if err := os.WriteFile(w.nw.statePath(), out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// ---------------------------------------------------------------- warm

// walkWarm kills a warm pass at point on a simulated EC2 node, then runs
// warm again (playing the hypervisor: links for attached ENIs) and checks
// the store against EC2 and that pods can still be added and deleted.
func walkWarm(t *testing.T, bin, kind, point string) {
	en := newEC2Node(t, ec2fake.Config{})
	en.primaryLink(t)
	target := 3
	switch kind {
	case "warm-eni", "warm-eni-late":
		target = 7 // more than the primary ENI's 5 slots: a second ENI
	case "warm-enis":
		target = 12 // the primary's 5, then two ENIs created at once
	}
	nw := newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": target}, nil)
	w := &walkWorld{bin: bin, node: en.node, nw: nw, cri: crifake.Start(t),
		exp: expectation{alive: map[*pod]netip.Addr{}}, results: map[*pod][]byte{}}
	warmArgs := []string{"warm", "--config", nw.confFile}
	switch kind {
	case "warm-resync":
		w.mustKill(t, "warm:after-assign-before-record", ec2Creds, nil, warmArgs...)
	case "warm-trim":
		w.warmAttaching(t, en, "")
		nw.setConf(t, func(c map[string]any) { c["pool"].(map[string]any)["warmIPTarget"] = 1 })
		backdatePool(t, nw, 10*time.Minute)
	}
	w.warmAttaching(t, en, point)
	w.auditStore(t)
	if kind == "warm-eni-late" || kind == "warm-enis" {
		// The pass died holding a pending ENI record without the ENI's ID
		// (the Create call's reply never recorded; with two ENIs created at
		// once, the other's may be in that state wherever the kill came
		// from): an ENI it may have
		// created is only looked for once older than the sweep's age, so
		// that no pass still on its way to attaching one loses it. Let that
		// time pass.
		agePending(t, nw, en, 10*time.Minute)
	}
	w.warmAttaching(t, en, "")
	e := w.exp
	e.eniLinks = en.linkNames()
	f := auditNetwork(t, bin, nw, e)
	auditEC2(t, nw, en.fake, f)
	f.report(t, "after the next warm")
	// The pool serves pods again.
	p := newPod(t, "after")
	w.mustAdd(t, p)
	w.mustDel(t, p)
}

// warmAttaching runs warm with the fault binary (killed at point unless
// it is "") while creating the node links of ENIs the fake attaches.
func (w *walkWorld) warmAttaching(t *testing.T, en *ec2Node, point string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			en.linkAttached(t)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	args := []string{"warm", "--config", w.nw.confFile}
	if point != "" {
		w.mustKill(t, point, ec2Creds, nil, args...)
		return
	}
	o, err := w.exec(t, "", ec2Creds, nil, args...)
	if err != nil || o.exit != 0 {
		t.Fatalf("warm: want exit 0, got %s (%v)", o, err)
	}
}

// linkAttached creates the node link of every attached ENI that has none.
func (en *ec2Node) linkAttached(t *testing.T) {
	for _, e := range en.attached() {
		en.mu.Lock()
		_, have := en.links[e.MAC]
		en.mu.Unlock()
		if !have {
			en.addENILink(t, e)
		}
	}
}

func (en *ec2Node) linkNames() map[string]bool {
	en.mu.Lock()
	defer en.mu.Unlock()
	out := map[string]bool{}
	for _, name := range en.links {
		out[name] = true
	}
	return out
}

// editEC2Section rewrites the store's ec2 section through fn (its fields
// as raw JSON). Only while no plugin runs.
func editEC2Section(t *testing.T, nw *network, fn func(section map[string]json.RawMessage)) {
	t.Helper()
	var st map[string]json.RawMessage
	if err := json.Unmarshal(nw.stateBytes(t), &st); err != nil {
		t.Fatal(err)
	}
	var section map[string]json.RawMessage
	if err := json.Unmarshal(st["ec2"], &section); err != nil {
		t.Fatal(err)
	}
	fn(section)
	st["ec2"], _ = json.Marshal(section)
	out, _ := json.Marshal(st)
	if err := os.WriteFile(nw.statePath(), out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// agePending moves the pending ENI records, the last leak sweep and the
// creation tags of the ENIs eni-cni created d into the past. Only while no
// plugin runs.
func agePending(t *testing.T, nw *network, en *ec2Node, d time.Duration) {
	t.Helper()
	back := time.Now().Add(-d).UTC()
	editEC2Section(t, nw, func(section map[string]json.RawMessage) {
		var pending []map[string]any
		if raw, ok := section["pending"]; ok {
			if err := json.Unmarshal(raw, &pending); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range pending {
			p["since"] = back.Format(time.RFC3339Nano)
		}
		section["pending"], _ = json.Marshal(pending)
		section["lastSweep"], _ = json.Marshal(back)
	})
	for _, e := range en.fake.ENIs() {
		if e.Tags["eni-cni/created-at"] != "" {
			if err := en.fake.TagENI(e.ID, map[string]string{"eni-cni/created-at": back.Format(time.RFC3339)}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// backdatePool moves every pool address's addedAt d into the past, so
// trim may give them back. Only while no plugin runs.
func backdatePool(t *testing.T, nw *network, d time.Duration) {
	t.Helper()
	editEC2Section(t, nw, func(section map[string]json.RawMessage) {
		var addrs []map[string]any
		if err := json.Unmarshal(section["addrs"], &addrs); err != nil {
			t.Fatal(err)
		}
		for _, p := range addrs {
			p["addedAt"] = time.Now().Add(-d).UTC().Format(time.RFC3339Nano)
		}
		section["addrs"], _ = json.Marshal(addrs)
	})
}
