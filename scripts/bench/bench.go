package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/ec2/fleet"
)

// childEnv makes the harness binary act as a tiny helper when it execs
// itself (to prove that children start in the node namespace).
const childEnv = "ECNI_BENCH_CHILD"

func childMain() int {
	switch os.Getenv(childEnv) {
	case "netns":
		l, err := os.Readlink("/proc/self/ns/net")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(l)
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown %s\n", childEnv)
	return 2
}

const (
	nsRunDir  = "/var/run/netns"
	nsPrefix  = "ecnibench-"
	opTimeout = 60 * time.Second
	ifName    = "eth0"
)

// bench is one run of the harness.
type bench struct {
	cfg     config
	start   time.Time
	prefix  string // ecnibench-<pid>-
	work    string // throwaway directory: state dirs, host-local dataDir, trivial binary, CRI socket
	out     string
	rootNS  netns.NsHandle
	eni     *plugin
	ref     *plugin
	trivial string

	mu        sync.Mutex
	nsNames   []string // every namespace created, for cleanup
	nodes     []*node
	samples   []sample
	res       results
	cleaned   bool
	rootLinks map[string]bool // root namespace links before the run
	procs     []*os.Process   // long-running helpers (perf) to stop on cleanup
	fleet     []*fleet.Report // the fleet row group's scale-ups (phaseFleet)
}

// node is a namespace standing in for the machine's root namespace.
type node struct {
	name, path string
	ns         netns.NsHandle
	h          *netlink.Handle
}

// pod is a pod network namespace, reused by successive sandboxes.
type pod struct {
	name, path string
	index      int
	cid        string // sandbox (CNI_CONTAINERID) attached now, "" if none
	result     []byte // ADD result
	hostVeth   string
}

// plugin is one side of the comparison.
type plugin struct {
	key      string // "eni" or "ref"
	label    string // for tables
	bin      string
	cniPath  string
	conf     map[string]any // network configuration as a runtime passes it on stdin
	node     *node
	pods     []*pod
	gone     []*pod
	subnet   string
	stateDir string
}

// sample is one timed exec.
type sample struct {
	Phase, Plugin, Op string
	Index, Round      int
	Fill              int // allocations of this plugin on the node before the call; -1: not tracked
	Wall, User, Sys   time.Duration
	MaxRSS            int64 // KiB
}

func (s sample) cpu() time.Duration { return s.User + s.Sys }

func newBench(cfg config) *bench {
	return &bench{cfg: cfg, prefix: fmt.Sprintf("%s%d-", nsPrefix, os.Getpid()), rootNS: -1}
}

// ---------------------------------------------------------------- set-up

func (b *bench) prepare(ctx context.Context) error {
	c := &b.cfg
	c.eniBin, c.tools, c.repo, c.out = absPath(c.eniBin), absPath(c.tools), absPath(c.repo), absPath(c.out)
	if c.md != "" {
		c.md = absPath(c.md)
	}
	b.out = c.out
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return err
	}
	b.res.Params = *c
	b.res.LoadStart = loadAvg()
	b.sweepOldRuns()
	if c.install {
		// kubelet for the kubelet burst: built once (6-20 min), then cached.
		b.logf("installing reference plugins and kubelet: scripts/install-test-deps.sh --tools %s --with-kubelet", c.tools)
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(c.repo, "scripts/install-test-deps.sh"), "--tools", c.tools, "--with-kubelet")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("scripts/install-test-deps.sh: %w", err)
		}
	}
	for _, f := range []string{c.eniBin, filepath.Join(c.tools, "bin/ptp"), filepath.Join(c.tools, "bin/host-local")} {
		if fi, err := os.Stat(f); err != nil || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s is missing or not executable (make build; scripts/install-test-deps.sh)", f)
		}
	}
	var err error
	if b.work, err = os.MkdirTemp(c.workRoot, fmt.Sprintf("eni-cni-bench-%d-", os.Getpid())); err != nil {
		return err
	}
	if err := b.buildTrivial(ctx); err != nil {
		return err
	}
	if b.rootNS, err = netns.Get(); err != nil {
		return fmt.Errorf("open own netns: %w", err)
	}
	b.rootLinks = linkNames(nil)

	// Namespaces: nodes, then pods. Creation is not timed.
	eniNode, err := b.newNode("node-eni")
	if err != nil {
		return err
	}
	refNode := eniNode
	if !c.sharedNode {
		if refNode, err = b.newNode("node-ref"); err != nil {
			return err
		}
	}
	nEni := max(c.n, c.burst, c.gcAllocs)
	nRef := max(c.n, c.burst)
	b.eni = &plugin{key: "eni", label: "eni-cni", bin: c.eniBin, cniPath: filepath.Dir(c.eniBin), node: eniNode,
		subnet: "10.99.0.0/24", stateDir: filepath.Join(b.work, "eni-state")}
	b.ref = &plugin{key: "ref", label: "ptp+host-local", bin: filepath.Join(c.tools, "bin/ptp"), cniPath: filepath.Join(c.tools, "bin"),
		node: refNode, subnet: "10.98.0.0/24", stateDir: filepath.Join(b.work, "host-local")}
	b.collectVersions()
	b.logf("%s; creating %d pod namespaces", b.res.ENIVersion, nEni+nRef+2*c.gone)
	if b.eni.pods, err = b.newPods("e", nEni); err != nil {
		return err
	}
	if b.ref.pods, err = b.newPods("r", nRef); err != nil {
		return err
	}
	if b.eni.gone, err = b.newPods("eg", c.gone); err != nil {
		return err
	}
	if b.ref.gone, err = b.newPods("rg", c.gone); err != nil {
		return err
	}
	b.eni.conf = map[string]any{
		"cniVersion": "1.0.0", "name": "bench-eni", "type": "eni-cni",
		"stateDir": b.eni.stateDir, "mtu": c.mtu, "cooldownSeconds": c.cooldown,
		"pool": map[string]any{"source": "static", "ranges": []string{b.eni.subnet}},
	}
	b.ref.conf = map[string]any{
		"cniVersion": "1.0.0", "name": "bench-ref", "type": "ptp", "ipMasq": false, "mtu": c.mtu,
		"ipam": map[string]any{
			"type": "host-local", "dataDir": b.ref.stateDir,
			"ranges": [][]map[string]string{{{"subnet": b.ref.subnet}}},
			"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
		},
	}
	return b.verifyExecNetns()
}

