package netconf

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzParseConfig: any stdin either parses into a configuration that keeps
// the documented limits, or is an error the runtime can act on (6 or 7);
// never a panic. Seeds: testdata/fuzz/FuzzParseConfig.
func FuzzParseConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			// Codes 6 and 7 (plugin.toCNIError).
			if !errors.Is(err, ErrDecode) && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("config error neither a decoding nor a configuration error: %v", err)
			}
			return
		}
		switch {
		case c.Network == "":
			t.Fatal("empty network accepted")
		case !strings.HasPrefix(c.StateDir, "/"):
			t.Fatalf("relative stateDir %q accepted", c.StateDir)
		case c.MTU < 576 || c.MTU > 65535:
			t.Fatalf("mtu %d accepted", c.MTU)
		case c.Cooldown < minCooldown || c.GCGrace < MinGCGrace:
			t.Fatalf("cooldown %s / grace %s below the minimums accepted", c.Cooldown, c.GCGrace)
		case c.LockTimeout <= 0 || c.LockTimeout > 366*24*time.Hour:
			t.Fatalf("lock timeout %s accepted", c.LockTimeout)
		case !validVethPrefix(c.VethPrefix):
			t.Fatalf("veth prefix %q accepted", c.VethPrefix)
		case c.Pool == nil:
			t.Fatal("no pool")
		}
	})
}
