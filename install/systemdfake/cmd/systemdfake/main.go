// Command systemdfake runs the fake systemd manager of package systemdfake
// for end-to-end scripts: it listens on ROOT/run/systemd/private (and makes
// ROOT/run/systemd/system, the mark of a booted systemd), appends one line
// per call it gets to --calls ("StartUnit(eni-cni-gc.timer, replace)"),
// and runs until SIGINT or SIGTERM.
//
//	systemdfake --root /tmp/host --calls /tmp/systemd-calls.log
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/eni-cni/eni-cni/install/systemdfake"
)

func main() {
	root := flag.String("root", "", "the root whose run/systemd/private to serve")
	calls := flag.String("calls", "", "file to append the calls to")
	flag.Parse()
	if *root == "" || *calls == "" {
		fmt.Fprintln(os.Stderr, "usage: systemdfake --root DIR --calls FILE")
		os.Exit(2)
	}
	if err := run(*root, *calls); err != nil {
		fmt.Fprintf(os.Stderr, "systemdfake: %v\n", err)
		os.Exit(1)
	}
}

func run(root, calls string) error {
	s, err := systemdfake.Start(root)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	written := 0
	flush := func() error {
		all := s.Calls()
		if written == len(all) {
			return nil
		}
		f, err := os.OpenFile(calls, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		for _, c := range all[written:] {
			fmt.Fprintln(f, c)
		}
		written = len(all)
		return f.Close()
	}
	fmt.Println(s.Path)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return flush()
		case <-tick.C:
			if err := flush(); err != nil {
				return err
			}
		}
	}
}
