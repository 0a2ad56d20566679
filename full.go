//go:build !lean

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gofrs/flock"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/pool"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/gc/cri"
	"github.com/eni-cni/eni-cni/metrics"
	"github.com/eni-cni/eni-cni/netsetup"
	"github.com/eni-cni/eni-cni/netsetup/snat"
)

// This file is the part of eni-cni that links the CRI client (grpc) and the
// AWS SDK: the gc and warm subcommands and IMDS reads. The default build
// includes it. The shipped binary is built with -tags lean and runs these
// through an embedded copy of the default build (lean.go), so that CNI
// verbs, which run once per pod, do not pay for initialising those
// libraries on every exec.

// runFull runs the subcommands that need the CRI client or the AWS SDK.
func runFull(cmd string, args []string, stdout, stderr io.Writer) error {
	switch cmd {
	case "gc":
		return cmdGCCLI(args, stdout, stderr)
	case "warm":
		return cmdWarmCLI(args, stdout, stderr)
	case "repair":
		return cmdRepairCLI(args, stdout, stderr)
	case "internal":
		return cmdInternal(args, os.Stdin, stdout)
	case "max-pods":
		return cmdMaxPodsCLI(args, stdout, stderr)
	case "doctor":
		return cmdDoctorCLI(args, stdout, stderr)
	case "install":
		return cmdInstall(args, stdout, stderr)
	case "uninstall":
		return cmdUninstall(args, stdout, stderr)
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
}

// warmCommand is the command a dry-pool ADD starts as `eni-cni warm`:
// this build.
func warmCommand(_ *config, confPath string) (cmd *exec.Cmd, done func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	return exec.Command(exe, "warm", "--config", confPath), func() {}, nil
}

// imdsRefresh checks the instance's identity and merges what IMDS lists
// into the store; ADD calls it on the first allocation of a boot and when
// the pool is empty.
func imdsRefresh(ctx context.Context, cfg *config, mgr *alloc.Manager) (internalResult, error) {
	r, err := ec2.Refresh(ctx, mgr, ec2.NewQuickMetadataClient(cfg.IMDSEndpoint, imdsOptions(cfg)...), time.Now())
	if err != nil {
		return internalResult{}, ec2.ExplainIMDS(err, cfg.IMDSEndpoint)
	}
	return internalResult{Added: r.Added, Dropped: r.Dropped, InstanceID: r.Instance.ID}, nil
}

// imdsCheck reports whether IMDS can be read (STATUS on an empty pool).
func imdsCheck(ctx context.Context, cfg *config) error {
	_, err := ec2.Discover(ctx, ec2.NewQuickMetadataClient(cfg.IMDSEndpoint, imdsOptions(cfg)...))
	return ec2.ExplainIMDS(err, cfg.IMDSEndpoint)
}

// explainIMDS adds the likely causes to an error from reading IMDS, and
// leaves other errors (EC2, the store) as they are.
func explainIMDS(err error, cfg *config) error {
	if errors.Is(err, ec2.ErrIMDS) {
		return ec2.ExplainIMDS(err, cfg.IMDSEndpoint)
	}
	return err
}

// imdsOptions: IMDSv2 only, unless the configuration allows IMDSv1.
func imdsOptions(cfg *config) []ec2.MetadataOption {
	if cfg.IMDSv1Fallback {
		return []ec2.MetadataOption{ec2.AllowIMDSv1()}
	}
	return nil
}

// cmdInternal serves the lean binary's delegations: the plugin config on
// stdin, one JSON line of result on stdout.
func cmdInternal(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: internal needs one of imds-refresh, imds-check", errUsage)
	}
	data, err := io.ReadAll(io.LimitReader(stdin, 1<<20))
	if err != nil {
		return err
	}
	cfg, err := parseConfig(data)
	if err != nil {
		return err
	}
	p, err := newPlugin(cfg)
	if err != nil {
		return err
	}
	// Shorter than the lean parent's deadline, so the parent gets our
	// message rather than a killed child.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	switch args[0] {
	case "imds-refresh":
		r, err := imdsRefresh(ctx, cfg, p.mgr)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(r)
	case "imds-check":
		return imdsCheck(ctx, cfg)
	}
	return fmt.Errorf("%w: unknown internal command %q", errUsage, args[0])
}

