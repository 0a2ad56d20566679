package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// kubeBench is what scripts/e2e/kubelet.sh --bench writes: per round and
// plugin, seconds from writing the manifests to each pod's sandbox READY
// (CRI) and Ready (kubelet's /pods), and from removing them to each sandbox
// stopped (CNI DEL done).
type kubeBench struct {
	Kubelet    string      `json:"kubelet"`
	Containerd string      `json:"containerd"`
	Pods       int         `json:"pods"`
	Rounds     []kubeRound `json:"rounds"`
}

type kubeRound struct {
	Plugin           string     `json:"plugin"` // "eni" or "ref"
	Round            int        `json:"round"`
	SandboxReady     []*float64 `json:"sandboxReady"`
	KubeletReady     []float64  `json:"kubeletReady"`
	Stopped          []float64  `json:"stopped"`
	LastSandboxReady float64    `json:"lastSandboxReady"`
	LastKubeletReady float64    `json:"lastKubeletReady"`
	LastStopped      float64    `json:"lastStopped"`
}

// phaseKubelet runs the kubelet suite's bench mode: one standalone kubelet
// and a private containerd 1.6 in a throwaway network namespace, rounds of
// -kubelet-pods static pod manifests written at once, eni-cni (static pool)
// and ptp + host-local alternating under the same kubelet. The script takes
// the machine's kubelet lock (one kubelet per machine), so it may wait.
func (b *bench) phaseKubelet(ctx context.Context) error {
	out := filepath.Join(b.out, "kubelet-burst.json")
	script := filepath.Join(b.cfg.repo, "scripts/e2e/kubelet.sh")
	cmd := exec.CommandContext(ctx, "bash", script, "--bench", out,
		"--rounds", strconv.Itoa(b.cfg.kubeRounds), "--pods", strconv.Itoa(b.cfg.kubePods), b.cfg.eniBin)
	cmd.Env = append(os.Environ(), "ENI_CNI_TOOLS="+b.cfg.tools)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Interrupted: TERM, so that the script's trap stops kubelet and
	// containerd and removes what they made.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	os.Remove(out)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("scripts/e2e/kubelet.sh --bench: %w", err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	var kb kubeBench
	if err := json.Unmarshal(data, &kb); err != nil {
		return fmt.Errorf("%s: %w", out, err)
	}
	b.res.Kubelet = &kb
	return nil
}

