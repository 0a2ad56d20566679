package main

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/atomicfile"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
	eniplugin "github.com/eni-cni/eni-cni/plugin"
)

// ---------------------------------------------------------------- pprof

// timedStore wraps the disk store and accumulates the time of each store
// operation.
type timedStore struct {
	alloc.Store
	lock, load, save, unlock time.Duration
}

func (t *timedStore) Lock(ctx context.Context) error {
	t0 := time.Now()
	err := t.Store.Lock(ctx)
	t.lock += time.Since(t0)
	return err
}

func (t *timedStore) Unlock() error {
	t0 := time.Now()
	err := t.Store.Unlock()
	t.unlock += time.Since(t0)
	return err
}

func (t *timedStore) Load() (*alloc.State, error) {
	t0 := time.Now()
	st, err := t.Store.Load()
	t.load += time.Since(t0)
	return st, err
}

func (t *timedStore) Save(st *alloc.State) error {
	t0 := time.Now()
	err := t.Store.Save(st)
	t.save += time.Since(t0)
	return err
}

func (t *timedStore) reset() { t.lock, t.load, t.save, t.unlock = 0, 0, 0, 0 }

// timedWire wraps the node's wiring (eniplugin.Kernel) and accumulates the
// time of each kernel step.
type timedWire struct {
	eniplugin.Kernel
	setup, unroute, deleteVeths time.Duration
}

func (t *timedWire) Setup(p netsetup.Pod) (netsetup.Links, error) {
	t0 := time.Now()
	l, err := t.Kernel.Setup(p)
	t.setup += time.Since(t0)
	return l, err
}

func (t *timedWire) Unroute(a []netsetup.Attachment) error {
	t0 := time.Now()
	err := t.Kernel.Unroute(a)
	t.unroute += time.Since(t0)
	return err
}

func (t *timedWire) DeleteVeths(names ...string) error {
	t0 := time.Now()
	err := t.Kernel.DeleteVeths(names...)
	t.deleteVeths += time.Since(t0)
	return err
}

func (t *timedWire) reset() { t.setup, t.unroute, t.deleteVeths = 0, 0, 0 }

// steps of one in-process verb, in order; the durations go to samples.
type stepTimer struct {
	names []string
	d     map[string]time.Duration
	last  time.Time
}

func newStepTimer() *stepTimer { return &stepTimer{d: map[string]time.Duration{}, last: time.Now()} }

func (s *stepTimer) mark(name string) {
	now := time.Now()
	if _, ok := s.d[name]; !ok {
		s.names = append(s.names, name)
	}
	s.d[name] += now.Sub(s.last)
	s.last = now
}

func (s *stepTimer) add(name string, d time.Duration) {
	if _, ok := s.d[name]; !ok {
		s.names = append(s.names, name)
	}
	s.d[name] += d
}

// openTimed is the plugin a CNI verb builds from its stdin (package
// plugin, as the binary's skel adapter calls it), with its store and wiring
// timed.
func openTimed(s *stepTimer, stdin []byte, ts *timedStore, tw *timedWire) (*eniplugin.Plugin, *netconf.Config, error) {
	cfg, err := netconf.Parse(stdin)
	if err != nil {
		return nil, nil, err
	}
	s.mark("decode config")
	// A static pool: the provider needs nothing of the full build.
	p, err := eniplugin.OpenWith(cfg, nil, tw)
	if err != nil {
		return nil, nil, err
	}
	ts.Store, p.Mgr.Store = p.Mgr.Store, ts
	s.mark("open store, boot id")
	ts.reset()
	tw.reset()
	return p, cfg, nil
}

