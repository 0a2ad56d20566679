package main

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// results is everything the report shows, also written as results.json.
type results struct {
	Date         string      `json:"date"`
	Machine      []string    `json:"machine"`
	Versions     []string    `json:"versions"`
	Flags        string      `json:"flags"`
	ENIVersion   string      `json:"eniVersion"`
	LoadStart    string      `json:"loadStart"`
	LoadEnd      string      `json:"loadEnd"`
	PhaseSeconds []phaseTime `json:"phaseSeconds"`
	Rows         []row       `json:"rows"`
	Targets      []target    `json:"targets"`
	Steps        []stepRow   `json:"inProcessSteps"`
	EC2          []ec2Calls  `json:"ec2"`
	Kubelet      *kubeBench  `json:"kubelet,omitempty"`
	Dry          *dryResults `json:"dry,omitempty"`
	CRICalls     string      `json:"criCalls"`
	JSONCost     string      `json:"jsonCost"`
	Floors       []floorRow  `json:"floors"`
	Overhead     []string    `json:"overhead"`
	FillSteps    []fillRow   `json:"inProcessFill"`
	PprofTop     string      `json:"-"`
	PprofCum     string      `json:"-"`
	PerfNote     string      `json:"perfNote"`
	RSSNote      string      `json:"rssNote"`
	PerfBuild    string      `json:"perfBuild"`
	PerfSelf     string      `json:"-"`
	PerfChildren string      `json:"-"`
	PerfSplit    []string    `json:"perfSplit"`
	PerfComm     string      `json:"-"`
	Params       config      `json:"-"`
	stepOrder    map[string][]string
	fillTenth    int
	fillRound    int
}

type phaseTime struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// row is one line of the results table.
type row struct {
	Section string `json:"section"`
	Figure  string `json:"figure"`
	ENI     string `json:"eniCni"`
	Ref     string `json:"reference"`
	Ratio   string `json:"ratio"`
}

type target struct {
	Target   string  `json:"target"`
	Measured string  `json:"measured"`
	Limit    string  `json:"limit"`
	Verdict  string  `json:"verdict"`
	Value    float64 `json:"value"`
	Met      bool    `json:"met"`
}

// fillRow compares in-process step times at the start and the end of a
// fill of the node.
type fillRow struct {
	Step        string  `json:"step"`
	First, Last float64 `json:"-"`
	FirstMs     float64 `json:"firstMs"`
	LastMs      float64 `json:"lastMs"`
}

type stepRow struct {
	Op, Step string
	P50      float64
	Share    float64 // of the total's p50
}

// dist is a distribution of milliseconds.
type dist struct {
	N                       int
	Min, P50, P90, P99, Max float64
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarize uses nearest-rank percentiles.
func summarize(xs []float64) dist {
	if len(xs) == 0 {
		return dist{Min: math.NaN(), P50: math.NaN(), P90: math.NaN(), P99: math.NaN(), Max: math.NaN()}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pct := func(p float64) float64 {
		i := int(math.Ceil(p/100*float64(len(s)))) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return dist{N: len(s), Min: s[0], P50: pct(50), P90: pct(90), P99: pct(99), Max: s[len(s)-1]}
}

func (b *bench) sel(phase, plugin, op string) []sample {
	var out []sample
	for _, s := range b.samples {
		if s.Phase == phase && s.Plugin == plugin && s.Op == op {
			out = append(out, s)
		}
	}
	return out
}

func walls(ss []sample) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = ms(s.Wall)
	}
	return out
}

func cpus(ss []sample) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = ms(s.cpu())
	}
	return out
}

func rssMiB(ss []sample) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = float64(s.MaxRSS) / 1024
	}
	return out
}

