package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/eni-cni/eni-cni/ec2/fleet"
)

// fleetNodes is the fleet row group's size: on virtual time (ec2/fleet
// RunVirtual) a hundred nodes take a few seconds of this machine each.
const fleetNodes = 100

// phaseFleet is `make fleet` at fleetNodes: a scale-up of fleetNodes
// m5.xlarge nodes × 30 pods against the account's buckets, in the three
// configurations and the VPC CNI's ipamd model. The simulation runs in a
// testing/synctest bubble, that is in TestFleet, so it is run as a test.
func (b *bench) phaseFleet(ctx context.Context) error {
	out := filepath.Join(b.out, "fleet.json")
	cmd := exec.CommandContext(ctx, b.cfg.goCmd, "test", "-count=1", "-timeout", "0", "-run", "^TestFleet$", "./ec2/fleet", "-args",
		"-fleet.nodes", fmt.Sprint(fleetNodes), "-fleet.configs", "secondary,prefix,template,ipamd", "-fleet.json", out)
	cmd.Dir = b.cfg.repo
	if log, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("TestFleet: %w: %s", err, lastLines(string(log), 20))
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, &b.fleet)
}

// fleetRows are the fleet's rows: one per configuration of eni-cni's
// code; the reference column of the default configuration's row is the
// VPC CNI's ipamd modelled on the same buckets (ptp+host-local has no
// fleet), its ratio the two last pods'.
func (b *bench) fleetRows() []row {
	if len(b.fleet) == 0 {
		return nil
	}
	sec := fmt.Sprintf("%s (%d m5.xlarge × %d pods at once, the account's EC2 buckets; make fleet); reference: the VPC CNI's ipamd, modelled", fleetSection, b.fleet[0].Opts.Nodes, b.fleet[0].Opts.PodsPerNode)
	var ipamd *fleet.Report
	for _, r := range b.fleet {
		if r.Model != "" {
			ipamd = r
		}
	}
	var rows []row
	for _, r := range b.fleet {
		if r.Model != "" {
			continue
		}
		x := row{sec, fleetLabel(r) + ": last pod / bound / p50 / p99 node (s), mutating calls a node, throttled, failed ADDs", fleetFigures(r), "–", "–"}
		if ipamd != nil && r.Opts.LaunchPrefixes == 0 && !r.Opts.Warm.PrefixDelegation {
			x.Ref, x.Ratio = fleetFigures(ipamd), r2(ratio(r.Last.Seconds(), ipamd.Last.Seconds()))
		}
		rows = append(rows, x)
	}
	return rows
}

// fleetFigures is one scale-up's figures, as fleetRows names them.
func fleetFigures(r *fleet.Report) string {
	th, failed := 0, 0
	for _, n := range r.Throttled {
		th += n
	}
	for _, n := range r.AddFailed {
		failed += n
	}
	s := func(d time.Duration) string { return fmt.Sprintf("%.0f", d.Seconds()) }
	out := fmt.Sprintf("%s / %s / %s / %s, %.1f, %d", s(r.Last), s(r.Bound), s(r.Percentile(0.5)), s(r.Percentile(0.99)),
		float64(r.Mutations())/float64(max(1, r.Opts.Nodes)), th)
	if r.Model != "" {
		return out + ", (no ADD model)"
	}
	return out + fmt.Sprintf(", %d", failed)
}

const (
	fleetSection = "fleet scale-up on virtual time"
	fleetBegin   = "<!-- BEGIN FLEET (make bench writes it; bench -only fleet rewrites just this part) -->"
	fleetEnd     = "<!-- END FLEET -->"
)

func isFleetRow(x row) bool { return strings.HasPrefix(x.Section, fleetSection) }

// runFleetOnly is -only fleet: the fleet's rows on stdout and its block of
// -md rewritten in place (the rest of the file keeps the last full run).
func (b *bench) runFleetOnly(ctx context.Context) error {
	c := &b.cfg
	c.repo, c.out = absPath(c.repo), absPath(c.out)
	b.out = c.out
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return err
	}
	if err := b.phaseFleet(ctx); err != nil {
		return err
	}
	b.res.Rows = b.fleetRows()
	if c.md != "" {
		if err := splice(c.md, fleetBegin, fleetEnd, b.fleetMarkdown()); err != nil {
			b.logf("BENCHMARKS.md not updated: %v", err)
		} else {
			b.logf("rewrote the fleet block of %s", c.md)
		}
	}
	for _, x := range b.res.Rows {
		fmt.Printf("%s: %s\n  eni-cni: %s\n  ipamd model: %s\n", x.Section, x.Figure, x.ENI, x.Ref)
	}
	return nil
}

// fleetMarkdown is the fleet's block of BENCHMARKS.md: its table and how
// it was measured, between markers so that -only fleet can rewrite it.
func (b *bench) fleetMarkdown() string {
	var m strings.Builder
	for i, x := range b.res.Rows {
		if !isFleetRow(x) {
			continue
		}
		if m.Len() == 0 {
			m.WriteString("\n" + fleetBegin + "\n")
		}
		if i == 0 || !isFleetRow(b.res.Rows[i-1]) {
			fmt.Fprintf(&m, "\n**%s**\n\n| figure | eni-cni | VPC CNI ipamd (model) | eni-cni / ipamd |\n|---|---|---|---|\n",
				strings.ToUpper(x.Section[:1])+x.Section[1:])
		}
		fmt.Fprintf(&m, "| %s | %s | %s | %s |\n", mdEscape(x.Figure), mdEscape(x.ENI), mdEscape(x.Ref), mdEscape(x.Ratio))
	}
	if m.Len() == 0 {
		return ""
	}
	fmt.Fprintf(&m, "\nFleet (`make fleet` at %d nodes: `ec2/fleet` TestFleet, the real warm, STATUS and ADD code of every node on virtual "+
		"time against one ec2fake world throttled with the account's token buckets, gated by the readiness gate; docs/scale.md). "+
		"The reference is the VPC CNI's ipamd call pattern modelled on the same buckets (no ADD model: its failed ADDs are not counted). "+
		"Measured %s.\n%s\n", fleetNodes, time.Now().UTC().Format("2006-01-02 15:04 UTC"), fleetEnd)
	return m.String()
}

// fleetLabel names a report's configuration.
func fleetLabel(r *fleet.Report) string {
	switch {
	case r.Model != "":
		return r.Model
	case r.Opts.LaunchPrefixes > 0:
		return fmt.Sprintf("launch-template /28 prefixes (%d)", r.Opts.LaunchPrefixes)
	case r.Opts.Warm.PrefixDelegation:
		return "prefix delegation"
	}
	return "secondary addresses (default)"
}

// lastLines is the end of a command's output, for an error.
func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
