//go:build !lean && !ec2build

package main

import (
	"io"
	"strings"
	"testing"

	"github.com/eni-cni/eni-cni/delegate"
)

// TestFullOnlyNamesTheFullBuildsCommands: delegate.For is the one list of the
// delegated commands; the full build runs exactly those in process, so a
// command added to one side and not the other fails here.
func TestFullOnlyNamesTheFullBuildsCommands(t *testing.T) {
	for _, cmd := range usageCommands(t) {
		to, ok := delegate.For(cmd)
		err := runFull(cmd, to.Use, []string{"-h"}, io.Discard, io.Discard)
		unknown := err != nil && strings.Contains(err.Error(), "unknown command")
		if ok == unknown {
			t.Errorf("%s: delegate.For %v, but the full build's runFull says %v", cmd, ok, err)
		}
	}
}