func f2(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

func r2(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

func joinF(f func(float64) string, xs ...float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = f(x)
	}
	return strings.Join(parts, " / ")
}

// distRow: min / p50 / p90 / p99 for both, and their ratios.
func distRow(section, figure string, e, r dist) row {
	return row{section, figure,
		joinF(f2, e.Min, e.P50, e.P90, e.P99), joinF(f2, r.Min, r.P50, r.P90, r.P99),
		joinF(r2, ratio(e.Min, r.Min), ratio(e.P50, r.P50), ratio(e.P90, r.P90), ratio(e.P99, r.P99))}
}

func oneRow(section, figure string, e, r float64) row {
	return row{section, figure, f2(e), f2(r), r2(ratio(e, r))}
}

func verdict(measured, limit float64) (string, bool) {
	if math.IsNaN(measured) {
		return "not measured", false
	}
	if measured <= limit {
		return fmt.Sprintf("met, %.1f%% under the limit", (limit-measured)/limit*100), true
	}
	return fmt.Sprintf("MISSED, %.1f%% over the limit (%.2f× it)", (measured-limit)/limit*100, measured/limit), false
}

// ---------------------------------------------------------------- tables

func (b *bench) buildTables() {
	c := b.cfg
	res := &b.res
	sec := fmt.Sprintf("sequential (%d pods each: ADD all, CHECK all, DEL all)", c.n)
	seq := map[string][2]dist{}
	for _, op := range []string{"ADD", "CHECK", "DEL"} {
		e, r := summarize(walls(b.sel("seq", "eni", op))), summarize(walls(b.sel("seq", "ref", op)))
		seq[op] = [2]dist{e, r}
		label := op
		if op == "DEL" {
			label = "DEL (netns present)"
		}
		res.Rows = append(res.Rows, distRow(sec, label+": wall min / p50 / p90 / p99 (ms)", e, r))
	}
	for _, op := range []string{"ADD", "CHECK", "DEL"} {
		e, r := summarize(cpus(b.sel("seq", "eni", op))), summarize(cpus(b.sel("seq", "ref", op)))
		res.Rows = append(res.Rows, oneRow(sec, op+": CPU user+sys p50 (ms, whole process tree)", e.P50, r.P50))
	}
	tenth := max(1, c.n/10)
	fill := func(p string) (float64, float64) {
		ss := b.sel("seq", p, "ADD")
		slices.SortFunc(ss, func(a, b sample) int { return a.Index - b.Index })
		if len(ss) < 2*tenth {
			return math.NaN(), math.NaN()
		}
		return summarize(walls(ss[:tenth])).P50, summarize(walls(ss[len(ss)-tenth:])).P50
	}
	ef, el := fill("eni")
	rf, rl := fill("ref")
	res.Rows = append(res.Rows,
		oneRow(sec, fmt.Sprintf("ADD p50, first %d pods (ms)", tenth), ef, rf),
		oneRow(sec, fmt.Sprintf("ADD p50, last %d pods (ms)", tenth), el, rl),
		row{sec, "ADD p50, last 10% / first 10%", r2(ratio(el, ef)), r2(ratio(rl, rf)), "–"})

	res.Rows = append(res.Rows, b.familyRows()...)
	res.Rows = append(res.Rows, b.fleetRows()...)

	sec = fmt.Sprintf("burst (%d at once, %d rounds each)", c.burst, c.burstRounds)
	bw := map[string][2]float64{}
	for _, op := range []string{"ADD", "DEL"} {
		e, r := summarize(walls(b.sel("burst-wall", "eni", op))), summarize(walls(b.sel("burst-wall", "ref", op)))
		bw[op] = [2]float64{e.P50, r.P50}
		res.Rows = append(res.Rows, oneRow(sec, fmt.Sprintf("%d %ss: wall, median of rounds (ms)", c.burst, op), e.P50, r.P50))
	}
	for _, op := range []string{"ADD", "DEL"} {
		e, r := summarize(walls(b.sel("burst", "eni", op))), summarize(walls(b.sel("burst", "ref", op)))
		res.Rows = append(res.Rows, row{sec, op + " per op in a burst: p50 / p99 (ms)",
			joinF(f2, e.P50, e.P99), joinF(f2, r.P50, r.P99), joinF(r2, ratio(e.P50, r.P50), ratio(e.P99, r.P99))})
	}

	sec = fmt.Sprintf("DEL with the netns gone (CNI_NETNS=\"\", %d each)", c.gone)
	ge, gr := summarize(walls(b.sel("gone", "eni", "DEL"))), summarize(walls(b.sel("gone", "ref", "DEL")))
	res.Rows = append(res.Rows, distRow(sec, "DEL: wall min / p50 / p90 / p99 (ms)", ge, gr))
	gce, gcr := summarize(cpus(b.sel("gone", "eni", "DEL"))), summarize(cpus(b.sel("gone", "ref", "DEL")))
	res.Rows = append(res.Rows, oneRow(sec, "DEL: CPU user+sys p50 (ms)", gce.P50, gcr.P50))

	sec = fmt.Sprintf("exec floor (CNI_COMMAND=VERSION, %d each)", c.execN)
	ve, vp := summarize(walls(b.sel("exec", "eni", "VERSION"))), summarize(walls(b.sel("exec", "ptp", "VERSION")))
	vh, vt := summarize(walls(b.sel("exec", "host-local", "VERSION"))), summarize(walls(b.sel("exec", "trivial", "VERSION")))
	res.Rows = append(res.Rows,
		row{sec, "VERSION: wall min / p50 / p90 (ms) (reference: ptp)", joinF(f2, ve.Min, ve.P50, ve.P90), joinF(f2, vp.Min, vp.P50, vp.P90),
			joinF(r2, ratio(ve.Min, vp.Min), ratio(ve.P50, vp.P50), ratio(ve.P90, vp.P90))},
		row{sec, "VERSION of host-local: wall min / p50 / p90 (ms)", "–", joinF(f2, vh.Min, vh.P50, vh.P90), "–"},
		row{sec, "trivial static Go binary: wall min / p50 / p90 (ms)", joinF(f2, vt.Min, vt.P50, vt.P90), joinF(f2, vt.Min, vt.P50, vt.P90), "–"},
		row{sec, "VERSION p50 / trivial binary p50", r2(ratio(ve.P50, vt.P50)), r2(ratio(vp.P50, vt.P50)), "–"})

	sec = "size and memory"
	size := func(p string) float64 {
		fi, err := os.Stat(p)
		if err != nil {
			return math.NaN()
		}
		return float64(fi.Size()) / (1 << 20)
	}
	se := size(b.eni.bin)
	sp, sh := size(b.ref.bin), size(filepath.Join(c.tools, "bin/host-local"))
	res.Rows = append(res.Rows,
		row{sec, fmt.Sprintf("binary size (MiB) (reference: ptp %s + host-local %s)", f2(sp), f2(sh)), f2(se), f2(sp + sh), r2(ratio(se, sp+sh))})
	re, rr := summarize(rssMiB(b.sel("rss", "eni", "ADD"))), summarize(rssMiB(b.sel("rss", "ref", "ADD")))
	res.Rows = append(res.Rows, oneRow(sec, fmt.Sprintf("peak RSS of one ADD, median of %d (MiB) (GNU time %%M; reference: the larger of ptp and host-local)", re.N), re.P50, rr.P50))
	rv, rp, rt := summarize(rssMiB(b.sel("rss", "eni", "VERSION"))), summarize(rssMiB(b.sel("rss", "ptp", "VERSION"))), summarize(rssMiB(b.sel("rss", "trivial", "VERSION")))
	res.Rows = append(res.Rows, oneRow(sec, fmt.Sprintf("peak RSS of VERSION, median (MiB) (reference: ptp; trivial static Go binary: %s)", f2(rt.P50)), rv.P50, rp.P50))

	sec = fmt.Sprintf("gc and list, eni-cni only (ptp/host-local v1.9.1 have neither): %d allocations, CRI lists %d sandboxes, %d of the allocations not among them",
		c.gcAllocs, c.gcSandboxes, c.gcDead)
	gcRow := func(op, label string) dist {
		ss := b.sel("gc", "eni", op)
		w, cp := summarize(walls(ss)), summarize(cpus(ss))
		res.Rows = append(res.Rows, row{sec, fmt.Sprintf("%s (runs: %d): wall p50 / CPU p50 (ms)", label, len(ss)), joinF(f2, w.P50, cp.P50), "n/a", "–"})
		return cp
	}
	dry := gcRow("gc --dry-run", "eni-cni gc --dry-run (plans, frees nothing)")
	free := gcRow("gc (frees)", fmt.Sprintf("eni-cni gc (plans, frees %d: veths, rules, one save)", c.gcDead))
	gcRow("GC verb (frees)", fmt.Sprintf("CNI GC verb from valid-attachments (frees %d)", c.gcDead))
	gcRow("list", "eni-cni list")
	gcRow("list --json", "eni-cni list --json")

	sec = "EC2 API (in-process ec2fake + ec2.Warmer, as ec2/warm_test.go)"
	for _, x := range res.EC2 {
		res.Rows = append(res.Rows, row{sec, x.Scenario + fmt.Sprintf(" (%d warm passes)", x.Passes),
			fmt.Sprintf("%d EC2 calls, %d IMDS reads", x.EC2Total, x.IMDS), "n/a", "–"})
	}

	b.kubeletRows()

	// Targets.
	add := func(name string, measured float64, mfmt string, limit float64, lfmt string) {
		v, ok := verdict(measured, limit)
		res.Targets = append(res.Targets, target{Target: name, Measured: fmt.Sprintf(mfmt, measured), Limit: lfmt, Verdict: v, Value: measured, Met: ok})
	}
	add("sequential ADD p50, eni-cni / ref", ratio(seq["ADD"][0].P50, seq["ADD"][1].P50), "%.3f", 0.30, "≤ 0.30")
	add("CHECK p50, eni-cni / ref", ratio(seq["CHECK"][0].P50, seq["CHECK"][1].P50), "%.3f", 0.30, "≤ 0.30")
	add(fmt.Sprintf("%d-ADD burst wall, eni-cni / ref", c.burst), ratio(bw["ADD"][0], bw["ADD"][1]), "%.3f", 0.30, "≤ 0.30")
	add("DEL with netns gone p50, eni-cni / ref", ratio(ge.P50, gr.P50), "%.3f", 0.50, "≤ 0.50")
	add("DEL with netns present p50, eni-cni / ref", ratio(seq["DEL"][0].P50, seq["DEL"][1].P50), "%.3f", 0.85, "≤ 0.85")
	add(fmt.Sprintf("eni-cni ADD p50 flat: last %d / first %d pods", tenth, tenth), ratio(el, ef), "%.3f", 1.2, "≤ 1.20")
	add("eni-cni VERSION exec p50 / trivial static Go binary", ratio(ve.P50, vt.P50), "%.3f", 1.5, "≤ 1.50")
	add(fmt.Sprintf("eni-cni gc of %d allocations, planning only (--dry-run): CPU p50", c.gcAllocs), dry.P50, "%.1f ms", 50, "< 50 ms")
	add(fmt.Sprintf("eni-cni gc of %d allocations, planning + freeing %d: CPU p50", c.gcAllocs, c.gcDead), free.P50, "%.1f ms", 50, "< 50 ms")
	for _, x := range res.EC2 {
		if x.Scenario == scenarioSteady {
			add("EC2 calls per node-hour at steady state", float64(x.EC2Total), "%.0f", 1, "≤ 1")
		}
	}
	if res.Dry != nil {
		res.Targets = append(res.Targets, dryTargets(res.Dry)...)
	}

	// In-process steps as the store fills up (each profile round attaches
	// up to 200 pods to an empty node).
	roundSize := min(len(b.eni.pods), 200, max(c.profileAdds, 1))
	pt := max(1, roundSize/10)
	res.fillTenth, res.fillRound = pt, roundSize
	for _, st := range append([]string{"total"}, res.stepOrder["ADD"]...) {
		var first, last []float64
		for _, x := range b.sel("inproc", "eni", "ADD/"+st) {
			switch {
			case x.Fill < pt:
				first = append(first, ms(x.Wall))
			case x.Fill >= roundSize-pt:
				last = append(last, ms(x.Wall))
			}
		}
		f, l := summarize(first).P50, summarize(last).P50
		if f < 0.02 && l < 0.02 {
			continue
		}
		res.FillSteps = append(res.FillSteps, fillRow{Step: st, First: f, Last: l, FirstMs: f, LastMs: l})
	}

	// In-process step breakdown.
	for _, op := range []string{"ADD", "DEL"} {
		tot := summarize(walls(b.sel("inproc", "eni", op+"/total"))).P50
		if !math.IsNaN(tot) && op == "ADD" {
			ex := seq[op][0].P50
			res.Overhead = append(res.Overhead, fmt.Sprintf("%s: exec'ed p50 %.2f ms (sequential phase), in-process p50 %.2f ms: %.2f ms outside the code path (fork/exec, Go runtime start-up, page faults, exit; a bare VERSION exec is %.2f ms)",
				op, ex, tot, ex-tot, ve.P50))
		}
		res.Steps = append(res.Steps, stepRow{op, "total (in process)", tot, 1})
		for _, st := range res.stepOrder[op] {
			p := summarize(walls(b.sel("inproc", "eni", op+"/"+st))).P50
			res.Steps = append(res.Steps, stepRow{op, st, p, p / tot})
		}
	}
}

// ---------------------------------------------------------------- output

func (b *bench) report() error {
	b.collectMachine()
	b.buildTables()
	if err := b.writeCSV(); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(&b.res, "", "  ")
	if err := os.WriteFile(filepath.Join(b.out, "results.json"), js, 0o644); err != nil {
		return err
	}
	var txt bytes.Buffer
	b.writeText(&txt)
	if err := os.WriteFile(filepath.Join(b.out, "table.txt"), txt.Bytes(), 0o644); err != nil {
		return err
	}
	if b.cfg.md != "" {
		if err := b.writeMarkdown(b.cfg.md); err != nil {
			return err
		}
	}
	fmt.Print("\n", txt.String())
	fmt.Printf("\noutputs: %s (samples.csv, results.json, table.txt, add-cpu.pprof, add-cpu-top*.txt, perf/)", b.out)
	if b.cfg.md != "" {
		fmt.Printf(", %s", b.cfg.md)
	}
	fmt.Println()
	return nil
}

func (b *bench) writeCSV() error {
	f, err := os.Create(filepath.Join(b.out, "samples.csv"))
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write([]string{"phase", "plugin", "op", "index", "round", "store_allocs_before", "wall_ms", "user_ms", "sys_ms", "maxrss_kib"})
	for _, s := range b.samples {
		w.Write([]string{s.Phase, s.Plugin, s.Op, strconv.Itoa(s.Index), strconv.Itoa(s.Round), strconv.Itoa(s.Fill),
			strconv.FormatFloat(ms(s.Wall), 'f', 4, 64), strconv.FormatFloat(ms(s.User), 'f', 3, 64),
			strconv.FormatFloat(ms(s.Sys), 'f', 3, 64), strconv.FormatInt(s.MaxRSS, 10)})
	}
	w.Flush()
	return w.Error()
}

func (b *bench) writeText(out *bytes.Buffer) {
	r := &b.res
	fmt.Fprintf(out, "eni-cni benchmark, %s\n", r.Date)
	for _, m := range append(append([]string{}, r.Machine...), r.Versions...) {
		fmt.Fprintf(out, "  %s\n", m)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	section := ""
	for _, x := range r.Rows {
		if x.Section != section {
			section = x.Section
			fmt.Fprintf(tw, "\n%s\t\t\t\n", strings.ToUpper(section[:1])+section[1:])
			fmt.Fprintf(tw, "  figure\teni-cni\tptp+host-local\teni-cni/ref\n")
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", x.Figure, x.ENI, x.Ref, x.Ratio)
	}
	tw.Flush()
	for _, x := range r.EC2 {
		fmt.Fprintf(out, "  EC2 calls, %s: %s\n", x.Scenario, x.breakdown())
	}
	fmt.Fprintf(out, "\nTargets\n")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  target\tmeasured\tlimit\tverdict\n")
	for _, t := range r.Targets {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", t.Target, t.Measured, t.Limit, t.Verdict)
	}
	tw.Flush()
	if len(r.Steps) > 0 {
		fmt.Fprintf(out, "\nIn-process ADD/DEL code path, p50 per step (profile loop, %d ADDs)\n", b.cfg.profileAdds)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		for _, s := range r.Steps {
			fmt.Fprintf(tw, "  %s\t%s\t%.3f ms\t%.0f%%\n", s.Op, s.Step, s.P50, s.Share*100)
		}
		tw.Flush()
		if r.JSONCost != "" {
			fmt.Fprintf(out, "  %s\n", r.JSONCost)
		}
		for _, o := range r.Overhead {
			fmt.Fprintf(out, "  %s\n", o)
		}
	}
	if len(r.FillSteps) > 0 {
		fmt.Fprintf(out, "\nIn-process ADD as the node fills: p50 with < %d vs >= %d pods attached (ms)\n", r.fillTenth, r.fillRound-r.fillTenth)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		for _, f := range r.FillSteps {
			fmt.Fprintf(tw, "  %s\t%.3f\t%.3f\t×%.2f\n", f.Step, f.First, f.Last, ratio(f.Last, f.First))
		}
		tw.Flush()
	}
	if len(r.Floors) > 0 {
		fmt.Fprintf(out, "\nFloors, in process (ms)\n")
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		for _, f := range r.Floors {
			fmt.Fprintf(tw, "  %s\tp50 %.3f\tp90 %.3f\n", f.Name, f.P50, f.P90)
		}
		tw.Flush()
	}
	if len(r.PerfSplit) > 0 {
		fmt.Fprintf(out, "\nperf (exec'ed ADDs): %s\n", strings.Join(r.PerfSplit, "; "))
	}
}

const (
	notesBegin = "<!-- BEGIN NOTES (kept when make bench rewrites this file) -->"
	notesEnd   = "<!-- END NOTES -->"
)

func (b *bench) writeMarkdown(path string) error {
	r := &b.res
	notes := "\n_(Reading of the results: add it here.)_\n"
	if old, err := os.ReadFile(path); err == nil {
		s := string(old)
		if i := strings.Index(s, notesBegin); i >= 0 {
			if j := strings.Index(s[i:], notesEnd); j >= 0 {
				notes = s[i+len(notesBegin) : i+j]
			}
		}
	}
	var m strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&m, format, args...) }
	p("# eni-cni benchmarks\n\n")
	p("Written by `make bench` (`scripts/bench`) on %s. Every figure of one run; re-run to refresh ", r.Date)
	p("(the text between the NOTES markers below is kept). Raw samples, profiles and this table: `_out/bench/`.\n\n")
	p("## Machine and versions\n\n")
	for _, x := range append(append([]string{}, r.Machine...), r.Versions...) {
		p("- %s\n", x)
	}
	p("- flags: `%s`\n", r.Flags)
	p("- load average at start / end: %s / %s; phases: ", r.LoadStart, r.LoadEnd)
	var ph []string
	total := 0.0
	for _, x := range r.PhaseSeconds {
		ph = append(ph, fmt.Sprintf("%s %.0fs", x.Name, x.Seconds))
		total += x.Seconds
	}
	p("%s (%.0f s in all)\n\n", strings.Join(ph, ", "), total)

	p("## Method\n\n")
	p("- Both plugins run in network namespaces the harness creates (one \"node\" namespace per plugin unless `-shared-node`, ")
	p("one namespace per pod, created before timing). Each call is a fork/exec from an OS thread the harness has moved into ")
	p("the node namespace with setns (no nsenter; verified at start), with the config on stdin and CNI_* in the environment, ")
	p("stdout/stderr captured through pipes, as containerd/libcni do. Wall time: fork to the end of wait. CPU: ")
	p("wait4's rusage, which includes the children the plugin waited for (ptp's host-local). Peak RSS: GNU time `%%M` in a phase of its own ")
	p("(wait4's ru_maxrss of a child that Go starts with vfork carries the harness's own high-water RSS).\n")
	p("- eni-cni: `%s`, static pool `10.99.0.0/24`, `mtu` %d, `cooldownSeconds` %g (the default 30 s would keep the ", b.rel(b.cfg.eniBin), b.cfg.mtu, b.cfg.cooldown)
	p("addresses of one phase out of the /24 in the next), state in `%s/...` (same disk-backed filesystem as /var/lib).\n", b.cfg.workRoot)
	p("- Reference: `ptp` (`ipMasq: false`, same MTU) calling `host-local` (`10.98.0.0/24`, default route, `dataDir` in the same temporary directory). ")
	p("CHECK and DEL get the ADD result as `prevResult`, as libcni passes it, for both.\n")
	p("- Calls of the two plugins alternate (which goes first flips every pod/round), so noise hits both alike. ")
	p("Sequential: %d ADDs (the node fills up), then %d CHECKs, then %d DELs. Burst: %d ADDs released at once, then %d DELs, %d rounds. ",
		b.cfg.n, b.cfg.n, b.cfg.n, b.cfg.burst, b.cfg.burst, b.cfg.burstRounds)
	p("DEL with the netns gone: the pod namespace is deleted and the host veth has disappeared before DEL runs with `CNI_NETNS=\"\"`. ")
	p("Exec floor: `CNI_COMMAND=VERSION` of each binary and of a static Go binary that only prints a VERSION answer, built by the harness with the same toolchain and flags.\n")
	p("- gc: %d real pods, an in-process CRI fake (`gc/crifake`) on a unix socket listing %d sandboxes that include all but %d of them; ",
		b.cfg.gcAllocs, b.cfg.gcSandboxes, b.cfg.gcDead)
	p("`eni-cni gc --grace 60s` (the store aged past it) frees those %d (veths torn down, one save); the CNI GC verb does the same from `cni.dev/valid-attachments`. CRI calls served: %s.\n", b.cfg.gcDead, r.CRICalls)
	p("- EC2: `ec2fake` + `ec2.Warmer` in process with a hand-moved clock, the scenario of `TestWarmCreatesENIsUpToLimit` (m5.large, warmIPTarget 5, warm every 5th pod and when ADD finds the pool empty), then 120 warm passes 30 s apart.\n")
	p("- Profiles: the ADD code path run in process %d times (package plugin's own `OpenWith` and `Attach`: `alloc.Manager` on the disk store + `netsetup.Setup`, then result printing, as the CNI verb runs them) under `runtime/pprof`, ",
		b.cfg.profileAdds)
	p("ADDs and DELs profiled separately (`_out/bench/add-cpu.pprof`, `del-cpu.pprof`); per-step wall times from timers around the same calls. ")
	p("A CPU profile does not show waiting (fsync, RCU grace periods in veth deletion): the step timings do. %s.\n\n", r.PerfNote)

	p("## Results\n\n")
	section := ""
	for _, x := range r.Rows {
		if isKubeletRow(x) || isFleetRow(x) {
			continue // their own blocks, below
		}
		if x.Section != section {
			section = x.Section
			p("\n**%s**\n\n| figure | eni-cni | ptp+host-local | eni-cni / ref |\n|---|---|---|---|\n", strings.ToUpper(section[:1])+section[1:])
		}
		p("| %s | %s | %s | %s |\n", mdEscape(x.Figure), mdEscape(x.ENI), mdEscape(x.Ref), mdEscape(x.Ratio))
	}
	for _, x := range r.EC2 {
		p("\nEC2 calls, %s: %s.\n", x.Scenario, x.breakdown())
	}
	p("%s", b.kubeletMarkdown())
	p("%s", b.fleetMarkdown())
	if r.Dry != nil {
		p("\n%s", dryMarkdown(r.Dry, r.Date))
	}
	p("\n## Targets\n\n| target | measured | limit | verdict |\n|---|---|---|---|\n")
	for _, t := range r.Targets {
		p("| %s | %s | %s | %s |\n", mdEscape(t.Target), t.Measured, t.Limit, t.Verdict)
	}
	p("\n## Where the time goes\n\n")
	if len(r.Steps) > 0 {
		p("In-process code path (p50 per step over the profile loop; steps indented under `allocate`/`release` are parts of it):\n\n| verb | step | p50 (ms) | share |\n|---|---|---|---|\n")
		for _, s := range r.Steps {
			p("| %s | %s | %.3f | %.0f%% |\n", s.Op, mdEscape(s.Step), s.P50, s.Share*100)
		}
		if r.JSONCost != "" {
			p("\n%s.\n", r.JSONCost)
		}
		for _, o := range r.Overhead {
			p("\n%s.\n", o)
		}
	}
	if len(r.FillSteps) > 0 {
		p("\nIn-process ADD as the node fills (p50, ms, with fewer than %d vs at least %d pods attached):\n\n| step | empty node | full node | × |\n|---|---|---|---|\n", r.fillTenth, r.fillRound-r.fillTenth)
		for _, f := range r.FillSteps {
			p("| %s | %.3f | %.3f | %.2f |\n", mdEscape(f.Step), f.First, f.Last, ratio(f.Last, f.First))
		}
	}
	if len(r.Floors) > 0 {
		p("\nFloors: the primitives alone, in process on the same machine:\n\n| primitive | p50 (ms) | p90 (ms) |\n|---|---|---|\n")
		for _, f := range r.Floors {
			p("| %s | %.3f | %.3f |\n", mdEscape(f.Name), f.P50, f.P90)
		}
	}
	if r.PprofTop != "" {
		p("\npprof of the in-process ADD loop (`go tool pprof -top _out/bench/add-cpu.pprof`), first lines:\n\n```\n%s```\n", firstLines(r.PprofTop, 30))
	}
	if len(r.PerfSplit) > 0 {
		p("\nperf, where the exec'ed processes spend their CPU: %s.\n", strings.Join(r.PerfSplit, "; "))
	}
	if r.PerfSelf != "" {
		p("\nperf, eni-cni processes, self time by symbol (share of their samples):\n\n```\n%s```\n", reportBody(r.PerfSelf, 35))
	}
	if r.PerfChildren != "" {
		p("\nperf, eni-cni processes, inclusive / self share of their samples by symbol:\n\n```\n%s```\n", reportBody(r.PerfChildren, 60))
	}
	p("\n## Notes\n\n%s%s%s\n", notesBegin, notes, notesEnd)
	return os.WriteFile(path, []byte(m.String()), 0o644)
}

// rel shows paths inside the repository relative to it.
func (b *bench) rel(p string) string {
	if r, err := filepath.Rel(b.cfg.repo, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

func firstLines(s string, n int) string {
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(s))
	for i := 0; sc.Scan() && i < n; i++ {
		out.WriteString(sc.Text() + "\n")
	}
	return out.String()
}

// reportBody drops perf report's comment header and blank lines.
func reportBody(s string, n int) string {
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(s))
	for i := 0; sc.Scan() && i < n; {
		l := sc.Text()
		if strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "" {
			continue
		}
		out.WriteString(l + "\n")
		i++
	}
	return out.String()
}

// ---------------------------------------------------------------- machine

func (b *bench) collectMachine() {
	r := &b.res
	r.Date = time.Now().UTC().Format("2006-01-02 15:04 UTC")
	cpu := "?"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "?"
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.Atoi(f[1]); err == nil {
					mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				}
			}
		}
	}
	var u unix.Utsname
	kernel := "?"
	if unix.Uname(&u) == nil {
		kernel = unix.ByteSliceToString(u.Release[:])
	}
	osName := "?"
	if data, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				osName = strings.Trim(v, `"`)
			}
		}
	}
	r.Machine = []string{
		fmt.Sprintf("machine: %s, %d CPUs, %s RAM; kernel %s; %s", cpu, runtime.NumCPU(), mem, kernel, osName),
		fmt.Sprintf("state directories on %s (%s)", b.cfg.workRoot, fsType(b.cfg.workRoot)),
	}
	r.Flags = b.cfg.String()
}

