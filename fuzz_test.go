package main

import (
	"strings"
	"testing"
	"time"
)

// FuzzParseConfig: any stdin either parses into a configuration that keeps
// the documented limits, or is an error the runtime can act on (6 or 7);
// never a panic. Seeds: testdata/fuzz/FuzzParseConfig.
func FuzzParseConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseConfig(data)
		if err != nil {
			if code := toCNIError(err).Code; code != 6 && code != 7 {
				t.Fatalf("config error with code %d: %v", code, err)
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
		case c.Cooldown < minCooldown || c.GCGrace < minGCGrace:
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

// FuzzParseCNIArgs: CNI_ARGS either parses into keys and values the
// plugin can record (non-empty keys; values short and without control
// characters) or is a code 4 error. Seeds: testdata/fuzz/FuzzParseCNIArgs.
func FuzzParseCNIArgs(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		kv, err := parseCNIArgs(s)
		if err != nil {
			if code := toCNIError(err).Code; code != 4 {
				t.Fatalf("CNI_ARGS error with code %d: %v", code, err)
			}
			return
		}
		for k, v := range kv {
			if k == "" || strings.ContainsAny(k, "=;") {
				t.Fatalf("key %q", k)
			}
			if len(v) > 253 || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) || strings.Contains(v, ";") {
				t.Fatalf("value %q of %s", v, k)
			}
		}
	})
}
