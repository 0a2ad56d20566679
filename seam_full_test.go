//go:build !lean && !ec2build

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
	for _, cmd := range usageCommands(t) {
		use, ok := fullOnly(cmd)
		err := runFull(cmd, use, []string{"-h"}, io.Discard, io.Discard)
		unknown := err != nil && strings.Contains(err.Error(), "unknown command")
		if ok == unknown {
			t.Errorf("%s: fullOnly %v, but the full build's runFull says %v", cmd, ok, err)
		}
	}
}
