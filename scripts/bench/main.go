// Command bench is the benchmark harness behind `make bench`.
//
// It times eni-cni (static pool) against the reference ptp + host-local
// plugins doing the same work, in network namespaces it creates: a "node"
// namespace per plugin and "pod" namespaces, all named ecnibench-<pid>-*.
// Every plugin call is a fork/exec from an OS thread that the harness has
// moved into the node namespace (no nsenter), with the network config on
// stdin and CNI_* in the environment, as a runtime does. Calls of the two
// plugins are interleaved, alternating which goes first, so noise from other
// jobs on the machine hits both alike.
//
// Phases: exec floor (VERSION), sequential ADD/CHECK/DEL, bursts of
// concurrent ADDs and DELs, DEL after the netns is gone, an optional perf
// profile of exec'ed ADDs, `eni-cni gc`/GC verb/`list` against an in-process
// CRI fake, EC2 call counts from the in-process EC2 fake, an in-process
// pprof CPU profile of the ADD code path, and bursts of static pods through
// a real kubelet and containerd (scripts/e2e/kubelet.sh --bench; alone with
// -only kubelet). Results: a table on stdout, and samples.csv,
// results.json, table.txt, the profiles and docs/BENCHMARKS.md.
//
// Run as root from the repository root: go run ./scripts/bench -h
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is the command line.
type config struct {
	eniBin      string
	tools       string
	repo        string
	out         string
	md          string
	workRoot    string
	goCmd       string
	install     bool
	sharedNode  bool
	n           int
	familyN     int
	burst       int
	burstRounds int
	gone        int
	execN       int
	gcAllocs    int
	gcSandboxes int
	gcDead      int
	gcReps      int
	gcRounds    int
	profileAdds int
	perfN       int
	cooldown    float64
	mtu         int
	quick       bool
	only        string
	kubeRounds  int
	kubePods    int
	drySizes    []int
	dryOld      bool
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	tools := os.Getenv("ENI_CNI_TOOLS")
	if tools == "" {
		tools = "/opt/eni-cni-test"
	}
	fs.StringVar(&c.eniBin, "eni-cni", "bin/eni-cni", "eni-cni binary to time (make build)")
	fs.StringVar(&c.tools, "tools", tools, "tools root of scripts/install-test-deps.sh; reference plugins in <tools>/bin")
	fs.StringVar(&c.repo, "repo", ".", "repository root (for scripts/install-test-deps.sh and the perf build)")
	fs.StringVar(&c.out, "out", "_out/bench", "output directory (samples, profiles, table)")
	fs.StringVar(&c.md, "md", "docs/BENCHMARKS.md", "markdown report to write (empty: none)")
	fs.StringVar(&c.workRoot, "work-root", "/var/tmp", "where the throwaway state dirs go (a disk-backed filesystem, like /var/lib)")
	fs.StringVar(&c.goCmd, "go", "go", "go command (builds the trivial binary and the perf copy, runs pprof)")
	fs.BoolVar(&c.install, "install", true, "run scripts/install-test-deps.sh first (installs ptp, host-local, ...)")
	fs.BoolVar(&c.sharedNode, "shared-node", false, "run both plugins in one node namespace instead of one each")
	fs.IntVar(&c.n, "n", 200, "sequential pods per plugin (ADD all, CHECK all, DEL all)")
	fs.IntVar(&c.familyN, "family-n", 20, "sequential pods per plugin and address family set (IPv4, IPv6, dual-stack, IPv6 with IPv4 egress; 0: skip, for a binary without ipFamilies)")
	fs.IntVar(&c.burst, "burst", 50, "concurrent ADDs (then DELs) per burst")
	fs.IntVar(&c.burstRounds, "burst-rounds", 3, "bursts per plugin")
	fs.IntVar(&c.gone, "gone", 50, "DELs with the netns gone, per plugin")
	fs.IntVar(&c.execN, "exec-n", 200, "VERSION execs per binary")
	fs.IntVar(&c.gcAllocs, "gc-allocs", 250, "allocations in the store for gc and list")
	fs.IntVar(&c.gcSandboxes, "gc-sandboxes", 1000, "sandboxes the fake CRI runtime lists")
	fs.IntVar(&c.gcDead, "gc-dead", 50, "allocations whose sandbox is not listed (freed by gc)")
	fs.IntVar(&c.gcReps, "gc-reps", 10, "repetitions of gc --dry-run and list")
	fs.IntVar(&c.gcRounds, "gc-rounds", 3, "rounds of freeing gc and of the GC verb")
	fs.IntVar(&c.profileAdds, "profile-adds", 2000, "in-process ADDs under the pprof CPU profile (0: skip)")
	fs.IntVar(&c.perfN, "perf-n", 100, "exec'ed ADDs per plugin under perf record -a, if perf is installed (0: skip)")
	fs.Float64Var(&c.cooldown, "cooldown", 5, "eni-cni cooldownSeconds, at least 5 (the default 30 would exhaust the /24 between phases)")
	fs.IntVar(&c.mtu, "mtu", 9001, "MTU of both plugins")
	fs.BoolVar(&c.quick, "quick", false, "small counts for a quick check (explicit flags still win)")
	fs.StringVar(&c.only, "only", "", "run one part only and print it, writing no report: \"ec2\" (the EC2 call counts; no root needed), "+
		"\"kubelet\" (the kubelet burst; rewrites only its block of -md), \"dry\" (ADD bursts on a dry EC2 pool; rewrites only its block of -md), "+
		"\"fleet\" (the fleet scale-up on virtual time; no root needed; rewrites only its block of -md)")
	fs.IntVar(&c.kubeRounds, "kubelet-rounds", 3, "kubelet burst: rounds per plugin")
	fs.IntVar(&c.kubePods, "kubelet-pods", 20, "kubelet burst: static pod manifests written at once")
	drySizes := fs.String("dry-sizes", "30,58", "pods per burst of the dry EC2 pool phase")
	fs.BoolVar(&c.dryOld, "dry-old", true, "also time the old way on the dry pool (code 11, retries every 10 s, warm every 30 s: minutes)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for _, f := range strings.Split(*drySizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 200 {
			return c, fmt.Errorf("-dry-sizes: %q is not a pod count of 1..200", f)
		}
		c.drySizes = append(c.drySizes, n)
	}
	if c.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		quick := map[string]*int{"n": &c.n, "family-n": &c.familyN, "burst": &c.burst, "burst-rounds": &c.burstRounds, "gone": &c.gone,
			"exec-n": &c.execN, "gc-reps": &c.gcReps, "gc-rounds": &c.gcRounds, "profile-adds": &c.profileAdds, "perf-n": &c.perfN,
			"kubelet-rounds": &c.kubeRounds}
		vals := map[string]int{"n": 40, "family-n": 10, "burst": 20, "burst-rounds": 2, "gone": 10, "exec-n": 40, "gc-reps": 3,
			"gc-rounds": 1, "profile-adds": 300, "perf-n": 20, "kubelet-rounds": 1}
		for k, p := range quick {
			if !set[k] {
				*p = vals[k]
			}
		}
	}
	switch {
	case c.n < 10 || c.n > 250:
		return c, errors.New("-n must be 10..250 (the pods share a /24)")
	case c.familyN < 0 || len(familyRuns)*c.familyN > c.n:
		return c, fmt.Errorf("-family-n must be 0..n/%d (its pods are the sequential phase's; 0 skips the phase)", len(familyRuns))
	case c.burst < 1 || c.burst > 250 || c.burstRounds < 1:
		return c, errors.New("-burst must be 1..250 and -burst-rounds >= 1")
	case c.gcAllocs < 1 || c.gcAllocs > 250 || c.gcDead > c.gcAllocs || c.gcSandboxes < c.gcAllocs-c.gcDead:
		return c, errors.New("-gc-allocs must be 1..250, -gc-dead <= -gc-allocs, -gc-sandboxes >= live allocations")
	case c.gone < 1 || c.execN < 1 || c.gcReps < 1 || c.gcRounds < 1:
		return c, errors.New("-gone, -exec-n, -gc-reps and -gc-rounds must be >= 1")
	case c.only != "" && c.only != "ec2" && c.only != "kubelet" && c.only != "dry" && c.only != "core" && c.only != "fleet":
		return c, errors.New(`-only must be "ec2", "kubelet", "dry", "fleet" or "core"`)
	case c.kubeRounds < 1 || c.kubePods < 1 || c.kubePods > 100:
		return c, errors.New("-kubelet-rounds must be >= 1 and -kubelet-pods 1..100")
	}
	return c, nil
}