// sweepOldRuns removes what a killed earlier run left: namespaces and work
// dirs named after a pid that no longer runs.
func (b *bench) sweepOldRuns() {
	dead := func(name, prefix string) bool {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			return false
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			return false
		}
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	if ents, err := os.ReadDir(nsRunDir); err == nil {
		for _, e := range ents {
			if dead(e.Name(), nsPrefix) {
				if err := deleteNamedNS(e.Name()); err == nil {
					b.logf("removed namespace %s of an earlier run", e.Name())
				}
			}
		}
	}
	if ents, err := os.ReadDir(b.cfg.workRoot); err == nil {
		for _, e := range ents {
			if dead(e.Name(), "eni-cni-bench-") {
				os.RemoveAll(filepath.Join(b.cfg.workRoot, e.Name()))
				b.logf("removed %s of an earlier run", filepath.Join(b.cfg.workRoot, e.Name()))
			}
		}
	}
}

// buildTrivial builds the exec floor: a static Go binary that prints a
// VERSION answer and exits.
func (b *bench) buildTrivial(ctx context.Context) error {
	dir := filepath.Join(b.work, "trivial")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	src := "package main\n\nimport \"os\"\n\nfunc main() {\n\tos.Stdout.WriteString(`{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.3.1\",\"0.4.0\",\"1.0.0\",\"1.1.0\"]}` + \"\\n\")\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module trivial\n\ngo 1.22\n"), 0o644); err != nil {
		return err
	}
	b.trivial = filepath.Join(dir, "trivial")
	cmd := exec.CommandContext(ctx, b.cfg.goCmd, "build", "-trimpath", "-ldflags=-s -w", "-o", b.trivial, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build trivial binary: %w\n%s", err, out)
	}
	return nil
}