// inprocAdd is the code path of `eni-cni` ADD with a static pool: the
// plugin's own (plugin.Attach: check the netns, allocate under the lock,
// wire with netsetup.Setup), then the result printed and one log line, as
// plugin.CNI.Add does them.
func inprocAdd(stdin []byte, cid, netnsPath string, podIndex int, ts *timedStore, tw *timedWire) (*stepTimer, alloc.Allocation, error) {
	var a alloc.Allocation
	s := newStepTimer()
	p, cfg, err := openTimed(s, stdin, ts, tw)
	if err != nil {
		return s, a, err
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	args := &skel.CmdArgs{ContainerID: cid, Netns: netnsPath, IfName: ifName, StdinData: stdin,
		Args: fmt.Sprintf("K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-%d;K8S_POD_UID=uid-%s", podIndex, cid[:16])}
	res, attrs, err := p.Attach(context.Background(), args)
	s.mark("plugin.Attach (check netns, allocate, wire)")
	if err != nil {
		return s, a, err
	}
	a.IP, _ = netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
	out, err := res.GetAsVersion(cfg.CNIVersion)
	if err != nil {
		return s, a, err
	}
	if err := out.PrintTo(io.Discard); err != nil {
		return s, a, err
	}
	s.mark("print result")
	logger.Info("ADD", append([]any{"network", cfg.Network, "containerID", cid, "ifname", ifName}, attrs...)...)
	s.mark("log line")
	s.add("  allocate: flock", ts.lock)
	s.add("  allocate: load (read + JSON decode + validate)", ts.load)
	s.add("  allocate: save (JSON encode + write + fsync + rename + fsync dir)", ts.save)
	s.add("  allocate: unlock", ts.unlock)
	s.add("  wire: netsetup.Setup (veth, addresses, routes, neighbour, host route, rule)", tw.setup)
	return s, a, nil
}

// inprocDel is the DEL path, the plugin's own (plugin.Detach): look up,
// unroute and release under one hold of the lock, the veth deleted beside
// the save.
func inprocDel(stdin []byte, cid string, ts *timedStore, tw *timedWire) (*stepTimer, error) {
	s := newStepTimer()
	p, _, err := openTimed(s, stdin, ts, tw)
	if err != nil {
		return s, err
	}
	err = p.Detach(context.Background(), &skel.CmdArgs{ContainerID: cid, IfName: ifName, StdinData: stdin})
	s.mark("plugin.Detach (lock, load, unroute, save, unlock; veth deleted meanwhile)")
	if err != nil {
		return s, err
	}
	s.add("  store: save (JSON encode + write + fsync + rename + fsync dir)", ts.save)
	s.add("  wire: netsetup.Unroute (list + delete rules, host route)", tw.unroute)
	s.add("  wire: netsetup.DeleteVeths", tw.deleteVeths)
	return s, nil
}

// phaseProfile runs the ADD (and DEL) code path in process, many times,
// under a CPU profile: an exec'ed plugin lives too briefly for pprof. The
// loop runs on a thread moved into a fresh node namespace. Each round's ADDs
// and DELs are profiled into separate files, merged afterwards into
// add-cpu.pprof and del-cpu.pprof, so each profile holds one verb only.
func (b *bench) phaseProfile(ctx context.Context) error {
	if b.cfg.profileAdds <= 0 {
		b.logf("  skipped (-profile-adds 0)")
		return nil
	}
	n, err := b.newNode("node-prof")
	if err != nil {
		return err
	}
	pods := b.eni.pods[:min(len(b.eni.pods), 200)]
	conf := make(map[string]any, len(b.eni.conf))
	for k, v := range b.eni.conf {
		conf[k] = v
	}
	stateDir := filepath.Join(b.work, "prof-state")
	conf["stateDir"] = stateDir
	stdin, _ := json.Marshal(conf)
	roundDir := filepath.Join(b.work, "pprof-rounds")
	if err := os.MkdirAll(roundDir, 0o755); err != nil {
		return err
	}
	var files = map[string][]string{}
	profiling := false
	startProf := func(verb string, round int) error {
		path := filepath.Join(roundDir, fmt.Sprintf("%s-%d.pprof", verb, round))
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		profiling = true
		files[verb] = append(files[verb], path)
		return nil
	}
	stopProf := func() {
		if profiling {
			pprof.StopCPUProfile()
			profiling = false
		}
	}
	defer stopProf()

	runtime.LockOSThread()
	if err := netns.Set(n.ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer func() {
		if err := netns.Set(b.rootNS); err != nil {
			panic(fmt.Sprintf("cannot return to the root netns: %v", err))
		}
		runtime.UnlockOSThread()
	}()
	ts, tw := &timedStore{}, &timedWire{}
	done := 0
	var full []byte // the state file with len(pods) allocations
	type held struct {
		cid string
		ip  netip.Addr
	}
	for round := 0; done < b.cfg.profileAdds; round++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		var attached []held
		if err := startProf("add", round); err != nil {
			return err
		}
		for i := 0; i < len(pods) && done < b.cfg.profileAdds; i++ {
			cid := fmt.Sprintf("%064x", uint64(round)<<32|uint64(i)+1)
			t0 := time.Now()
			s, a, err := inprocAdd(stdin, cid, pods[i].path, i, ts, tw)
			total := time.Since(t0)
			if err != nil {
				return fmt.Errorf("in-process ADD %d: %w", done, err)
			}
			b.recordSteps("ADD", done, i, total, s)
			attached = append(attached, held{cid, a.IP})
			done++
		}
		stopProf()
		if round == 0 {
			full, _ = os.ReadFile(filepath.Join(stateDir, alloc.StateFileName))
		}
		if err := startProf("del", round); err != nil {
			return err
		}
		for i, h := range attached {
			t0 := time.Now()
			s, err := inprocDel(stdin, h.cid, ts, tw)
			total := time.Since(t0)
			if err != nil {
				return fmt.Errorf("in-process DEL: %w", err)
			}
			b.recordSteps("DEL", round*len(pods)+i, len(attached)-i, total, s)
		}
		stopProf()
		time.Sleep(time.Duration(b.cfg.cooldown*float64(time.Second)) + 100*time.Millisecond)
	}
	b.res.JSONCost = jsonCost(full)
	b.res.Floors = kernelFloors(pods[0].path, filepath.Join(b.work, "floor"), 100, len(full))
	for _, verb := range []string{"add", "del"} {
		out := filepath.Join(b.out, verb+"-cpu.pprof")
		if err := b.mergeProfiles(ctx, out, files[verb]); err != nil {
			b.logf("  merge %s profiles: %v", verb, err)
			continue
		}
		b.logf("  %d in-process %s runs profiled -> %s", done, strings.ToUpper(verb), out)
	}
	b.pprofTops(ctx)
	return nil
}

// mergeProfiles merges CPU profiles with `go tool pprof -proto`.
func (b *bench) mergeProfiles(ctx context.Context, out string, in []string) error {
	cmd := exec.CommandContext(ctx, b.cfg.goCmd, append([]string{"tool", "pprof", "-proto"}, in...)...)
	data, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go tool pprof -proto: %w", err)
	}
	return os.WriteFile(out, data, 0o644)
}

