//go:build ec2build

package main

import (
	"errors"
	"io"
	"testing"
)

// TestEC2BuildRunsWhatIsSentToIt: the lean build sends exactly the commands
// inEC2Build names to the ec2 build, so each must run there, and no other
// (a command sent nowhere would fail on every node).
func TestEC2BuildRunsWhatIsSentToIt(t *testing.T) {
	for _, cmd := range usageCommands(t) {
		use, ok := fullOnly(cmd)
		if !ok {
			continue
		}
		err := runFull(cmd, use, []string{"-h"}, io.Discard, io.Discard)
		if runs := !errors.Is(err, errNotInEC2Build); runs != inEC2Build(cmd) {
			t.Errorf("%s: inEC2Build %v, the ec2 build's runFull: %v", cmd, inEC2Build(cmd), err)
		}
	}
}
