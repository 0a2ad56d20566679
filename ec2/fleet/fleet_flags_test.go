package fleet

import (
	"context"
	"flag"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// `make fleet` runs TestFleet with these.
var (
	fleetNodes   = flag.Int("fleet.nodes", 0, "TestFleet: nodes launched at once (0 skips it)")
	fleetPods    = flag.Int("fleet.pods", 30, "TestFleet: pods per node")
	fleetAddWait = flag.Duration("fleet.add-wait", 25*time.Second, "TestFleet: each ADD's wait on a dry pool (addWaitSeconds)")
	fleetConfigs = flag.String("fleet.configs", "secondary,prefix,template,ungated,ipamd", "TestFleet: configurations to run (ungated: secondary addresses without the readiness gate; minimum, prefix-minimum: secondary addresses or prefix delegation with minimumIPTarget = pods + 5)")
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
	base := Options{Nodes: *fleetNodes, PodsPerNode: *fleetPods, AddWait: *fleetAddWait, Gate: true, Warm: section.WarmConfig{WarmIPTarget: 5}}
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
	configs := strings.Split(*fleetConfigs, ",")
	var rs []*Report
	for i, o := range []Options{base, pd, lt, ungated, minimum, pdMinimum} {
		if !slices.Contains(configs, []string{"secondary", "prefix", "template", "ungated", "minimum", "prefix-minimum"}[i]) {
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
	t.Logf("scale-up on virtual time: %d nodes × %d pods at once, m5.xlarge, warmIPTarget 5, addWaitSeconds %v\n%s",
		*fleetNodes, *fleetPods, fleetAddWait.Seconds(), Table(rs))
}
