package plugin

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/gc"
)

// TestDelNeverUnroutesAReusedAddress: a DEL has looked up its attachment
// and is then held up (a loaded node, a stopped process) for longer than
// the cooldown before it unroutes. Meanwhile the same attachment is
// released by someone else (the runtime's repeated DEL, or gc), the
// cooldown passes and a new pod's ADD is given the address and wired.
// When the stalled DEL goes on it must not delete the new pod's rules
// (found by address alone, as the kernel's are): a DEL removes an
// allocation's wiring only while the allocation still holds the address.
func TestDelNeverUnroutesAReusedAddress(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		release func(t *testing.T, p *Plugin) error // the other release of "dead"
	}{
		{"repeated DEL", func(t *testing.T, p *Plugin) error { return p.del(ctx, att("dead").Key, "") }},
		{"gc", func(t *testing.T, p *Plugin) error {
			live := gc.FromSandboxes([]gc.Sandbox{{ID: "alive", Ready: true}})
			_, err := p.Collect(ctx, live, gc.Options{Grace: 10 * time.Minute, RefuseEmpty: true}, false, &fakeHost{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stageReuseRace(t, "the stalled DEL of the dead pod",
				func(p *Plugin) error { return tc.release(t, p) },
				func(p *Plugin) error { return p.del(ctx, att("dead").Key, "") })
		})
	}
}

func fmtRules(m map[netip.Addr]string) string {
	s := ""
	for ip, veth := range m {
		s += ip.String() + "->" + veth + " "
	}
	return s
}
