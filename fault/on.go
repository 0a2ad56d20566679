//go:build faultinject

package fault

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

var (
	mu     sync.Mutex
	parsed bool
	target string
	nth    = 1
	hits   int
	stop   bool
)

// Point kills the process with SIGKILL when it is the configured point,
// reached for the configured time. Nothing runs after it: no deferred
// function, no unlock, no cleanup, exactly as after a power loss. With
// ActionEnv "stop" it stops the process instead, which goes on when
// continued.
func Point(name string) {
	mu.Lock()
	defer mu.Unlock()
	if !parsed {
		parsed = true
		target = os.Getenv(Env)
		stop = os.Getenv(ActionEnv) == "stop"
		if name, n, ok := strings.Cut(target, "@"); ok {
			target = name
			if v, err := strconv.Atoi(n); err == nil && v > 0 {
				nth = v
			}
		}
	}
	if target == "" || name != target {
		return
	}
	hits++
	if hits != nth {
		return
	}
	if stop {
		// Resumed by SIGCONT, the process goes on from here.
		fmt.Fprintf(os.Stderr, "fault: stopped at %s\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		return
	}
	fmt.Fprintf(os.Stderr, "fault: killed at %s\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is delivered before this goroutine runs again
}
