package main

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
)

// cmdIdle waits for SIGTERM or SIGINT and exits 0: the main container of
// the DaemonSet's pod, once its init container has installed eni-cni on the
// node. It runs in the lean build (a few MB of memory, nothing to do) and
// handles the signals itself because, as a container's PID 1, the kernel
// would ignore a SIGTERM it has no handler for and the pod would wait out
// its whole termination grace period.
func cmdIdle(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: idle takes no arguments", errUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	return nil
}