// createNamespaces creates named network namespaces from one locked thread
// that is thrown away afterwards (unshare moves the thread itself).
func (b *bench) createNamespaces(names []string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread ends with the goroutine.
		for _, n := range names {
			h, err := netns.NewNamed(n)
			if err != nil {
				errc <- fmt.Errorf("create namespace %s: %w", n, err)
				return
			}
			h.Close()
			b.mu.Lock()
			b.nsNames = append(b.nsNames, n)
			b.mu.Unlock()
		}
		errc <- nil
	}()
	return <-errc
}

func (b *bench) newNode(suffix string) (*node, error) {
	name := b.prefix + suffix
	if err := b.createNamespaces([]string{name}); err != nil {
		return nil, err
	}
	n := &node{name: name, path: filepath.Join(nsRunDir, name)}
	var err error
	if n.ns, err = netns.GetFromPath(n.path); err != nil {
		return nil, err
	}
	b.nodes = append(b.nodes, n)
	if n.h, err = netlink.NewHandleAt(n.ns); err != nil {
		return nil, err
	}
	lo, err := n.h.LinkByName("lo")
	if err != nil {
		return nil, err
	}
	if err := n.h.LinkSetUp(lo); err != nil {
		return nil, err
	}
	// A node runs with forwarding on; both plugins then only read it.
	return n, b.inNS(n.ns, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	})
}

func (b *bench) newPods(tag string, count int) ([]*pod, error) {
	pods := make([]*pod, count)
	names := make([]string, count)
	for i := range pods {
		names[i] = fmt.Sprintf("%s%s%d", b.prefix, tag, i)
		pods[i] = &pod{name: names[i], path: filepath.Join(nsRunDir, names[i]), index: i}
	}
	return pods, b.createNamespaces(names)
}

// inNS runs fn on a thread in namespace ns and moves the thread back.
func (b *bench) inNS(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns: %w", err)
	}
	err := fn()
	if rerr := netns.Set(b.rootNS); rerr != nil {
		// The thread stays locked and dies with this goroutine... which is
		// the main one: better to stop here than to run anything in a
		// pod's namespace by mistake.
		panic(fmt.Sprintf("cannot return to the root netns: %v", rerr))
	}
	runtime.UnlockOSThread()
	return err
}

// verifyExecNetns proves that a child exec'ed by execIn starts in the node
// namespace (Go forks from the calling thread, which inherits its netns).
func (b *bench) verifyExecNetns() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, n := range b.nodes {
		var st unix.Stat_t
		if err := unix.Stat(n.path, &st); err != nil {
			return err
		}
		want := fmt.Sprintf("net:[%d]", st.Ino)
		for range 5 {
			r, err := b.execIn(n.ns, self, nil, []string{childEnv + "=netns"}, nil)
			if err != nil {
				return err
			}
			if got := strings.TrimSpace(string(r.stdout)); got != want {
				return fmt.Errorf("child exec'ed for %s started in %s, want %s: fork/exec does not inherit the thread's netns here", n.name, got, want)
			}
		}
	}
	b.logf("verified: children fork/exec'ed from a thread in the node namespace start there")
	return nil
}

// ---------------------------------------------------------------- exec

type execResult struct {
	wall           time.Duration
	user, sys      time.Duration
	maxRSS         int64 // KiB
	exit           int
	stdout, stderr []byte
}