func (b *bench) recordSteps(op string, i, fill int, total time.Duration, s *stepTimer) {
	b.record(sample{Phase: "inproc", Plugin: "eni", Op: op + "/total", Index: i, Fill: fill, Wall: total})
	for _, name := range s.names {
		b.record(sample{Phase: "inproc", Plugin: "eni", Op: op + "/" + name, Index: i, Fill: fill, Wall: s.d[name]})
	}
	b.mu.Lock()
	if b.res.stepOrder == nil {
		b.res.stepOrder = map[string][]string{}
	}
	if len(b.res.stepOrder[op]) < len(s.names) {
		b.res.stepOrder[op] = s.names
	}
	b.mu.Unlock()
}

// pprofTops writes `go tool pprof -top` views of the profiles.
func (b *bench) pprofTops(ctx context.Context) {
	views := []struct{ file, prof, flags string }{
		{"add-cpu-top.txt", "add-cpu.pprof", "-top -nodecount=40"},
		{"add-cpu-top-cum.txt", "add-cpu.pprof", "-top -cum -nodecount=70"},
		{"del-cpu-top.txt", "del-cpu.pprof", "-top -nodecount=30"},
	}
	for _, v := range views {
		prof := filepath.Join(b.out, v.prof)
		if _, err := os.Stat(prof); err != nil {
			continue
		}
		args := append([]string{"tool", "pprof"}, strings.Fields(v.flags)...)
		out, err := exec.CommandContext(ctx, b.cfg.goCmd, append(args, prof)...).CombinedOutput()
		if err != nil {
			b.logf("  go tool pprof %s: %v: %s", v.flags, err, out)
			continue
		}
		os.WriteFile(filepath.Join(b.out, v.file), out, 0o644)
		switch v.file {
		case "add-cpu-top.txt":
			b.res.PprofTop = string(out)
		case "add-cpu-top-cum.txt":
			b.res.PprofCum = string(out)
		}
	}
}

