package cri

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// With CRI_PEER_LISTEN set the test binary is the impostor of
// TestSocketNotServedByRoot: it listens on that socket until killed.
func TestMain(m *testing.M) {
	if path := os.Getenv("CRI_PEER_LISTEN"); path != "" {
		l, err := net.Listen("unix", path)
		if err != nil {
			fmt.Println("listen:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(0)
			}
			c.Close()
		}
	}
	os.Exit(m.Run())
}

// A socket served by a process that is not root's (a user who got a path
// into CONTAINER_RUNTIME_ENDPOINT or crictl.yaml, or a socket left in a
// world-writable directory) is refused before a byte is exchanged.
func TestSocketNotServedByRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the impostor as nobody")
	}
	// Not t.TempDir(): its parent is 0700, and nobody must reach the binary.
	dir, err := os.MkdirTemp("", "cri-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "impostor")
	data, err := os.ReadFile(self)
	if err == nil {
		err = os.WriteFile(bin, data, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	sockDir := filepath.Join(dir, "run")
	if err := os.Mkdir(sockDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sockDir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "cri.sock")
	cmd := exec.Command(bin)
	cmd.Env = []string{"CRI_PEER_LISTEN=" + sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("impostor: %q", line)
	}
	go io.Copy(io.Discard, out)
	c := client(t, "unix://"+sock, 2*time.Second)
	start := time.Now()
	_, err = c.ListSandboxes(t.Context())
	if !errors.Is(err, ErrUntrustedPeer) || !strings.Contains(err.Error(), "uid 65534") {
		t.Fatalf("listing from a socket served by nobody: %v; want %v naming uid 65534", err, ErrUntrustedPeer)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
}
