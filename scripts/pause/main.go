//go:build linux

// Command pause is the sandbox ("pause") process of the offline test image
// built by scripts/install-test-deps.sh (tag localhost/eni-cni/pause:test).
//
// It runs as PID 1 of a pod sandbox: it does nothing until SIGINT or SIGTERM,
// then exits 0, and it reaps every child that gets reparented to it. It uses
// the standard library only, so it builds offline and statically
// (CGO_ENABLED=0) and the image is one layer holding one file, /pause.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Println("eni-cni test pause")
		return
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: got %v, exiting\n", sig)
		os.Exit(0)
	}
}

// reap collects every exited child without blocking. Signals coalesce, so
// one SIGCHLD may stand for several children.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
