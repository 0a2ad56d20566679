package fleet

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// `make fleet` runs TestFleet with these.
var (
	fleetNodes     = flag.Int("fleet.nodes", 0, "TestFleet: nodes launched at once (0 skips it)")
	fleetPods      = flag.Int("fleet.pods", 30, "TestFleet: pods per node")
	fleetAddWait   = flag.Duration("fleet.add-wait", 110*time.Second, "TestFleet: each ADD's wait on a dry pool (addWaitSeconds)")
	fleetJSON      = flag.String("fleet.json", "", "TestFleet: also write the reports here, as JSON (make bench reads them)")
	fleetTrace     = flag.Int("fleet.trace", 0, "TestFleet: print the EC2 timelines of this many of the nodes done last, and when the nodes' first, second, ... calls of each action got through")
	fleetShrunk    = flag.Bool("fleet.shrunk", false, "TestFleet: the account's buckets shrunk to -fleet.nodes/1000 (sizes and refills), so that a smaller fleet meets them as 1,000 nodes meet the account's")
	fleetConfigs   = flag.String("fleet.configs", "secondary,prefix,template,ungated,ipamd", "TestFleet: configurations to run (ungated: secondary addresses without the readiness gate; minimum, prefix-minimum: secondary addresses or prefix delegation with minimumIPTarget = pods + 5; ungated-ready: ungated with readyWhenFilled on, as on a runtime that never calls STATUS (containerd 1.x) with the default configuration; burst: secondary addresses, gated, the pods sent -fleet.pods-after after the launch)")
	fleetStory     = flag.Int("fleet.trace-story", 0, "TestFleet: with -fleet.trace, also print the whole story (each EC2 attempt and warm pass, in time order) of this many of the nodes whose pods waited longest")
	fleetPodsAfter = flag.Duration("fleet.pods-after", 10*time.Minute, "TestFleet: the burst configuration's pods are sent this long after the launch, to a fleet already Ready")
)