// eniHost is the node side of warm: it sets up the ENIs warm attaches and
// re-asserts, every pass, each ENI's link and table and each pod's rules.
type eniHost struct {
	mtu  int
	snat bool
}

func (h eniHost) link(e pool.ENI) netsetup.ENILink {
	return netsetup.ENILink{MAC: e.MAC, MTU: h.mtu, Table: e.Table(), SubnetCIDR: e.SubnetCIDR, Gateway: e.Gateway()}
}

func (h eniHost) SetupENI(ctx context.Context, e pool.ENI) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return netsetup.WaitENI(ctx, h.link(e))
}

// Reassert puts back what the node lost. An ENI whose link is missing (not
// yet appeared, or detached) is reported, and the rest still done.
func (h eniHost) Reassert(_ context.Context, enis []pool.ENI, pods []alloc.Allocation) (ec2.HostReport, error) {
	var rep ec2.HostReport
	var errs []error
	byID := map[string]pool.ENI{}
	for _, e := range enis {
		byID[e.ID] = e
		if e.Table() == 0 {
			continue // the primary ENI is the node's own: its owner sets it up
		}
		r, err := netsetup.ReassertENI(h.link(e))
		switch {
		case errors.Is(err, netsetup.ErrNoLink):
			rep.Missing = append(rep.Missing, fmt.Sprintf("%s (%s)", e.ID, e.MAC))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s (%s): %w", e.ID, e.MAC, err))
		case r != "":
			rep.Repaired = append(rep.Repaired, r)
		}
	}
	rules := make([]netsetup.PodRules, 0, len(pods))
	for _, a := range pods {
		pr := netsetup.PodRules{IP: a.IP}
		if e, ok := byID[a.ENI]; ok && e.Table() != 0 {
			pr.Table = e.Table()
			if h.snat {
				pr.FromDsts = e.VPCCIDRs
			}
		}
		rules = append(rules, pr)
	}
	r, err := netsetup.ReassertPodRules(rules)
	rep.Repaired = append(rep.Repaired, r...)
	return rep, errors.Join(append(errs, err)...)
}