// execIn starts bin from a thread in namespace ns, as a runtime starts a
// plugin: environment, stdin piped, stdout and stderr captured. The wall
// time runs from just before fork to the end of Wait; CPU comes from
// wait4's rusage, which covers the child and the children it waited for
// (ptp's host-local). Its ru_maxrss is the harness's own (see phaseRSS).
func (b *bench) execIn(ns netns.NsHandle, bin string, args, env []string, stdin []byte) (execResult, error) {
	var r execResult
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(stdin)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	runtime.LockOSThread()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return r, fmt.Errorf("setns: %w", err)
	}
	t0 := time.Now()
	err := cmd.Start()
	if rerr := netns.Set(b.rootNS); rerr != nil {
		panic(fmt.Sprintf("cannot return to the root netns: %v", rerr))
	}
	runtime.UnlockOSThread()
	if err != nil {
		return r, fmt.Errorf("start %s: %w", bin, err)
	}
	werr := cmd.Wait()
	r.wall = time.Since(t0)
	r.stdout, r.stderr = so.Bytes(), se.Bytes()
	if ps := cmd.ProcessState; ps != nil {
		r.exit = ps.ExitCode()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			r.user = time.Duration(ru.Utime.Nano())
			r.sys = time.Duration(ru.Stime.Nano())
			r.maxRSS = ru.Maxrss
		}
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return r, fmt.Errorf("run %s: %w", bin, werr)
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("run %s: timed out after %s", bin, opTimeout)
	}
	return r, nil
}

func (b *bench) record(s sample) {
	b.mu.Lock()
	b.samples = append(b.samples, s)
	b.mu.Unlock()
}

func (b *bench) recordExec(phase string, p string, op string, index, round int, r execResult) {
	b.recordExecFill(phase, p, op, index, round, -1, r)
}

// recordExecFill records a timed exec. Its ru_maxrss is not kept: see
// phaseRSS.
func (b *bench) recordExecFill(phase string, p string, op string, index, round, fill int, r execResult) {
	b.record(sample{Phase: phase, Plugin: p, Op: op, Index: index, Round: round, Fill: fill, Wall: r.wall, User: r.user, Sys: r.sys})
}

// ---------------------------------------------------------------- CNI calls

// cidSeq numbers sandboxes; bursts take IDs from many goroutines.
var cidSeq atomic.Uint64

func (p *plugin) newCID() string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d/%s/%d", os.Getpid(), p.key, cidSeq.Add(1)))
	return hex.EncodeToString(sum[:])
}

// stdin is the network configuration with extra top-level keys.
func (p *plugin) stdin(extra map[string]any) []byte {
	m := make(map[string]any, len(p.conf)+len(extra))
	for k, v := range p.conf {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	data, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return data
}

func (p *plugin) env(verb string, pd *pod, netnsPath string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"CNI_COMMAND=" + verb,
		"CNI_CONTAINERID=" + pd.cid,
		"CNI_NETNS=" + netnsPath,
		"CNI_IFNAME=" + ifName,
		"CNI_PATH=" + p.cniPath,
		fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-%d;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=uid-%s",
			pd.index, pd.cid, pd.cid[:16]),
	}
}

// call execs one verb of the plugin for pod pd and fails on a non-zero exit.
func (b *bench) call(p *plugin, verb string, pd *pod, netnsPath string, stdin []byte) (execResult, error) {
	r, err := b.execIn(p.node.ns, p.bin, nil, p.env(verb, pd, netnsPath), stdin)
	if err != nil {
		return r, fmt.Errorf("%s %s %s: %w", p.label, verb, pd.name, err)
	}
	if r.exit != 0 {
		return r, fmt.Errorf("%s %s %s (sandbox %s): exit %d: %s %s", p.label, verb, pd.name, pd.cid[:12], r.exit,
			bytes.TrimSpace(r.stdout), bytes.TrimSpace(r.stderr))
	}
	return r, nil
}

// add attaches a new sandbox to pd (or the one already set in pd.cid).
func (b *bench) add(p *plugin, pd *pod) (execResult, error) {
	if pd.cid == "" {
		pd.cid = p.newCID()
	}
	r, err := b.call(p, "ADD", pd, pd.path, p.stdin(nil))
	if err != nil {
		return r, err
	}
	var res struct {
		Interfaces []struct {
			Name    string `json:"name"`
			Sandbox string `json:"sandbox"`
		} `json:"interfaces"`
	}
	if err := json.Unmarshal(r.stdout, &res); err != nil {
		return r, fmt.Errorf("%s ADD %s: result: %w: %s", p.label, pd.name, err, r.stdout)
	}
	pd.result, pd.hostVeth = r.stdout, ""
	for _, i := range res.Interfaces {
		if i.Sandbox == "" {
			pd.hostVeth = i.Name
		}
	}
	return r, nil
}

