//go:build !lean

package main

import (
	"io"
	"strings"
	"testing"
)

// TestFullOnlyNamesTheFullBuildsCommands: fullOnly is the one list of the
// delegated commands; the full build runs exactly those in process, so a
// command added to one side and not the other fails here.
func TestFullOnlyNamesTheFullBuildsCommands(t *testing.T) {
	var names []string
	for _, line := range strings.Split(usage, "\n") {
		if f := strings.Fields(line); strings.HasPrefix(line, "  ") && len(f) > 0 && !strings.HasPrefix(f[0], "-") && !strings.HasPrefix(f[0], "[") {
			names = append(names, f[0])
		}
	}
	if len(names) < 12 {
		t.Fatalf("found only %v in the usage", names)
	}
	for _, cmd := range names {
		use, ok := fullOnly(cmd)
		err := runFull(cmd, use, []string{"-h"}, io.Discard, io.Discard)
		unknown := err != nil && strings.Contains(err.Error(), "unknown command")
		if ok == unknown {
			t.Errorf("%s: fullOnly %v, but the full build's runFull says %v", cmd, ok, err)
		}
	}
}