// collectVersions fills the version lines; run early: the perf build uses
// the eni-cni version string.
func (b *bench) collectVersions() {
	r := &b.res
	if out, err := exec.Command(b.cfg.eniBin, "version").Output(); err == nil {
		r.ENIVersion = strings.TrimSpace(string(out))
	}
	git := "?"
	if out, err := exec.Command("git", "-C", b.cfg.repo, "describe", "--tags", "--always", "--dirty").Output(); err == nil {
		git = strings.TrimSpace(string(out))
	}
	goOf := func(path string) (string, string) {
		bi, err := buildinfo.ReadFile(path)
		if err != nil {
			return "?", "?"
		}
		mod := bi.Main.Version
		if bi.Main.Path != "github.com/containernetworking/plugins" {
			mod = "?"
			for _, d := range bi.Deps {
				if d.Path == "github.com/containernetworking/plugins" {
					mod = d.Version
				}
			}
		}
		return bi.GoVersion, mod
	}
	eg, _ := goOf(b.cfg.eniBin)
	pg, pv := goOf(b.ref.bin)
	hg, hv := goOf(filepath.Join(b.cfg.tools, "bin/host-local"))
	r.Versions = []string{
		fmt.Sprintf("eni-cni: `%s` (%s), git %s, built with %s", r.ENIVersion, b.rel(b.cfg.eniBin), git, eg),
		fmt.Sprintf("reference: containernetworking/plugins ptp %s (%s), host-local %s (%s), from %s/bin", pv, pg, hv, hg, b.cfg.tools),
		fmt.Sprintf("harness and trivial binary: go%s", goVersion()),
	}
}

