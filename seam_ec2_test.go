//go:build ec2build

package main

import (
	"errors"
	"io"
	"testing"

	"github.com/eni-cni/eni-cni/delegate"
)

// TestEC2BuildRunsWhatIsSentToIt: the lean build sends exactly the commands
// delegate.For sends to the ec2 build, so each must run there, and no other
// (a command sent nowhere would fail on every node).
func TestEC2BuildRunsWhatIsSentToIt(t *testing.T) {
	for _, cmd := range usageCommands(t) {
		to, ok := delegate.For(cmd)
		if !ok {
			continue
		}
		err := runFull(cmd, to.Use, []string{"-h"}, io.Discard, io.Discard)
		if runs := !errors.Is(err, errNotInEC2Build); runs != to.EC2 {
			t.Errorf("%s: EC2 %v, the ec2 build's runFull: %v", cmd, to.EC2, err)
		}
	}
}
