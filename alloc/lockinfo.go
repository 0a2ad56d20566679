package alloc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// describeHolders names the processes that hold a lock on the file at path,
// as "; held by pid 1234 (eni-cni gc --config ...)", from /proc/locks. It
// returns "" when it cannot tell (no /proc, a lock gone meanwhile): the
// message is for a person, it must never make the error itself fail.
func describeHolders(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return ""
	}
	pids := lockHolders(data, unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
	if len(pids) == 0 {
		return "; holder not found in /proc/locks"
	}
	parts := make([]string, len(pids))
	for i, pid := range pids {
		parts[i] = fmt.Sprintf("pid %d (%s)", pid, processName(pid))
	}
	return "; held by " + strings.Join(parts, ", ")
}

// lockHolders parses /proc/locks for the granted locks on the file with the
// given device and inode. Lines look like
//
//	3: FLOCK  ADVISORY  WRITE 1234 00:2f:5678 0 EOF
//	3: -> FLOCK  ADVISORY  WRITE 1240 00:2f:5678 0 EOF   (a waiter)
//
// with the device as hexadecimal major:minor and the inode in decimal.
func lockHolders(procLocks []byte, major, minor uint32, ino uint64) []int {
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, ino)
	var pids []int
	sc := bufio.NewScanner(bytes.NewReader(procLocks))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[1] == "->" {
			continue
		}
		if f[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processName is the command line of pid, shortened, or "?" .
func processName(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return "?"
	}
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
