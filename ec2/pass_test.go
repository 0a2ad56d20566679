package ec2

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/lockfile"
	"github.com/eni-cni/eni-cni/lockfile/lockfiletest"
	"github.com/eni-cni/eni-cni/netconf"
)

// TestWarmLockRefusesUnsafeFiles: warm.lock goes through lockfile like
// every lock file: a symlink planted in its place is not followed (nor its
// target created), a FIFO neither hangs the pass nor counts as the lock,
// and a lock file others may write is not trusted. Each is refused before
// IMDS or EC2 is asked anything.
func TestWarmLockRefusesUnsafeFiles(t *testing.T) {
	for name, plant := range lockfiletest.Unsafe() {
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
			if lockfiletest.FollowedSymlink(dir) {
				t.Error("the symlink's target was created")
			}
		})
	}
}