func cmdGCCLI(args []string, stdout, stderr io.Writer) error {
	f := newFlags("gc", stderr)
	endpoint := f.fs.String("cri-endpoint", "", "CRI socket (default: $CONTAINER_RUNTIME_ENDPOINT, /etc/crictl.yaml, then containerd's and CRI-O's)")
	grace := f.fs.Duration("grace", 0, "keep allocations younger than this, at least 60s (default: gcGraceSeconds of the config, 600s)")
	dryRun := f.fs.Bool("dry-run", false, "print what would be freed and change nothing")
	force := f.fs.Bool("force", false, "free old allocations even when the runtime lists no sandbox at all")
	timeout := f.fs.Duration("timeout", cri.DefaultTimeout, "timeout of each CRI call")
	asJSON := f.fs.Bool("json", false, "print the outcome as JSON")
	if err := f.parse(args); err != nil {
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout must be > 0", errUsage)
	}
	graceSet := false
	f.fs.Visit(func(fl *flag.Flag) { graceSet = graceSet || fl.Name == "grace" })
	// The flag may lengthen the config's grace, never shorten it below the
	// minimum gcGraceSeconds has (config.go: ADD runs before the runtime
	// lists the sandbox). Tests age the store instead of lowering it.
	if graceSet && *grace < minGCGrace {
		return fmt.Errorf("%w: --grace %s is below the minimum of %s (ADD runs before the runtime lists the sandbox, so a shorter grace could free a pod being created)",
			errUsage, *grace, minGCGrace)
	}
	p, _, err := f.load()
	if err != nil {
		return err
	}
	if *dryRun {
		p.readOnly()
	}
	opts := gc.Options{Grace: p.cfg.GCGrace, Force: *force, RefuseEmpty: true}
	if graceSet {
		opts.Grace = *grace
	}
	start := time.Now()
	c, err := runGC(context.Background(), p, *endpoint, *timeout, opts, *dryRun)
	if !*dryRun {
		u := metrics.RunUpdate{Job: "gc", Start: start, Duration: time.Since(start), Err: err}
		if c != nil {
			u.Freed, u.Leftovers = len(c.Freed), c.Leftovers.Len()
		}
		p.recordJob(u, stderr)
	}
	if *asJSON {
		if jerr := printJSON(stdout, gcReportOf(c, err, *dryRun)); jerr != nil {
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
	return c.reportErr(stdout, *dryRun, err)
}

// runGC lists the runtime's sandboxes and collects. c is nil when nothing
// was planned; err includes the per-item errors.
func runGC(ctx context.Context, p *plugin, endpoint string, timeout time.Duration, opts gc.Options, dryRun bool) (*collection, error) {
	live, err := listRuntime(ctx, endpoint, timeout)
	if err != nil {
		return nil, err
	}
	c, err := p.collect(ctx, live, opts, dryRun, hostNetwork{p.cfg.VethPrefix})
	if c == nil || err != nil {
		return c, err
	}
	if len(c.Errors) > 0 {
		return c, fmt.Errorf("gc: %d errors: %w", len(c.Errors), errors.Join(c.Errors...))
	}
	return c, nil
}

// listRuntime asks the CRI runtime which sandboxes exist. It runs before
// the store is locked: a slow runtime must not stall ADDs.
func listRuntime(ctx context.Context, endpoint string, timeout time.Duration) (gc.Liveness, error) {
	ep, err := cri.ResolveEndpoint(endpoint, cri.Lookup{})
	if err != nil {
		return nil, err
	}
	client, err := cri.NewClient(ep, timeout)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	return gc.QueryRuntime(ctx, client)
}

// warmTimeout bounds one warm pass, EC2 retries included: the timer starts
// the next one anyway.
const warmTimeout = 5 * time.Minute

func cmdWarmCLI(args []string, stdout, stderr io.Writer) error {
	f := newFlags("warm", stderr)
	asJSON := f.fs.Bool("json", false, "print the outcome as JSON (the actions, the pool, the error)")
	if err := f.parse(args); err != nil {
		return err
	}
	p, _, err := f.load()
	if err != nil {
		return err
	}
	out := stdout
	var lines bytes.Buffer
	if *asJSON {
		out = &lines
	}
	start := time.Now()
	calls := ec2.NewCallCounter()
	ran, err := warmPass(p, out, calls)
	if ran {
		u := metrics.RunUpdate{Job: "warm", Start: start, Duration: time.Since(start), Err: err, EC2: map[string]metrics.APICalls{}}
		n, e := calls.Counts()
		for api, c := range n {
			u.EC2[api] = metrics.APICalls{Calls: c, Errors: e[api]}
		}
		p.recordJob(u, stderr)
	}
	if !*asJSON {
		return err
	}
	r := warmReport{OK: err == nil, Actions: nonEmptyLines(lines.String())}
	if err != nil {
		r.Error = err.Error()
	}
	if _, c, perr := p.mgr.Peek(); perr == nil {
		r.Pool = &c
	}
	if jerr := printJSON(stdout, r); jerr != nil {
		return jerr
	}
	if err != nil {
		return errReported{err}
	}
	return nil
}

// warmReport is what `eni-cni warm --json` prints.
type warmReport struct {
	OK      bool          `json:"ok"`
	Actions []string      `json:"actions"`
	Pool    *alloc.Counts `json:"pool,omitempty"`
	Error   string        `json:"error,omitempty"`
}

func nonEmptyLines(s string) []string {
	out := []string{}
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// warmPass runs one warm pass; ran is false when there was nothing to run
// (a static pool, another pass running).
func warmPass(p *plugin, stdout io.Writer, calls *ec2.CallCounter) (ran bool, err error) {
	if p.cfg.Source != sourceEC2 {
		fmt.Fprintf(stdout, "warm: network %q uses a %s pool; nothing to do\n", p.cfg.Network, p.cfg.Source)
		return false, nil
	}
	if err := os.MkdirAll(p.cfg.StateDir, 0o700); err != nil {
		return false, fmt.Errorf("warm: create state directory: %w", err)
	}
	// One pass at a time per node: cron may start a pass while a slow one
	// still runs, and two passes would both fill the same shortfall.
	busy := flock.New(filepath.Join(p.cfg.StateDir, "warm.lock"), flock.SetPermissions(0o600), flock.SetFlag(alloc.LockOpenFlags))
	if ok, err := busy.TryLock(); err != nil {
		return false, fmt.Errorf("warm: lock %s: %w", busy.Path(), err)
	} else if !ok {
		fmt.Fprintf(stdout, "warm: another pass is running (%s); skipped\n", busy.Path())
		return false, nil
	}
	defer busy.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
	defer cancel()
	md := ec2.NewMetadataClient(p.cfg.IMDSEndpoint, imdsOptions(p.cfg)...)
	// IMDS first, every pass: the region for the EC2 client comes from the
	// instance itself, never from a store that may be another instance's.
	inst, err := ec2.Discover(ctx, md)
	if err != nil {
		// ADDs waiting on a dry pool learn why no pass ran.
		err = explainIMDS(err, p.cfg)
		return true, fmt.Errorf("warm: %w", errors.Join(err, (&ec2.Warmer{Mgr: p.mgr, Out: stdout}).Failed(ctx, err)))
	}
	w := &ec2.Warmer{
		Mgr: p.mgr, MD: md, API: ec2.NewAPI(p.cfg.EC2Endpoint, inst.Region(), md, calls.Option()),
		Host: eniHost{mtu: p.cfg.MTU, snat: p.cfg.SNAT}, Cfg: p.cfg.Warm, Out: stdout,
	}
	err = w.RunWith(ctx, inst)
	if serr := syncSNAT(ctx, p, stdout); serr != nil {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return true, fmt.Errorf("warm: %w", explainIMDS(err, p.cfg))
	}
	return true, nil
}

// syncSNAT keeps the node's SNAT chain as the config says, every pass:
// with snat on it is made to match the pool (a flushed nat table heals
// itself); with snat off a chain left from before is removed.
func syncSNAT(ctx context.Context, p *plugin, stdout io.Writer) error {
	if !p.cfg.SNAT {
		// Only a chain this boot installed can exist (the nat table does
		// not survive a reboot): nodes without snat need no iptables.
		st, _, err := p.mgr.Snapshot(ctx)
		if err != nil || st.EC2 == nil || st.EC2.SNATBoot != p.mgr.BootID {
			return err
		}
		changed, err := snat.Remove()
		if err != nil {
			return fmt.Errorf("snat off: %w", err)
		}
		if changed {
			fmt.Fprintf(stdout, "warm: snat is off: chain %s and its jump removed\n", snat.Chain)
		}
		return markSNAT(ctx, p.mgr, false)
	}
	st, _, err := p.mgr.Snapshot(ctx)
	if err != nil {
		return err
	}
	spec, err := snatSpec(st.EC2, p.cfg.Warm.ExcludeIPs)
	if err != nil {
		return err
	}
	changed, err := snat.Ensure(spec)
	if err != nil {
		return fmt.Errorf("snat: %w", err)
	}
	if changed {
		fmt.Fprintf(stdout, "warm: snat: traffic of pods in %v leaving %v now leaves as %s (chain %s)\n", spec.PodNets, spec.VPCCIDRs, spec.PrimaryIP, snat.Chain)
	}
	return markSNAT(ctx, p.mgr, true)
}
