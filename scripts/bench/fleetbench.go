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
	sec := fmt.Sprintf("fleet scale-up on virtual time (%d m5.xlarge × %d pods at once, the account's EC2 buckets; make fleet); reference: the VPC CNI's ipamd, modelled", b.fleet[0].Opts.Nodes, b.fleet[0].Opts.PodsPerNode)
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
