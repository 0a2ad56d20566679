package doctor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// checkPodSubnets says where pods get addresses with custom subnets (a
// zone map or discovery) and whether warm can still grow the pool there:
// a zone missing from the map, subnets EC2 found full. It reads the store
// only: warm records what it met.
func checkPodSubnets(e *Env, src *section.EC2) Result {
	const name = "pod-subnets"
	w := e.Warm
	switch {
	case e.Source != "ec2":
		return skip(name, "the %s pool has no subnets", e.Source)
	case !w.CustomSubnets():
		return skip(name, "pods get addresses of the node's ENIs in the primary ENI's subnet (or subnetID); no subnets or subnetDiscovery configured")
	case src == nil || src.AZ == "":
		return skip(name, "this node's availability zone is unknown until warm has run")
	}
	if !w.SubnetDiscovery {
		if _, ok := w.Subnets[src.AZ]; !ok {
			return fail(name, fmt.Sprintf("add %q to subnets in the conflist", src.AZ),
				"subnets has no entry for this node's availability zone %s: warm creates no ENI for pods and the pool stays empty", src.AZ)
		}
	}
	var in []string
	for _, eni := range src.ENIs {
		if eni.ForPods(true) && !slices.Contains(in, eni.SubnetID) {
			in = append(in, eni.SubnetID)
		}
	}
	var full []string
	for _, f := range src.FullSubnets {
		if e.Now.Before(f.Until) {
			full = append(full, fmt.Sprintf("%s (until %s)", f.ID, f.Until.Local().Format(time.TimeOnly)))
		}
	}
	if g := src.Growth; g != nil && g.Result == section.PassSubnetFull {
		return fail(name, "free addresses in the zone's pod subnets, or add a subnet (tagged "+section.SubnetRoleTag+" with subnetDiscovery)",
			"the warm pass of %s found every pod subnet of %s full: %s", g.At.Local().Format(time.TimeOnly), src.AZ, g.Describe())
	}
	if len(full) > 0 {
		return warn(name, "warm uses the zone's other pod subnets meanwhile; free addresses or add a subnet",
			"pod subnets of %s found full: %s", src.AZ, strings.Join(full, ", "))
	}
	how := "subnets"
	if w.SubnetDiscovery {
		how = "subnetDiscovery (tag " + section.SubnetRoleTag + ")"
	}
	return ok(name, "pods of %s in %s, from %s; the primary ENI's addresses are not theirs", src.AZ, orNone(in), how)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "no ENI yet"
	}
	return strings.Join(s, ", ")
}