func (b *bench) check(p *plugin, pd *pod) (execResult, error) {
	return b.call(p, "CHECK", pd, pd.path, p.stdin(map[string]any{"prevResult": json.RawMessage(pd.result)}))
}

// del detaches pd's sandbox; netnsPath is pd.path or "" (netns gone).
func (b *bench) del(p *plugin, pd *pod, netnsPath string) (execResult, error) {
	extra := map[string]any{}
	if pd.result != nil {
		extra["prevResult"] = json.RawMessage(pd.result)
	}
	r, err := b.call(p, "DEL", pd, netnsPath, p.stdin(extra))
	if err == nil {
		pd.cid, pd.result, pd.hostVeth = "", nil, ""
	}
	return r, err
}

// both returns the plugins in the order of round i: alternating which goes
// first, so neither always runs right after the other's cache warm-up.
func (b *bench) both(i int) []*plugin {
	if i%2 == 0 {
		return []*plugin{b.eni, b.ref}
	}
	return []*plugin{b.ref, b.eni}
}

// ---------------------------------------------------------------- clean-up

func deleteNamedNS(name string) error {
	path := filepath.Join(nsRunDir, name)
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// removePods deletes pod namespaces before the end of the run.
func (b *bench) removePods(pods []*pod) error {
	var errs []error
	for _, pd := range pods {
		if err := deleteNamedNS(pd.name); err != nil {
			errs = append(errs, fmt.Errorf("delete namespace %s: %w", pd.name, err))
		}
	}
	return errors.Join(errs...)
}

// cleanup removes every namespace and file of the run except the outputs.
// It runs once, on success, failure, panic of the main goroutine and
// SIGINT/SIGTERM.
func (b *bench) cleanup() {
	b.mu.Lock()
	if b.cleaned {
		b.mu.Unlock()
		return
	}
	b.cleaned = true
	names := append([]string(nil), b.nsNames...)
	procs := b.procs
	b.mu.Unlock()
	for _, p := range procs {
		p.Signal(os.Interrupt)
	}
	// Warm passes that the dry-pool phase's ADDs started and that still run.
	if b.work != "" {
		for _, pid := range warmPIDsUnder(b.work) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for _, n := range b.nodes {
		if n.h != nil {
			n.h.Close()
		}
		n.ns.Close()
	}
	var failed []string
	for _, n := range names {
		if err := deleteNamedNS(n); err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", n, err))
		}
	}
	if b.work != "" {
		if err := os.RemoveAll(b.work); err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", b.work, err))
		}
	}
	// Nothing of ours may be left: no namespace of this run, and no new
	// link in the root namespace (a plugin exec'ed in the wrong place).
	if ents, err := os.ReadDir(nsRunDir); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), b.prefix) {
				failed = append(failed, "namespace "+e.Name()+" still exists")
			}
		}
	}
	if b.rootLinks != nil {
		for name := range linkNames(nil) {
			if !b.rootLinks[name] && (strings.HasPrefix(name, "eni") || strings.HasPrefix(name, "veth")) {
				failed = append(failed, "new link "+name+" in the root namespace")
			}
		}
	}
	if b.rootNS >= 0 {
		b.rootNS.Close()
	}
	if len(failed) > 0 {
		b.logf("cleanup: LEFT BEHIND: %s", strings.Join(failed, "; "))
		return
	}
	b.logf("cleanup: removed %d namespaces and %s; nothing left behind", len(names), b.work)
}

// linkNames lists the links of the namespace of h (nil: this thread's).
func linkNames(h *netlink.Handle) map[string]bool {
	var links []netlink.Link
	var err error
	for range 5 {
		if h == nil {
			links, err = netlink.LinkList()
		} else {
			links, err = h.LinkList()
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	m := map[string]bool{}
	for _, l := range links {
		m[l.Attrs().Name] = true
	}
	return m
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
