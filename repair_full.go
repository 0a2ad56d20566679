//go:build !lean

package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/pool"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/gc/cri"
	"github.com/eni-cni/eni-cni/netsetup"
)

// cmdRepairCLI is `eni-cni repair` (repair.go). It needs the CRI client, so
// it lives in the full build.
func cmdRepairCLI(args []string, stdout, stderr io.Writer) error {
	f := newFlags("repair", stderr)
	endpoint := f.fs.String("cri-endpoint", "", "CRI socket (default: as for gc)")
	dryRun := f.fs.Bool("dry-run", false, "print what would be recorded and change nothing")
	force := f.fs.Bool("force", false, "rebuild even when the runtime's listing matches none of the node's veths, or the file is of a newer version")
	timeout := f.fs.Duration("timeout", cri.DefaultTimeout, "timeout of each CRI call")
	if err := f.parse(args); err != nil {
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout must be > 0", errUsage)
	}
	p, _, err := f.load()
	if err != nil {
		return err
	}
	store, ok := p.mgr.Store.(*alloc.DiskStore)
	if !ok {
		return fmt.Errorf("repair: the store is not a state directory")
	}
	if *dryRun {
		p.readOnly()
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
		return netsetup.InspectVeths(p.cfg.VethPrefix, netsetup.NetnsDirs)
	}
	o := repairOptions{DryRun: *dryRun, Force: *force, Inspect: inspect, Sandboxes: sbs, Discover: p.discoverPool}
	return p.repair(ctx, store, o, stdout)
}

func listSandboxes(ctx context.Context, endpoint string, timeout time.Duration) ([]gc.Sandbox, error) {
	ep, err := cri.ResolveEndpoint(endpoint, cri.Lookup{})
	if err != nil {
		return nil, err
	}
	client, err := cri.NewClient(ep, timeout)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	return client.ListSandboxes(ctx)
}

// discoverPool fills an ec2 pool lost with the state from IMDS (what is
// assigned to the node's ENIs), so repaired allocations know their ENI.
// Which addresses are eni-cni's to give back, and which ENIs it may use,
// the next warm pass learns from EC2 as for any new section.
func (p *plugin) discoverPool(ctx context.Context, st *alloc.State) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	inst, err := ec2.Discover(ctx, ec2.NewQuickMetadataClient(p.cfg.IMDSEndpoint))
	if err != nil {
		return "", err
	}
	// A fresh section: what IMDS lists now is this instance's (ENIs other
	// than the primary stay unverified until warm has read their tags).
	st.EC2 = &pool.EC2{}
	pool.Reconcile(st.EC2, inst, time.Now())
	n := len(st.EC2.Addrs)
	return fmt.Sprintf("read the ec2 pool from IMDS: %s (%s), %d ENIs, %d addresses", inst.ID, inst.Type, len(inst.ENIs), n), nil
}
