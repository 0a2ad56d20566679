//go:build !lean && !ec2build

package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/gc/cri"
	"github.com/eni-cni/eni-cni/netsetup"
	"github.com/eni-cni/eni-cni/plugin"
)

// cmdRepair is `eni-cni repair` (plugin/repair.go). It needs the CRI client, so
// it lives in the full build.
func cmdRepair(args []string, stdout, stderr io.Writer) error {
	f := newFlags("repair", stderr)
	endpoint := f.FS.String("cri-endpoint", "", "CRI socket (default: as for gc)")
	dryRun := f.FS.Bool("dry-run", false, "print what would be recorded and change nothing")
	force := f.FS.Bool("force", false, "rebuild even when the runtime's listing matches none of the node's veths, or the file is of a newer version")
	timeout := f.FS.Duration("timeout", cri.DefaultTimeout, "timeout of each CRI call")
	if err := f.Parse(args); err != nil {
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout must be > 0", errUsage)
	}
	p, _, err := f.load()
	if err != nil {
		return err
	}
	store, ok := p.Mgr.Store.(*alloc.DiskStore)
	if !ok {
		return fmt.Errorf("repair: the store is not a state directory")
	}
	if *dryRun {
		p.ReadOnly()
	}
	ctx := context.Background()
	// The runtime is read before the lock, as gc does: a slow runtime
	// must not stall ADDs of a readable store. The node is read under it
	// (repair.go).
	sbs, err := listSandboxes(ctx, *endpoint, *timeout)
	if err != nil {
		return fmt.Errorf("repair: %w (nothing changed)", err)
	}
	inspect := func() ([]netsetup.VethView, error) {
		return netsetup.InspectVeths(p.Cfg.VethPrefix, netsetup.NetnsDirs)
	}
	o := plugin.RepairOptions{DryRun: *dryRun, Force: *force, Inspect: inspect, Sandboxes: sbs, Discover: ec2.DiscoverPool(p.Cfg)}
	return p.Repair(ctx, store, o, stdout)
}

func listSandboxes(ctx context.Context, endpoint string, timeout time.Duration) ([]gc.Sandbox, error) {
	client, _, err := cri.Dial(endpoint, timeout)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	return client.ListSandboxes(ctx)
}
