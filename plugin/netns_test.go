package plugin

import (
	"errors"
	"os"
	"testing"

	"github.com/containernetworking/plugins/pkg/testutils"
)

// TestValidateNetnsAsksTheKernel: only a network namespace passes, on
// nsfs or procfs; other procfs files and other namespaces' links used to
// pass the file system check and took an address before failing (999).
func TestValidateNetnsAsksTheKernel(t *testing.T) {
	for _, path := range []string{"/proc/1/status", "/proc/self/ns/mnt", "/proc/1/ns/mnt", "/etc/hostname", "/proc", "/dev/null"} {
		if _, err := os.Stat(path); err != nil {
			t.Logf("%s: %v", path, err)
			continue
		}
		if err := validateNetns(path); !errors.Is(err, errInvalidNetns) {
			t.Errorf("validateNetns(%s) = %v, want errInvalidNetns", path, err)
		}
	}
	if err := validateNetns("/proc/self/ns/net"); !errors.Is(err, errInvalidNetns) {
		t.Errorf("the plugin's own netns: %v, want errInvalidNetns", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("creating a network namespace needs root")
	}
	pod, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pod.Close(); testutils.UnmountNS(pod) })
	if err := validateNetns(pod.Path()); err != nil {
		t.Errorf("a network namespace (%s): %v", pod.Path(), err)
	}
}
