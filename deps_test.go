package main

import (
	"os"
	"os/exec"
	"slices"
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

// TestEC2BuildLinksNoCRI guards the start of every warm pass the timer
// runs: the ec2 build (seam_ec2.go) links the AWS SDK, not the CRI client,
// protobuf or D-Bus, whose package initialisation (cri-api's descriptors
// above all) took milliseconds of each pass when warm ran in the full build.
func TestEC2BuildLinksNoCRI(t *testing.T) {
	tags := makefileVar(t, "EC2_TAGS")
	out, err := exec.Command("go", "list", "-e", "-tags", tags, "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/aws/aws-sdk-go-v2/service/ec2") {
		t.Fatal("the ec2 build does not link the EC2 client: this test no longer guards anything")
	}
	for _, dep := range deps {
		for _, heavy := range []string{"google.golang.org/grpc", "google.golang.org/protobuf", "k8s.io/cri-api", "github.com/godbus/"} {
			if strings.HasPrefix(dep, heavy) {
				t.Errorf("the ec2 build (-tags %q) links %s", tags, dep)
			}
		}
	}
}

// TestFullBuildKeepsDeadCodeElimination guards the full build's size and
// start-up: grpc-go links golang.org/x/net/trace unless built with the
// grpcnotrace tag, and trace's html/template (a reflect.Method user) makes
// the linker keep every exported method of every reachable type. The
// Makefile builds with FULL_TAGS; this checks that those tags keep every
// such package out.
func TestFullBuildKeepsDeadCodeElimination(t *testing.T) {
	tags := makefileVar(t, "FULL_TAGS")
	out, err := exec.Command("go", "list", "-e", "-tags", tags, "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "google.golang.org/grpc") {
		t.Fatal("the full build does not link grpc: this test no longer guards anything")
	}
	for _, dep := range deps {
		switch dep {
		case "golang.org/x/net/trace", "html/template", "text/template":
			t.Errorf("the full build (-tags %q) links %s, which turns off the linker's dead code elimination of methods", tags, dep)
		}
	}
}

// makefileVar returns the value of a simple `NAME := value` line of the
// Makefile, so the test checks the flags the shipped build really uses.
func makefileVar(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" :="); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("Makefile has no %s := line", name)
	return ""
}
