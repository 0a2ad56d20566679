package logfile

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// countLines returns the lines in path and its rotated files, and the
// largest file's size.
func countLines(t *testing.T, path string) (lines map[string]int, files int, largest int64) {
	t.Helper()
	lines = map[string]int{}
	matches, _ := filepath.Glob(path + "*")
	for _, m := range matches {
		if strings.HasSuffix(m, ".lock") {
			continue
		}
		files++
		fi, _ := os.Stat(m)
		largest = max(largest, fi.Size())
		f, err := os.Open(m)
		if err != nil {
			t.Fatal(err)
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			lines[s.Text()]++
		}
		f.Close()
	}
	return lines, files, largest
}

func line(w, i int) []byte {
	return []byte(fmt.Sprintf("writer %02d line %04d %s\n", w, i, strings.Repeat("x", 40)))
}

// Many writers with their own open files (as plugin processes have) write
// at once into a small cap: no line is lost or torn, no file grows much
// past the cap, and rotated files are numbered.
func TestConcurrentWritersRotate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eni-cni.log")
	const writers, perWriter, maxSize = 8, 300, 8 << 10
	lineLen := len(line(0, 0))
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				// A new Writer per line, as each plugin process opens it.
				lw, err := Open(path, maxSize, 1000)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := lw.Write(line(w, i)); err != nil {
					t.Error(err)
				}
				lw.Close()
			}
		}(w)
	}
	wg.Wait()
	lines, files, largest := countLines(t, path)
	if len(lines) != writers*perWriter {
		t.Errorf("%d distinct lines, want %d", len(lines), writers*perWriter)
	}
	for l, n := range lines {
		if n != 1 || len(l)+1 != lineLen {
			t.Fatalf("line %q seen %d times", l, n)
		}
	}
	// A writer that checked the size just before others appended may
	// overshoot by their lines; never by more.
	if largest > maxSize+writers*int64(lineLen) {
		t.Errorf("largest file %d bytes, cap %d", largest, maxSize)
	}
	if want := writers * perWriter * lineLen / maxSize; files < want {
		t.Errorf("%d files, want at least %d", files, want)
	}
	if _, err := os.Stat(path + ".1"); err != nil {
		t.Error(err)
	}
}

// Only keep rotated files stay; the newest is path.1.
func TestKeepsNewestFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.log")
	w, err := Open(path, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 0; i < 20; i++ {
		w.Write([]byte(fmt.Sprintf("%02d %s\n", i, strings.Repeat("y", 60))))
	}
	_, files, _ := countLines(t, path)
	if files != 3 {
		t.Errorf("%d files, want the log and 2 rotated", files)
	}
	cur, _ := os.ReadFile(path)
	one, _ := os.ReadFile(path + ".1")
	two, _ := os.ReadFile(path + ".2")
	if !strings.HasPrefix(string(cur), "19 ") || !strings.HasPrefix(string(one), "18 ") || !strings.HasPrefix(string(two), "17 ") {
		t.Errorf("order: %q %q %q", cur[:3], one[:3], two[:3])
	}
}

// A line larger than the cap is still written, to a file of its own.
func TestOversizedLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.log")
	w, _ := Open(path, 10, 3)
	w.Write([]byte("short\n"))
	w.Write([]byte(strings.Repeat("z", 50) + "\n"))
	w.Write([]byte("after\n"))
	w.Close()
	lines, _, _ := countLines(t, path)
	if len(lines) != 3 {
		t.Errorf("lines %v", lines)
	}
}

// No rotation with maxSize 0.
func TestNoCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.log")
	w, _ := Open(path, 0, 3)
	for i := 0; i < 100; i++ {
		w.Write(line(0, i))
	}
	w.Close()
	if _, files, _ := countLines(t, path); files != 1 {
		t.Errorf("%d files", files)
	}
}

// Separate processes, as the plugin runs: this test binary re-executed.
func TestConcurrentProcesses(t *testing.T) {
	if os.Getenv("LOGFILE_HELPER") != "" {
		w, _ := strconv.Atoi(os.Getenv("LOGFILE_WRITER"))
		for i := 0; i < 200; i++ {
			lw, err := Open(os.Getenv("LOGFILE_HELPER"), 4<<10, 1000)
			if err != nil {
				os.Exit(2)
			}
			lw.Write(line(w, i))
			lw.Close()
		}
		return
	}
	path := filepath.Join(t.TempDir(), "p.log")
	var cmds []*exec.Cmd
	for w := 0; w < 4; w++ {
		c := exec.Command(os.Args[0], "-test.run=^TestConcurrentProcesses$")
		c.Env = append(os.Environ(), "LOGFILE_HELPER="+path, "LOGFILE_WRITER="+strconv.Itoa(w))
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	lines, files, _ := countLines(t, path)
	if len(lines) != 800 || files < 2 {
		t.Errorf("%d lines in %d files, want 800 in several", len(lines), files)
	}
	for l, n := range lines {
		if n != 1 {
			t.Fatalf("line %q seen %d times", l, n)
		}
	}
}

// TestRotationLockNoFollow: a symlink planted at the rotation lock is not
// followed (its target is not created); the record is written all the same
// and rotation waits until the lock is sane.
func TestRotationLockNoFollow(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "eni-cni.log")
	victim := filepath.Join(elsewhere, "victim")
	if err := os.Symlink(victim, path+".lock"); err != nil {
		t.Fatal(err)
	}
	w, err := Open(path, 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for range 3 {
		if _, err := w.Write([]byte("a line of the log\n")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Lstat(victim); err == nil {
		t.Errorf("the symlink's target %s was created", victim)
	}
	if _, err := os.Lstat(path + ".1"); err == nil {
		t.Error("rotated under a symlinked lock")
	}
}
