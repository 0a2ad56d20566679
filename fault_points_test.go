package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/eni-cni/eni-cni/fault"
	"github.com/eni-cni/eni-cni/fault/faultscan"
)

// TestFaultPointsAbsentFromProduction: the crash points exist only in a
// build with -tags faultinject. The production build must not carry their
// names (the no-op Point and its argument are compiled away), while the
// fault build must (or this test could not fail).
func TestFaultPointsAbsentFromProduction(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary twice")
	}
	points, err := faultscan.Points(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(points) < 10 {
		t.Fatalf("found only %d crash points in the source: %v", len(points), points)
	}
	dir := t.TempDir()
	build := func(name string, tags ...string) []byte {
		t.Helper()
		out := filepath.Join(dir, name)
		args := []string{"build", "-trimpath", "-o", out}
		if len(tags) > 0 {
			args = append(args, "-tags", tags[0])
		}
		cmd := exec.Command("go", append(args, ".")...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, b)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	prod, faulty := build("eni-cni"), build("eni-cni-fault", "faultinject")
	for _, name := range faultscan.Names(points) {
		if bytes.Contains(prod, []byte(name)) {
			t.Errorf("the production build contains crash point %q (from %v)", name, points[name])
		}
		if !bytes.Contains(faulty, []byte(name)) {
			t.Errorf("the faultinject build lacks crash point %q (from %v)", name, points[name])
		}
	}
	if !bytes.Contains(faulty, []byte(fault.Env)) || bytes.Contains(prod, []byte(fault.Env)) {
		t.Errorf("%s must be read by the fault build only", fault.Env)
	}
}
