package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The minimums of gcGraceSeconds (60) and cooldownSeconds (5) keep tests
// from configuring time away; instead they move the store's clocks: these
// helpers rewrite the state file as if d had passed, on both the wall-clock
// stamps and the boot-clock ones (alloc/clock.go). Call them only while no
// plugin process runs for the network.

// ageAllocations makes every allocation of the store look d older.
func (nw *network) ageAllocations(t *testing.T, d time.Duration) {
	t.Helper()
	nw.rewriteState(t, func(st map[string]any) {
		for _, a := range list(st["allocations"]) {
			shiftStamps(t, a, "allocatedAt", "allocatedBootNs", -d)
		}
	})
}

// endCooldowns makes every cooling address reusable now.
func (nw *network) endCooldowns(t *testing.T) {
	t.Helper()
	nw.rewriteState(t, func(st map[string]any) {
		for _, c := range list(st["cooling"]) {
			shiftStamps(t, c, "until", "untilBootNs", -24*time.Hour)
		}
	})
}

func list(v any) []map[string]any {
	items, _ := v.([]any)
	out := make([]map[string]any, 0, len(items))
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func shiftStamps(t *testing.T, m map[string]any, wallKey, bootKey string, d time.Duration) {
	t.Helper()
	if s, ok := m[wallKey].(string); ok {
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatalf("state: %s %q: %v", wallKey, s, err)
		}
		m[wallKey] = at.Add(d).Format(time.RFC3339Nano)
	}
	if n, ok := m[bootKey].(json.Number); ok {
		ns, err := n.Int64()
		if err != nil {
			t.Fatalf("state: %s %q: %v", bootKey, n, err)
		}
		m[bootKey] = ns + int64(d)
	}
}

// rewriteState applies fn to the decoded state file and writes it back the
// way the plugin does (temporary file, rename), keeping fields it does not
// know and numbers as they are.
func (nw *network) rewriteState(t *testing.T, fn func(map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(nw.statePath())
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("decode %s: %v", nw.statePath(), err)
	}
	fn(st)
	if b, err = json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(nw.stateDir, "state.json.tmp-test")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, nw.statePath()); err != nil {
		t.Fatal(err)
	}
}
