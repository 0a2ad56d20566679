package ec2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/lockfile"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup/snat"
)

// WarmTimeout bounds one warm pass, EC2 retries included: the timer starts
// the next one anyway.
const WarmTimeout = 5 * time.Minute

// WarmLockName is held by the one warm pass running on a node.
const WarmLockName = "warm.lock"

// MarkSeenName remembers what the NodePort marking's last intact look saw
// (NodeHost.MarkSeen).
const MarkSeenName = "nodeport.seen"

// WarmPass runs one pass of `eni-cni warm` for the network of cfg: one at a
// time per node (warm.lock), IMDS first, then the Warmer against EC2, then
// the SNAT chain. ran is false when there was nothing to run (a static
// pool, another pass running).
func WarmPass(cfg *netconf.Config, mgr *alloc.Manager, out io.Writer, calls *CallCounter) (ran bool, err error) {
	if cfg.Provider != netconf.EC2 {
		fmt.Fprintf(out, "warm: network %q uses a %s pool; nothing to do\n", cfg.Network, cfg.Provider)
		return false, nil
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return false, fmt.Errorf("warm: create state directory: %w", err)
	}
	// One pass at a time per node: cron may start a pass while a slow one
	// still runs, and two passes would both fill the same shortfall.
	// lockfile: never through a symlink, never a FIFO, root's file only.
	path := filepath.Join(cfg.StateDir, WarmLockName)
	busy, err := lockfile.Open(path, os.O_CREATE|os.O_RDONLY)
	if err != nil {
		return false, fmt.Errorf("warm: lock %s: %w", path, err)
	}
	defer busy.Close()
	if ok, err := busy.TryLock(); err != nil {
		return false, fmt.Errorf("warm: lock %s: %w", path, err)
	} else if !ok {
		fmt.Fprintf(out, "warm: another pass is running (%s); skipped\n", path)
		return false, nil
	}
	// A settled pass looks at the store about ten times: one decode
	// serves them while the file holds the same bytes.
	if r, ok := mgr.Store.(decodeReuser); ok {
		r.ReuseDecoded()
	}
	ctx, cancel := context.WithTimeout(context.Background(), WarmTimeout)
	defer cancel()
	md := NewMetadataClient(cfg.IMDSEndpoint, MetadataOptions(cfg)...)
	// IMDS first, every pass: the region for the EC2 client comes from the
	// instance itself, or from a store IMDS has shown to be this
	// instance's in this boot, never from one that may be another's.
	inst, err := discoverFor(ctx, md, mgr)
	if err != nil {
		// ADDs waiting on a dry pool learn why no pass ran.
		err = ExplainIMDSOf(err, cfg)
		return true, fmt.Errorf("warm: %w", errors.Join(err, (&Warmer{Mgr: mgr, Out: out, Cfg: cfg.Warm}).Failed(ctx, err)))
	}
	w := &Warmer{
		Mgr: mgr, MD: md, API: NewAPI(cfg.EC2Endpoint, inst.Region(), md, calls.Option()),
		Host: NodeHost{MTU: cfg.MTU, SNAT: cfg.SNAT, VethPrefix: cfg.VethPrefix, MarkSeen: filepath.Join(cfg.StateDir, MarkSeenName), StateDir: cfg.StateDir},
		Cfg:  cfg.Warm, Out: out, Spread: true, Throttles: ThrottleFile(filepath.Join(cfg.StateDir, ThrottledName)),
		LimitsFile: filepath.Join(cfg.StateDir, LimitsCacheName),
	}
	err = w.RunWith(ctx, inst)
	if serr := syncSNAT(ctx, cfg, mgr, out); serr != nil {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return true, fmt.Errorf("warm: %w", ExplainIMDSOf(err, cfg))
	}
	return true, nil
}

// decodeReuser is a store that can skip decoding an unchanged file
// (alloc.DiskStore).
type decodeReuser interface{ ReuseDecoded() }

// discoverFor is Discover for a warm pass: what the store says of the
// instance spares the reads of what cannot have changed (DiscoverKnowing).
// The store is read without its lock, as Peek does (a save replaces the
// file whole); one that cannot be read spares nothing.
func discoverFor(ctx context.Context, md Metadata, mgr *alloc.Manager) (*section.Instance, error) {
	var known *section.EC2
	if st, err := mgr.Store.Load(); err == nil {
		known = st.EC2
	}
	return DiscoverKnowing(ctx, md, known, mgr.BootID)
}

// syncSNAT keeps the node's SNAT chain as the config says, every pass:
// with snat on it is made to match the pool (a flushed nat table heals
// itself); with snat off a chain left from before is removed.
func syncSNAT(ctx context.Context, cfg *netconf.Config, mgr *alloc.Manager, out io.Writer) error {
	if !cfg.SNAT {
		// Only a chain this boot installed can exist (the nat table does
		// not survive a reboot): nodes without snat need no iptables.
		st, _, err := mgr.Snapshot(ctx)
		if err != nil || st.EC2 == nil || st.EC2.SNATBoot != mgr.BootID {
			return err
		}
		changed, err := snat.Remove()
		if err != nil {
			return fmt.Errorf("snat off: %w", err)
		}
		if changed {
			fmt.Fprintf(out, "warm: snat is off: chain %s and its jump removed\n", snat.Chain)
		}
		return provider.MarkSNAT(ctx, mgr, false)
	}
	st, _, err := mgr.Snapshot(ctx)
	if err != nil {
		return err
	}
	spec, err := provider.SNATSpec(st.EC2, cfg.Warm.ExcludeIPs)
	if err != nil {
		return err
	}
	changed, err := snat.Ensure(cfg.StateDir, spec)
	if err != nil {
		return fmt.Errorf("snat: %w", err)
	}
	if changed {
		fmt.Fprintf(out, "warm: snat: traffic of pods in %v leaving %v now leaves as %s (chain %s)\n", spec.PodNets, spec.VPCCIDRs, spec.PrimaryIP, snat.Chain)
	}
	return provider.MarkSNAT(ctx, mgr, true)
}