// runKubeletOnly is -only kubelet: the kubelet burst alone, its rows on
// stdout and in <out>/kubelet-burst.json, and its block of -md rewritten in
// place (the rest of the file keeps the last full run).
func (b *bench) runKubeletOnly(ctx context.Context) error {
	b.start = time.Now()
	c := &b.cfg
	c.eniBin, c.tools, c.repo, c.out = absPath(c.eniBin), absPath(c.tools), absPath(c.repo), absPath(c.out)
	b.out = c.out
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return err
	}
	var err error
	if b.work, err = os.MkdirTemp(c.workRoot, fmt.Sprintf("eni-cni-bench-%d-", os.Getpid())); err != nil {
		return err
	}
	if c.install {
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(c.repo, "scripts/install-test-deps.sh"), "--tools", c.tools, "--with-kubelet")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("scripts/install-test-deps.sh --with-kubelet: %w", err)
		}
	}
	if err := b.phaseKubelet(ctx); err != nil {
		return err
	}
	b.kubeletRows()
	if c.md != "" {
		if err := b.spliceKubelet(c.md); err != nil {
			b.logf("BENCHMARKS.md not updated: %v", err)
		} else {
			b.logf("rewrote the kubelet burst block of %s", c.md)
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	for i, x := range b.res.Rows {
		if i == 0 {
			fmt.Fprintf(tw, "\n%s\t\t\t\n  figure\teni-cni\tptp+host-local\teni-cni/ref\n", x.Section)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", x.Figure, x.ENI, x.Ref, x.Ratio)
	}
	return tw.Flush()
}

const kubeletSection = "kubelet burst"

// kubeletRows adds the kubelet burst section to the table.
func (b *bench) kubeletRows() {
	kb := b.res.Kubelet
	if kb == nil {
		return
	}
	per := func(p string, f func(kubeRound) []float64) dist {
		var xs []float64
		for _, r := range kb.Rounds {
			if r.Plugin == p {
				xs = append(xs, f(r)...)
			}
		}
		return summarize(xs)
	}
	last := func(p string, f func(kubeRound) float64) dist {
		return per(p, func(r kubeRound) []float64 { return []float64{f(r)} })
	}
	rounds := len(kb.Rounds) / 2
	sec := fmt.Sprintf("%s (%d static pod manifests at once, a real %s + containerd %s, %d rounds each, same kubelet)",
		kubeletSection, kb.Pods, kb.Kubelet, kb.Containerd, rounds)
	res := &b.res
	add := func(figure string, f func(kubeRound) float64) {
		e, r := last("eni", f), last("ref", f)
		res.Rows = append(res.Rows, row{sec, figure, joinF(f2, e.P50, e.Max), joinF(f2, r.P50, r.Max),
			joinF(r2, ratio(e.P50, r.P50), ratio(e.Max, r.Max))})
	}
	add("last pod Ready as kubelet reports it (/pods): median / worst round (s)", func(r kubeRound) float64 { return r.LastKubeletReady })
	add("last sandbox READY as the runtime lists it (CRI): median / worst round (s)", func(r kubeRound) float64 { return r.LastSandboxReady })
	ke, kr := per("eni", func(r kubeRound) []float64 { return r.KubeletReady }), per("ref", func(r kubeRound) []float64 { return r.KubeletReady })
	res.Rows = append(res.Rows, row{sec, "each pod Ready after the manifests: p50 / p90 (s)",
		joinF(f2, ke.P50, ke.P90), joinF(f2, kr.P50, kr.P90), joinF(r2, ratio(ke.P50, kr.P50), ratio(ke.P90, kr.P90))})
	add("manifests removed: last sandbox stopped (CNI DEL done): median / worst round (s)", func(r kubeRound) float64 { return r.LastStopped })
}

const (
	kubeletBegin = "<!-- BEGIN KUBELET BURST (make bench writes it; bench -only kubelet rewrites just this part) -->"
	kubeletEnd   = "<!-- END KUBELET BURST -->"
)

func isKubeletRow(x row) bool { return strings.HasPrefix(x.Section, kubeletSection) }

// kubeletMarkdown is the kubelet burst's block of BENCHMARKS.md: its table
// and how it was measured, between markers so that -only kubelet can
// rewrite it in place.
func (b *bench) kubeletMarkdown() string {
	if b.res.Kubelet == nil {
		return ""
	}
	var m strings.Builder
	m.WriteString("\n" + kubeletBegin + "\n")
	for i, x := range b.res.Rows {
		if !isKubeletRow(x) {
			continue
		}
		if i == 0 || !isKubeletRow(b.res.Rows[i-1]) {
			fmt.Fprintf(&m, "\n**%s**\n\n| figure | eni-cni | ptp+host-local | eni-cni / ref |\n|---|---|---|---|\n",
				strings.ToUpper(x.Section[:1])+x.Section[1:])
		}
		fmt.Fprintf(&m, "| %s | %s | %s | %s |\n", mdEscape(x.Figure), mdEscape(x.ENI), mdEscape(x.Ref), mdEscape(x.Ratio))
	}
	fmt.Fprintf(&m, "\n%s Measured %s, load average %s at the end.\n%s\n", b.kubeletMethod(),
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), loadAvg(), kubeletEnd)
	return m.String()
}

// spliceKubelet rewrites the kubelet block of an existing BENCHMARKS.md
// (or adds it before the targets) and leaves the rest of the file alone.
func (b *bench) spliceKubelet(path string) error {
	return splice(path, kubeletBegin, kubeletEnd, b.kubeletMarkdown())
}

// splice rewrites the block between begin and end of an existing
// BENCHMARKS.md with block (or adds it before the targets) and leaves the
// rest of the file alone.
func splice(path, begin, end, block string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(old)
	block = strings.TrimPrefix(block, "\n")
	if i := strings.Index(s, begin); i >= 0 {
		j := strings.Index(s[i:], end)
		if j < 0 {
			return fmt.Errorf("%s: %q without %q", path, begin, end)
		}
		s = s[:i] + strings.TrimSuffix(block, "\n") + s[i+j+len(end):]
	} else if i := strings.Index(s, "\n## Targets"); i >= 0 {
		s = s[:i] + "\n" + block + s[i:]
	} else {
		s += "\n" + block
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// kubeletMethod says how the kubelet burst was measured.
func (b *bench) kubeletMethod() string {
	kb := b.res.Kubelet
	return fmt.Sprintf("Kubelet burst (`scripts/e2e/kubelet.sh --bench`): %s standalone (static pods, no API server) over a private "+
		"containerd %s running in a throwaway network namespace; each round writes %d pod manifests (the offline pause image) into "+
		"the static pod directory with one `mv`, polls kubelet's `/pods` and `crictl pods` every 50 ms until all are Ready, then "+
		"removes them and polls until every sandbox is stopped. eni-cni (static pool `10.99.0.0/24`, cooldown 5 s) and ptp + host-local "+
		"(`10.98.0.0/24`) alternate round by round under the same kubelet and containerd (containerd reloads the conflist in between). "+
		"These times are mostly kubelet's and containerd's own (pod workers, PLEG, sandbox creation, all competing for the CPUs); "+
		"the plugin's share is a few ms per pod.",
		kb.Kubelet, kb.Containerd, kb.Pods)
}
