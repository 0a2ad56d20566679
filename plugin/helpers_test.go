package plugin

import (
	"github.com/containernetworking/cni/pkg/skel"

	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/netconf"
)

// The tests run the full build's side of the seam: IMDS read in process.
var testCNI = CNI{Full: ec2.InProcess{}}

func newPlugin(cfg *netconf.Config) (*Plugin, error) { return Open(cfg, ec2.InProcess{}) }

func cmdStatus(args *skel.CmdArgs) error { return testCNI.Status(args) }
