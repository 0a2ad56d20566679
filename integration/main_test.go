package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// pluginBin is the eni-cni binary under test: $ENI_CNI_BIN, or built once by
// TestMain from this checkout.
var pluginBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Println("integration: skipping all tests: they need root to create network namespaces, veths, routes and rules")
		return 0
	}
	for _, tool := range []string{"nsenter", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "integration: %s not found in PATH (util-linux, iputils-ping; see scripts/install-test-deps.sh)\n", tool)
			return 1
		}
	}
	if bin := os.Getenv("ENI_CNI_BIN"); bin != "" {
		abs, err := filepath.Abs(bin)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "integration: ENI_CNI_BIN=%s: %v\n", bin, err)
			return 1
		}
		pluginBin = abs
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "eni-cni-integration-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	pluginBin = filepath.Join(dir, "eni-cni")
	build := exec.Command("go", "build", "-o", pluginBin, "github.com/eni-cni/eni-cni")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: go build of eni-cni failed: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}
