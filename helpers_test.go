package main

import (
	"strings"
	"testing"
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

// usageCommands are the commands the usage text lists.
func usageCommands(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, line := range strings.Split(usage, "\n") {
		if f := strings.Fields(line); strings.HasPrefix(line, "  ") && len(f) > 0 && !strings.HasPrefix(f[0], "-") && !strings.HasPrefix(f[0], "[") {
			names = append(names, f[0])
		}
	}
	if len(names) < 12 {
		t.Fatalf("found only %v in the usage", names)
	}
	return names
}