// ---------------------------------------------------------------- perf

// phasePerf records the whole machine with perf while exec'ed ADDs of both
// plugins run, then reports the samples of the eni-cni, ptp and host-local
// processes: exec, page faults, Go runtime start-up and kernel netlink work
// are all visible, which an in-process pprof cannot show. eni-cni runs as an
// unstripped build of the same tree so that perf can name its functions.
func (b *bench) phasePerf(ctx context.Context) error {
	perfBin, err := exec.LookPath("perf")
	if b.cfg.perfN <= 0 || err != nil {
		b.res.PerfNote = "perf not run (not installed, or -perf-n 0)"
		b.logf("  skipped: %s", b.res.PerfNote)
		return nil
	}
	dir := filepath.Join(b.out, "perf")
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	syms := filepath.Join(dir, "eni-cni")
	args, env, err := symbolBuild(b.cfg.eniBin)
	if err != nil {
		b.res.PerfNote = "perf not run: " + err.Error()
		b.logf("  skipped: %s", b.res.PerfNote)
		return nil
	}
	build := exec.CommandContext(ctx, b.cfg.goCmd, append(append([]string{"build"}, args...), "-o", syms, ".")...)
	build.Dir = b.cfg.repo
	build.Env = append(os.Environ(), env...)
	if out, err := build.CombinedOutput(); err != nil {
		b.res.PerfNote = fmt.Sprintf("perf not run: build of eni-cni with symbols (go build %s) failed: %v", strings.Join(args, " "), err)
		b.logf("  skipped: %s\n%s", b.res.PerfNote, out)
		return nil
	}
	b.res.PerfBuild = "go build " + strings.Join(args, " ")
	data := filepath.Join(dir, "perf.data")
	rec := exec.Command(perfBin, "record", "-a", "-g", "-e", "cpu-clock", "-F", "4999", "-o", data)
	var recOut strings.Builder
	rec.Stdout, rec.Stderr = &recOut, &recOut
	if err := rec.Start(); err != nil {
		return fmt.Errorf("perf record: %w", err)
	}
	b.mu.Lock()
	b.procs = append(b.procs, rec.Process)
	b.mu.Unlock()
	time.Sleep(time.Second) // perf has opened its events
	eniSyms := *b.eni
	eniSyms.bin = syms
	plugins := map[string]*plugin{"eni": &eniSyms, "ref": b.ref}
	count := min(b.cfg.perfN, len(b.eni.pods), len(b.ref.pods))
	var runErr error
	for i := 0; i < count && runErr == nil; i++ {
		for _, p := range b.both(i) {
			if _, err := b.add(plugins[p.key], p.pods[i]); err != nil {
				runErr = err
				break
			}
		}
	}
	rec.Process.Signal(os.Interrupt)
	werr := rec.Wait()
	b.mu.Lock()
	b.procs = b.procs[:len(b.procs)-1]
	b.mu.Unlock()
	if runErr != nil {
		return runErr
	}
	if _, err := os.Stat(data); err != nil {
		b.res.PerfNote = fmt.Sprintf("perf not run: perf record wrote nothing (%v): %s", werr, recOut.String())
		b.logf("  %s", b.res.PerfNote)
		return nil
	}
	for i := range count {
		for _, p := range b.both(i) {
			if _, err := b.del(p, p.pods[i], p.pods[i].path); err != nil {
				return err
			}
		}
	}
	time.Sleep(time.Duration(b.cfg.cooldown*float64(time.Second)) + 100*time.Millisecond)
	// perf report's --comm filter loses samples here (perf 6.1), so report
	// by comm and split the listing per process ourselves.
	report := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, perfBin, append([]string{"report", "-i", data, "--stdio"}, args...)...).Output()
		return string(out), err
	}
	byComm, err := report("--no-children", "--sort", "comm", "-g", "none")
	if err != nil {
		b.res.PerfNote = fmt.Sprintf("perf report failed: %v", err)
		return nil
	}
	os.WriteFile(filepath.Join(dir, "by-comm.txt"), []byte(byComm), 0o644)
	b.res.PerfComm = byComm
	self, err1 := report("--no-children", "--sort", "comm,dso,sym", "-g", "none")
	children, err2 := report("--children", "--sort", "comm,sym", "-g", "none")
	if err1 != nil || err2 != nil {
		b.res.PerfNote = fmt.Sprintf("perf report failed: %v %v", err1, err2)
		return nil
	}
	for _, comm := range []string{"eni-cni", "ptp", "host-local"} {
		share := commShare(byComm, comm)
		if share == 0 {
			continue
		}
		selfTxt, kernel := perComm(self, comm, share, 1, 0.3)
		childTxt, _ := perComm(children, comm, share, 2, 1.5)
		os.WriteFile(filepath.Join(dir, comm+"-self.txt"), []byte(selfTxt), 0o644)
		os.WriteFile(filepath.Join(dir, comm+"-children.txt"), []byte(childTxt), 0o644)
		b.res.PerfSplit = append(b.res.PerfSplit, fmt.Sprintf("%s: %.0f%% of its samples in the kernel, %.0f%% in user space", comm, kernel, 100-kernel))
		if comm == "eni-cni" {
			b.res.PerfSelf, b.res.PerfChildren = selfTxt, childTxt
		}
	}
	b.res.PerfNote = fmt.Sprintf("perf: `perf record -a -g -e cpu-clock -F 4999` while %d exec'ed ADDs per plugin ran, reported per process name; eni-cni ran as a copy built from the same tree with the build settings recorded in %s minus `-s -w` (`%s`), so perf can name its functions", count, b.rel(b.cfg.eniBin), b.res.PerfBuild)
	b.logf("  perf: %d ADDs per plugin recorded -> %s", count, dir)
	return nil
}

