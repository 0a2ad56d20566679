//go:build !lean && !ec2build

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/eni-cni/eni-cni/cmdline"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/gc/cri"
	"github.com/eni-cni/eni-cni/metrics"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/plugin"
)

func cmdGC(args []string, stdout, stderr io.Writer) error {
	f := newFlags("gc", stderr)
	endpoint := f.FS.String("cri-endpoint", "", "CRI socket (default: $CONTAINER_RUNTIME_ENDPOINT, /etc/crictl.yaml, then containerd's and CRI-O's)")
	grace := f.FS.Duration("grace", 0, "keep allocations younger than this, at least 60s (default: gcGraceSeconds of the config, 600s)")
	dryRun := f.FS.Bool("dry-run", false, "print what would be freed and change nothing")
	force := f.FS.Bool("force", false, "free old allocations even when the runtime lists no sandbox at all")
	timeout := f.FS.Duration("timeout", cri.DefaultTimeout, "timeout of each CRI call")
	asJSON := f.FS.Bool("json", false, "print the outcome as JSON")
	if err := f.Parse(args); err != nil {
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout must be > 0", errUsage)
	}
	graceSet := false
	f.FS.Visit(func(fl *flag.Flag) { graceSet = graceSet || fl.Name == "grace" })
	// The flag may lengthen the config's grace, never shorten it below the
	// minimum gcGraceSeconds has (netconf: ADD runs before the runtime
	// lists the sandbox). Tests age the store instead of lowering it.
	if graceSet && *grace < netconf.MinGCGrace {
		return fmt.Errorf("%w: --grace %s is below the minimum of %s (ADD runs before the runtime lists the sandbox, so a shorter grace could free a pod being created)",
			errUsage, *grace, netconf.MinGCGrace)
	}
	p, _, err := f.load()
	if err != nil {
		return err
	}
	if *dryRun {
		p.ReadOnly()
	}
	opts := gc.Options{Grace: p.Cfg.GCGrace, Force: *force, RefuseEmpty: true}
	if graceSet {
		opts.Grace = *grace
	}
	start := time.Now()
	c, err := p.RunGC(context.Background(), runtimeLister(*endpoint, *timeout), opts, *dryRun)
	if !*dryRun {
		u := metrics.RunUpdate{Job: "gc", Start: start, Duration: time.Since(start), Err: err}
		if c != nil {
			u.Freed, u.Leftovers = len(c.Freed), c.Leftovers.Len()
		}
		p.RecordJob(u, stderr)
	}
	if *asJSON {
		if jerr := cmdline.PrintJSON(stdout, plugin.GCReportOf(c, err, *dryRun)); jerr != nil {
			return jerr
		}
		if err != nil {
			return errReported{err}
		}
		return nil
	}
	if c == nil {
		return err
	}
	return c.ReportErr(stdout, *dryRun, err)
}

// runtimeLister asks the CRI runtime which sandboxes exist.
func runtimeLister(endpoint string, timeout time.Duration) func(ctx context.Context) (gc.Liveness, error) {
	return func(ctx context.Context) (gc.Liveness, error) {
		client, _, err := cri.Dial(endpoint, timeout)
		if err != nil {
			return nil, err
		}
		defer client.Close()
		return gc.QueryRuntime(ctx, client)
	}
}
