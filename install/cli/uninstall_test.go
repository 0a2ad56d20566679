package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/lockfile"
	"github.com/eni-cni/eni-cni/lockfile/lockfiletest"
)

// TestWaitWarmRefusesUnsafeLock: uninstall opens warm.lock as warm does
// (lockfile): a symlink in its place is not followed (and its target not
// created), a FIFO does not hang it, a lock file others may write is not
// trusted. A sound one is taken and kept.
func TestWaitWarmRefusesUnsafeLock(t *testing.T) {
	plants := lockfiletest.Unsafe()
	plants["sound"] = func(t testing.TB, p string) {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, plant := range plants {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			plant(t, filepath.Join(dir, ec2.WarmLockName))
			c := &uninstallCmd{}
			step := c.waitWarmStep(dir)
			if step.Do == nil {
				t.Fatalf("no step for a %s warm.lock: %q", name, step.Desc)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- step.Do(ctx) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("waiting on a %s warm.lock hangs", name)
			}
			if name == "sound" {
				if err != nil || c.warmLock == nil {
					t.Errorf("a sound warm.lock: %v, held %v", err, c.warmLock != nil)
				} else {
					c.warmLock.Close()
				}
				return
			}
			if !errors.Is(err, lockfile.ErrUnsafe) {
				t.Errorf("a %s warm.lock: %v; want it refused as unsafe", name, err)
			}
			if lockfiletest.FollowedSymlink(dir) {
				t.Error("the symlink's target was created")
			}
		})
	}
}