// jsonCost times the state file's own encoding and decoding
// (alloc.EncodeState, alloc.DecodeState: what every save and load runs) of
// a full state.
func jsonCost(data []byte) string {
	if len(data) == 0 {
		return ""
	}
	var st alloc.State
	if err := json.Unmarshal(data, &st); err != nil {
		return ""
	}
	const reps = 200
	dec := make([]float64, reps)
	enc := make([]float64, reps)
	for i := range reps {
		t0 := time.Now()
		b, err := alloc.EncodeState(&st)
		enc[i] = ms(time.Since(t0))
		if err != nil {
			return ""
		}
		t0 = time.Now()
		if _, err := alloc.DecodeState(b); err != nil {
			return ""
		}
		dec[i] = ms(time.Since(t0))
	}
	return fmt.Sprintf("state file with %d allocations: %d bytes; the store's decode (JSON + validation) p50 %.3f ms, encode p50 %.3f ms (in process, warm)",
		len(st.Allocations), len(data), summarize(dec).P50, summarize(enc).P50)
}

// symbolBuild returns the go build flags and environment that made bin (as
// recorded in its build info: tags, ldflags, CGO_ENABLED, trimpath), without
// the -s and -w that strip its symbols.
func symbolBuild(bin string) (args, env []string, err error) {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, nil, fmt.Errorf("read build info of %s: %w", bin, err)
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "-tags":
			args = append(args, "-tags", s.Value)
		case "-trimpath":
			if s.Value == "true" {
				args = append(args, "-trimpath")
			}
		case "-ldflags":
			var keep []string
			for _, f := range strings.Fields(s.Value) {
				if f != "-s" && f != "-w" {
					keep = append(keep, f)
				}
			}
			if len(keep) > 0 {
				args = append(args, "-ldflags", strings.Join(keep, " "))
			}
		case "CGO_ENABLED":
			env = append(env, "CGO_ENABLED="+s.Value)
		}
	}
	return args, env, nil
}

// floorRow is the cost of one primitive, measured alone.
type floorRow struct {
	Name     string  `json:"name"`
	P50, P90 float64 `json:"-"`
	P50ms    float64 `json:"p50ms"`
	P90ms    float64 `json:"p90ms"`
}

