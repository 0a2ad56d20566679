package provider

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/netconf"
)

// TestWarmLogNoFollow: the log a spawned warm pass writes to (warm.log in
// the state directory, or the plugin's logFile) is opened as the plugin's
// own log is (logfile): never through a symlink, which would append root's
// output to wherever it points, never blocking on a FIFO, which would hang
// the ADD that starts the pass, and only a regular file.
func TestWarmLogNoFollow(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &netconf.Config{StateDir: dir}
	if err := os.Symlink(target, filepath.Join(dir, warmLogName)); err != nil {
		t.Fatal(err)
	}
	if f, err := openWarmLog(cfg); err == nil {
		f.Close()
		t.Error("warm.log opened through a symlink")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Errorf("the symlink's target changed: %q", b)
	}

	fifo := filepath.Join(dir, "fifo.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := openWarmLog(&netconf.Config{StateDir: dir, LogFile: fifo})
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO opened as warm's log")
		}
	case <-time.After(2 * time.Second):
		t.Error("opening a FIFO as warm's log blocks (the ADD that starts the pass hangs)")
		// Release the blocked open: a reader arrives.
		if r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			<-done
			r.Close()
		}
	}

	// With a reader on the FIFO the open succeeds: only the file type
	// check keeps the pass's output out of it.
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if f, err := openWarmLog(&netconf.Config{StateDir: dir, LogFile: fifo}); err == nil {
		f.Close()
		t.Error("a FIFO with a reader opened as warm's log")
	}

	cfg.LogFile = filepath.Join(dir, "plugin.log")
	f, err := openWarmLog(cfg)
	if err != nil {
		t.Fatalf("a regular log file: %v", err)
	}
	f.Close()
}

// TestWarmLogFallsBack: a logFile the plugin cannot log to (/dev/null, a
// FIFO) sends the plugin's own log to stderr; the pass an ADD starts must
// still start, with its output in warm.log in the state directory. A dry
// pool whose pass cannot start fails every ADD waiting on it.
func TestWarmLogFallsBack(t *testing.T) {
	dir := t.TempDir()
	f, err := warmLog(&netconf.Config{StateDir: dir, LogFile: os.DevNull})
	if err != nil {
		t.Fatalf("warm's log with logFile %s: %v", os.DevNull, err)
	}
	defer f.Close()
	if f.Name() != filepath.Join(dir, warmLogName) {
		t.Errorf("warm's log with logFile %s is %s; want %s", os.DevNull, f.Name(), filepath.Join(dir, warmLogName))
	}
}

// TestSpawnedPassKeepsTheBuildsEnvironment: a pass an ADD starts loses the
// runtime's CNI_ variables (it is not a CNI call) but keeps what the build
// set for itself (one P), or inherits the ADD's environment when the build
// set nothing.
func TestSpawnedPassKeepsTheBuildsEnvironment(t *testing.T) {
	t.Setenv("CNI_COMMAND", "ADD")
	t.Setenv("ENI_CNI_TEST_INHERITED", "yes")
	for _, c := range []struct {
		name string
		env  []string
		want []string
	}{
		{"build's own", []string{"GOMAXPROCS=1", "CNI_COMMAND=ADD", "PATH=/bin"}, []string{"GOMAXPROCS=1", "PATH=/bin"}},
		{"inherited", nil, []string{"ENI_CNI_TEST_INHERITED=yes"}},
	} {
		dir := t.TempDir()
		envFile := filepath.Join(dir, "env")
		n := NodeWarm{command: func(*netconf.Config, string) (*exec.Cmd, func(), error) {
			cmd := exec.Command("/bin/sh", "-c", "env >"+envFile+".tmp && mv "+envFile+".tmp "+envFile)
			cmd.Env = c.env
			return cmd, func() {}, nil
		}}
		if _, err := n.spawnWarm(&netconf.Config{StateDir: dir, Raw: []byte(`{}`)}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []byte
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if b, err := os.ReadFile(envFile); err == nil {
				got = b
				break
			}
		}
		lines := strings.Split(string(got), "\n")
		for _, w := range c.want {
			if !slices.Contains(lines, w) {
				t.Errorf("%s: %q missing from the pass's environment %q", c.name, w, lines)
			}
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "CNI_") {
				t.Errorf("%s: the pass inherited %q", c.name, l)
			}
		}
	}
}