func main() {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(run())
}

func run() int {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if cfg.only == "ec2" {
		// In process against the fake: no namespaces, no root, no tools.
		b := &bench{cfg: cfg, start: time.Now()}
		if err := b.phaseEC2(ctx); err != nil {
			b.logf("FAILED: %v", err)
			return 1
		}
		return 0
	}
	if cfg.only == "fleet" {
		// A test of the simulation on virtual time: no root, no tools.
		b := &bench{cfg: cfg, start: time.Now()}
		if err := b.runFleetOnly(ctx); err != nil {
			b.logf("FAILED: %v", err)
			return 1
		}
		return 0
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: needs root (network namespaces)")
		return 1
	}
	b := newBench(cfg)
	defer b.cleanup() // also runs while a panic of this goroutine unwinds
	runFn := b.run
	if cfg.only == "kubelet" {
		runFn = b.runKubeletOnly
	}
	if err := runFn(ctx); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted: %w", err)
		}
		b.logf("FAILED: %v", err)
		return 1
	}
	return 0
}

// run is the whole benchmark; cleanup is deferred by the caller.
func (b *bench) run(ctx context.Context) error {
	b.start = time.Now()
	if b.cfg.only == "dry" {
		return b.runDryOnly(ctx)
	}
	if err := b.prepare(ctx); err != nil {
		return err
	}
	phases := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"exec floor (VERSION)", b.phaseExecFloor},
		{"sequential ADD, CHECK, DEL", b.phaseSequential},
		{"address families (IPv4, IPv6, dual-stack)", b.phaseFamilies},
		{"peak RSS (GNU time)", b.phaseRSS},
		{"bursts", b.phaseBurst},
		{"DEL with the netns gone", b.phaseGone},
		{"perf record of exec'ed ADDs", b.phasePerf},
		{"gc and list", b.phaseGC},
		{"EC2 call counts", b.phaseEC2},
		{"ADD bursts on a dry EC2 pool", b.phaseDry},
		{"fleet scale-up on virtual time", b.phaseFleet},
		{"pprof of the ADD code path", b.phaseProfile},
		{"kubelet burst (real kubelet + containerd)", b.phaseKubelet},
	}
	if b.cfg.only == "core" {
		// The phases a change of the ADD/DEL path moves; the rest
		// (gc, EC2 counts, the dry pool, kubelet) have their own -only.
		phases = phases[:6]
		b.cfg.md = ""
	}
	for _, p := range phases {
		if err := ctx.Err(); err != nil {
			return err
		}
		b.logf("phase: %s", p.name)
		t0 := time.Now()
		if err := p.fn(ctx); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		b.res.PhaseSeconds = append(b.res.PhaseSeconds, phaseTime{p.name, time.Since(t0).Seconds()})
	}
	b.res.LoadEnd = loadAvg()
	return b.report()
}

// logf prints a progress line with the time since start.
func (b *bench) logf(format string, args ...any) {
	el := time.Since(b.start).Round(100 * time.Millisecond)
	if b.start.IsZero() {
		el = 0
	}
	fmt.Fprintf(os.Stderr, "bench [%6s] %s\n", el, fmt.Sprintf(format, args...))
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

func goVersion() string { return strings.TrimPrefix(runtime.Version(), "go") }
