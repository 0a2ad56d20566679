package doctor

import (
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/ec2/section"
)

func TestPodSubnets(t *testing.T) {
	e := ec2Env(t.TempDir())
	sec := &section.EC2{AZ: "us-east-1a", ENIs: []section.ENI{
		{ID: "eni-p", SubnetID: "subnet-node"},
		{ID: "eni-1", DeviceNumber: 1, SubnetID: "subnet-pods1", Created: true},
	}}
	want(t, checkPodSubnets(e, sec), Skip, "no subnets or subnetDiscovery")
	e.Warm.Subnets = map[string]section.ZoneSubnet{"us-east-1b": {SubnetID: "subnet-b"}}
	want(t, checkPodSubnets(e, sec), Fail, "no entry for this node's availability zone us-east-1a")
	want(t, checkPodSubnets(e, &section.EC2{}), Skip, "until warm has run")
	e.Warm.Subnets = nil
	e.Warm.SubnetDiscovery = true
	want(t, checkPodSubnets(e, sec), OK, "pods of us-east-1a in subnet-pods1, from subnetDiscovery")
	sec.MarkSubnetFull("subnet-pods1", e.Now)
	want(t, checkPodSubnets(e, sec), Warn, "found full: subnet-pods1")
	e.Now = e.Now.Add(section.FullSubnetTTL)
	want(t, checkPodSubnets(e, sec), OK, "in subnet-pods1")
	sec.Growth = &section.PassOutcome{At: time.Now(), Result: section.PassSubnetFull, Message: "every pod subnet of the zone is full"}
	want(t, checkPodSubnets(e, sec), Fail, "found every pod subnet of us-east-1a full")
}
