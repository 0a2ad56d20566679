//go:build lean

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// The digest the cache is checked against is the embedded build's.
func TestEmbeddedDigest(t *testing.T) {
	for _, b := range []struct{ data, digest string }{{string(fullBinary), fullDigest}, {string(ec2Binary), ec2Digest}} {
		sum := sha256.Sum256([]byte(b.data))
		if got := hex.EncodeToString(sum[:]); got != strings.TrimSpace(b.digest) {
			t.Errorf("embedded digest %q, the embedded build hashes to %s (run make build)", b.digest, got)
		}
	}
}

// The ec2 build runs the EC2 pool's commands, the full build the rest, and
// each knows the other as current (or each run would unpack it again).
func TestEmbeddedBuildPerCommand(t *testing.T) {
	if b := embedded("warm").Build; b.Name != "ec2" || b.Digest != strings.TrimSpace(ec2Digest) || len(b.Siblings) != 1 || b.Siblings[0].Name != "full" || b.Siblings[0].Digest != strings.TrimSpace(fullDigest) {
		t.Errorf("warm runs %s %s (siblings %v)", b.Name, b.Digest, b.Siblings)
	}
	if b := embedded("gc").Build; b.Name != "full" || b.Digest != strings.TrimSpace(fullDigest) || len(b.Siblings) != 1 || b.Siblings[0].Name != "ec2" || b.Siblings[0].Digest != strings.TrimSpace(ec2Digest) {
		t.Errorf("gc runs %s %s (siblings %v)", b.Name, b.Digest, b.Siblings)
	}
}
