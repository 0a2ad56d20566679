// Command fleet is `make fleet`: a scale-up of N eni-cni nodes, each
// receiving 30 pods at once, against one EC2 account's token buckets, in
// three configurations (secondary addresses, prefix delegation, addresses
// from the launch template), with the real warm and ADD code on compressed
// time (package ec2/fleet). Prints one table.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/eni-cni/eni-cni/ec2/fleet"
	"github.com/eni-cni/eni-cni/ec2/section"
)

func main() {
	nodes := flag.Int("nodes", 1000, "nodes launched at once")
	pods := flag.Int("pods", 30, "pods per node")
	scale := flag.Float64("scale", 20, "virtual seconds per real second")
	addWait := flag.Duration("add-wait", 110*time.Second, "each ADD's wait on a dry pool (addWaitSeconds)")
	only := flag.String("configs", "secondary,prefix,template,ipamd,steady", "which configurations and scenarios to run")
	steadyNodes := flag.Int("steady-nodes", 0, "nodes of the steady state (default: -nodes)")
	steadyHours := flag.Int("steady-hours", 24, "hours of steady state, after the first")
	steadyEvery := flag.Duration("steady-every", 30*time.Second, "each node's timer in the steady state")
	flag.Parse()
	os.Setenv("AWS_ACCESS_KEY_ID", "AKIDFLEET")
	os.Setenv("AWS_SECRET_ACCESS_KEY", "fleet")
	base := fleet.Options{Nodes: *nodes, PodsPerNode: *pods, Scale: *scale, AddWait: *addWait, Warm: section.WarmConfig{WarmIPTarget: 5}}
	pd := base
	pd.Warm.PrefixDelegation = true
	lt := pd
	lt.LaunchPrefixes = (*pods + 5 + 15) / 16
	var rs []*fleet.Report
	for i, o := range []fleet.Options{base, pd, lt} {
		if !strings.Contains(*only, []string{"secondary", "prefix", "template"}[i]) {
			continue
		}
		r, err := fleet.Run(context.Background(), o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet:", err)
			os.Exit(1)
		}
		rs = append(rs, r)
	}
	if strings.Contains(*only, "ipamd") {
		rs = append(rs, fleet.IPAMD(*nodes, *pods, 1))
	}
	fmt.Printf("scale-up: %d nodes × %d pods at once, m5.xlarge, warmIPTarget 5, addWaitSeconds %v, time compressed ×%g\n", *nodes, *pods, addWait.Seconds(), *scale)
	fmt.Print(fleet.Table(rs))
	if strings.Contains(*only, "steady") {
		n := *steadyNodes
		if n == 0 {
			n = *nodes
		}
		r, err := fleet.Steady(context.Background(), fleet.SteadyOptions{Options: fleet.Options{Nodes: n, PodsPerNode: *pods, Warm: base.Warm},
			Hours: *steadyHours, Every: *steadyEvery})
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleet:", err)
			os.Exit(1)
		}
		fmt.Print("\n", fleet.SteadyTable(r))
	}
}