func fsType(path string) string {
	var st unix.Statfs_t
	if unix.Statfs(path, &st) != nil {
		return "?"
	}
	names := map[int64]string{0xEF53: "ext4", 0x58465342: "xfs", 0x01021994: "tmpfs", 0x9123683E: "btrfs", 0x794c7630: "overlayfs", 0x6969: "nfs", 0x2FC12FC1: "zfs"}
	if n, ok := names[int64(st.Type)]; ok {
		return n
	}
	return fmt.Sprintf("fs 0x%x", st.Type)
}

func (c config) String() string {
	s := fmt.Sprintf("-n %d -burst %d -burst-rounds %d -gone %d -exec-n %d -gc-allocs %d -gc-sandboxes %d -gc-dead %d -gc-reps %d -gc-rounds %d -profile-adds %d -perf-n %d -cooldown %g -mtu %d",
		c.n, c.burst, c.burstRounds, c.gone, c.execN, c.gcAllocs, c.gcSandboxes, c.gcDead, c.gcReps, c.gcRounds, c.profileAdds, c.perfN, c.cooldown, c.mtu)
	if c.sharedNode {
		s += " -shared-node"
	}
	return s + fmt.Sprintf(" -kubelet-rounds %d -kubelet-pods %d", c.kubeRounds, c.kubePods)
}