// kernelFloors times, in process on this thread's (node) namespace, the
// primitives that bound ADD and DEL: creating a veth pair with its peer in
// a pod namespace, deleting it, and the store's atomic save (temp file,
// write, fsync, rename, fsync of the directory) at two sizes, with and
// without the fsyncs.
func kernelFloors(podPath, dir string, reps, stateSize int) []floorRow {
	var rows []floorRow
	add := func(name string, xs []float64) {
		if len(xs) == 0 {
			return
		}
		d := summarize(xs)
		rows = append(rows, floorRow{Name: name, P50: d.P50, P90: d.P90, P50ms: d.P50, P90ms: d.P90})
	}
	podNS, err := netns.GetFromPath(podPath)
	if err == nil {
		var create, del []float64
		for i := range reps {
			name := fmt.Sprintf("flr%012d", i)
			veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: 9001, TxQLen: -1}, PeerName: ifName,
				PeerNamespace: netlink.NsFd(podNS), PeerMTU: 9001, PeerTxQLen: -1}
			t0 := time.Now()
			if err := netlink.LinkAdd(veth); err != nil {
				break
			}
			create = append(create, ms(time.Since(t0)))
			link, err := netlink.LinkByName(name)
			if err != nil {
				break
			}
			t0 = time.Now()
			if err := netlink.LinkDel(link); err != nil {
				break
			}
			del = append(del, ms(time.Since(t0)))
		}
		podNS.Close()
		add("netlink: create a veth pair, peer in the pod netns (LinkAdd)", create)
		add("netlink: delete a veth pair (LinkDel; the kernel waits for RCU grace periods)", del)
	}
	if err := os.MkdirAll(dir, 0o700); err == nil {
		if stateSize <= 0 {
			stateSize = 80 << 10
		}
		for _, size := range []int{1 << 10, stateSize} {
			data := make([]byte, size)
			for i := range data {
				data[i] = 'x'
			}
			for _, sync := range []bool{true, false} {
				var xs []float64
				for range reps {
					t0 := time.Now()
					if err := atomicWrite(filepath.Join(dir, "state.json"), data, sync); err != nil {
						break
					}
					xs = append(xs, ms(time.Since(t0)))
				}
				how := "temp file, write, fsync, rename, fsync dir"
				if !sync {
					how = "the same without the two fsyncs"
				}
				add(fmt.Sprintf("atomic save of %d bytes: %s", size, how), xs)
			}
		}
	}
	return rows
}

// atomicWrite is the state file's save (atomicfile) or, without sync,
// the same steps without the two fsyncs, to show what they cost.
func atomicWrite(path string, data []byte, sync bool) error {
	if sync {
		return atomicfile.WriteFile(path, data, 0o600)
	}
	tmp := path + ".tmp-nosync"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// commShare is comm's percentage of all samples in a `--sort comm` report.
func commShare(report, comm string) float64 {
	for _, l := range strings.Split(report, "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[1] == comm && strings.HasSuffix(f[0], "%") {
			v, _ := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
			return v
		}
	}
	return 0
}

// perComm takes the lines of process comm from a report sorted by comm
// first, with npct leading percentage columns, rescales them to shares of
// that process's samples (share: its percentage of all samples), drops
// those under limit, and returns them with the process's kernel share.
func perComm(report, comm string, share float64, npct int, limit float64) (string, float64) {
	var out strings.Builder
	fmt.Fprintf(&out, "# %s: %% of its own samples (it had %.2f%% of all samples recorded)\n", comm, share)
	kernel := 0.0
	for _, l := range strings.Split(report, "\n") {
		f := strings.Fields(l)
		if len(f) < npct+2 || f[npct] != comm {
			continue
		}
		vals := make([]float64, npct)
		ok := true
		for i := range npct {
			v, err := strconv.ParseFloat(strings.TrimSuffix(f[i], "%"), 64)
			if err != nil || !strings.HasSuffix(f[i], "%") {
				ok = false
				break
			}
			vals[i] = v / share * 100
		}
		if !ok {
			continue
		}
		rest := f[npct+1:]
		if npct == 1 && slices.Contains(rest, "[k]") {
			kernel += vals[0]
		}
		if vals[0] < limit {
			continue
		}
		for _, v := range vals {
			fmt.Fprintf(&out, "%7.2f%% ", v)
		}
		fmt.Fprintf(&out, " %s\n", strings.Join(rest, " "))
	}
	return out.String(), kernel
}
