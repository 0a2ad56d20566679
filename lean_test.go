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
	sum := sha256.Sum256(fullBinary)
	if got := hex.EncodeToString(sum[:]); got != strings.TrimSpace(fullDigest) {
		t.Fatalf("embedded digest %q, the embedded build hashes to %s (run make build)", fullDigest, got)
	}
}
