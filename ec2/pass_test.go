package ec2

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/lockfile"
	"github.com/eni-cni/eni-cni/netconf"
)

// TestWarmLockRefusesUnsafeFiles: warm.lock goes through lockfile like
// every lock file: a symlink planted in its place is not followed (nor its
// target created), a FIFO neither hangs the pass nor counts as the lock,
// and a lock file others may write is not trusted. Each is refused before
// IMDS or EC2 is asked anything.
func TestWarmLockRefusesUnsafeFiles(t *testing.T) {
	for name, plant := range map[string]func(t *testing.T, p string){
		"symlink": func(t *testing.T, p string) {
			if err := os.Symlink(filepath.Join(filepath.Dir(p), "elsewhere"), p); err != nil {
				t.Fatal(err)
			}
		},
		"fifo": func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"world-writable": func(t *testing.T, p string) {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, 0o666); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			plant(t, filepath.Join(dir, WarmLockName))
			cfg := &netconf.Config{Provider: netconf.EC2, StateDir: dir, IMDSEndpoint: "http://127.0.0.1:1"}
			var out strings.Builder
			done := make(chan error, 1)
			go func() {
				ran, err := WarmPass(cfg, nil, &out, nil)
				if ran {
					err = errors.Join(err, errors.New("the pass ran"))
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, lockfile.ErrUnsafe) {
					t.Errorf("warm with a %s for warm.lock: %v (output %q); want it refused as unsafe", name, err, out.String())
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("warm with a %s for warm.lock hangs", name)
			}
			if _, err := os.Lstat(filepath.Join(dir, "elsewhere")); err == nil {
				t.Error("the symlink's target was created")
			}
		})
	}
}
