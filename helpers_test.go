package main

import (
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/plugin"
)

// testVerbs are the CNI verbs as this build serves them.
var testVerbs = plugin.CNI{Full: full()}

func newPlugin(cfg *netconf.Config) (*plugin.Plugin, error) { return plugin.Open(cfg, full()) }

// age makes an allocation d older, on both clocks.
func age(a *alloc.Allocation, d time.Duration) {
	a.AllocatedAt = a.AllocatedAt.Add(-d)
	a.AllocatedBoot -= d
}
