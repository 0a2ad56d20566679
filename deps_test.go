package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLeanBuildStaysLean guards the exec cost of every CNI call: the lean
// build (the shipped binary) must not link the CRI client or the AWS SDK,
// whose package initialisation costs milliseconds per exec. They belong in
// the full build (seam_full.go), which the lean build reaches through its
// embedded copy (seam_lean.go, package delegate).
func TestLeanBuildStaysLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-e", "-tags", "lean", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, heavy := range []string{"google.golang.org/grpc", "google.golang.org/protobuf", "k8s.io/cri-api", "github.com/aws/"} {
			if strings.HasPrefix(dep, heavy) {
				t.Errorf("the lean build links %s", dep)
			}
		}
	}
}