// TestFleet is `make fleet`: a scale-up of -fleet.nodes nodes, each
// receiving -fleet.pods pods at once when the readiness gate lets the
// scheduler send them, on virtual time (RunVirtual), in the
// configurations of -fleet.configs, beside the ipamd model; prints one
// table.
func TestFleet(t *testing.T) {
	if *fleetNodes == 0 {
		t.Skip("no -fleet.nodes")
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFLEET")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "fleet")
	base := Options{Nodes: *fleetNodes, PodsPerNode: *fleetPods, AddWait: *fleetAddWait, Gate: true, Warm: section.WarmConfig{WarmIPTarget: 5}, Trace: *fleetTrace > 0}
	if *fleetShrunk {
		k := float64(*fleetNodes) / 1000
		base.Throttling = ptr(ec2fake.AccountThrottling().Shrunk(k, k))
	}
	pd := base
	pd.Warm.PrefixDelegation = true
	lt := pd
	lt.LaunchPrefixes = (*fleetPods + 5 + 15) / 16
	ungated := base
	ungated.Gate = false
	minimum := base
	minimum.Warm.MinimumIPTarget = *fleetPods + 5
	pdMinimum := pd
	pdMinimum.Warm.MinimumIPTarget = *fleetPods + 5
	ungatedReady := ungated
	ungatedReady.Warm.ReadyWhenFilled = true
	burst := base
	burst.PodsAfter = *fleetPodsAfter
	configs := strings.Split(*fleetConfigs, ",")
	var rs []*Report
	for i, o := range []Options{base, pd, lt, ungated, minimum, pdMinimum, burst, ungatedReady} {
		if !slices.Contains(configs, []string{"secondary", "prefix", "template", "ungated", "minimum", "prefix-minimum", "burst", "ungated-ready"}[i]) {
			continue
		}
		wall := time.Now()
		synctest.Test(t, func(t *testing.T) {
			r, err := RunVirtual(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		})
		rs[len(rs)-1].Real = time.Since(wall)
	}
	if slices.Contains(configs, "ipamd") {
		rs = append(rs, IPAMD(*fleetNodes, *fleetPods, 1))
	}
	if *fleetJSON != "" {
		b, err := json.Marshal(rs)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*fleetJSON, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("scale-up on virtual time: %d nodes × %d pods at once, m5.xlarge, warmIPTarget 5, addWaitSeconds %v\n%s",
		*fleetNodes, *fleetPods, fleetAddWait.Seconds(), Table(rs))
	for _, r := range rs {
		if len(r.Timelines) == 0 {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s: when the nodes' k-th call got through\n%s", name(r), r.Ordinals())
		for _, tl := range r.Slowest(*fleetTrace) {
			fmt.Fprintf(&b, "  %s\n", tl)
		}
		b.WriteString("the nodes whose pods waited longest after Ready:\n")
		for _, tl := range r.LongestWaits(*fleetTrace) {
			fmt.Fprintf(&b, "  %s\n", tl)
		}
		for _, tl := range r.LongestWaits(*fleetStory) {
			b.WriteString(tl.Story())
		}
		t.Log(b.String())
	}
}

// `make fleet-real` runs TestFleetReal with these.
var (
	realNodes   = flag.Int("fleet.real-nodes", 0, "TestFleetReal: nodes of real processes (0 skips it; root)")
	realBin     = flag.String("fleet.eni-cni", "", "TestFleetReal: the eni-cni binary (make build)")
	realEC2Fake = flag.String("fleet.ec2fake", "", "TestFleetReal: the ec2fake command (go build ./ec2/ec2fake/cmd/ec2fake)")
	realRefill  = flag.Float64("fleet.real-refill", 4, "TestFleetReal: the buckets' refill, multiplied by this beyond nodes/1000 (their sizes are multiplied by nodes/1000): shortens the run as many times")
	realConfigs = flag.String("fleet.real-configs", "secondary", "TestFleetReal: configurations (secondary, prefix, template, ungated, minimum)")
)

// TestFleetReal is `make fleet-real`: the scale-up with real processes
// (RunReal: -fleet.real-nodes nodes, each a network namespace running the
// binary, against one ec2fake world process whose buckets are the
// account's shrunk to the fleet), and beside it the simulation on virtual
// time of the same fleet against the same buckets; prints both.
func TestFleetReal(t *testing.T) {
	if *realNodes == 0 {
		t.Skip("no -fleet.real-nodes")
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFLEET")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "fleet")
	k := float64(*realNodes) / 1000
	ro := RealOptions{Bin: *realBin, EC2Fake: *realEC2Fake, Size: k, Refill: k * *realRefill, Log: t.Output()}
	base := Options{Nodes: *realNodes, PodsPerNode: *fleetPods, AddWait: *fleetAddWait, Gate: true, Timeout: 10 * time.Minute,
		Warm: section.WarmConfig{WarmIPTarget: 5}, Throttling: ro.Throttling()}
	configs := map[string]Options{"secondary": base, "ungated": base, "prefix": base, "template": base, "minimum": base}
	ungated := configs["ungated"]
	ungated.Gate = false
	configs["ungated"] = ungated
	pd := base
	pd.Warm.PrefixDelegation = true
	configs["prefix"] = pd
	pd.LaunchPrefixes = (*fleetPods + 5 + 15) / 16
	configs["template"] = pd
	minimum := base
	minimum.Warm.MinimumIPTarget = *fleetPods + 5
	configs["minimum"] = minimum
	var rs []*Report
	for _, c := range strings.Split(*realConfigs, ",") {
		o, ok := configs[c]
		if !ok {
			t.Fatalf("-fleet.real-configs: no configuration %q", c)
		}
		// Interrupted, the run still deletes its namespaces and stops its world.
		ctx, stop := signal.NotifyContext(t.Context(), os.Interrupt, syscall.SIGTERM)
		real, err := RunReal(ctx, o, ro)
		stop()
		if err != nil {
			t.Fatal(err)
		}
		wall := time.Now()
		synctest.Test(t, func(t *testing.T) {
			sim, err := RunVirtual(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, real, sim)
		})
		rs[len(rs)-1].Real = time.Since(wall)
	}
	t.Logf("scale-up, real processes beside the simulation: %d nodes × %d pods at once, m5.xlarge, warmIPTarget 5, addWaitSeconds %v; buckets: sizes × %g, refills × %g of the account's\n%s",
		*realNodes, *fleetPods, fleetAddWait.Seconds(), ro.Size, ro.Refill, Table(rs))
}
