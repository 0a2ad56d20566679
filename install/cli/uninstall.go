package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/cmdline"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/install"
	"github.com/eni-cni/eni-cni/lockfile"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
	"github.com/eni-cni/eni-cni/netsetup/connmark"
	"github.com/eni-cni/eni-cni/netsetup/snat"
)

// uninstallCmd is a parsed `eni-cni uninstall`.
type uninstallCmd struct {
	layoutFlags
	purge, force, noEC2 bool
	stateDir            string
	// warmLock, once waitWarmStep has it, is held until the process
	// exits: no pass adds rules behind uninstall's back.
	warmLock *lockfile.File
}

func parseUninstall(args []string, stderr io.Writer) (*uninstallCmd, error) {
	c := &uninstallCmd{}
	fs := flag.NewFlagSet("uninstall", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.layoutFlags.register(fs)
	fs.BoolVar(&c.purge, "purge", false, "also remove the state directory (which pod holds which address)")
	fs.BoolVar(&c.force, "force", false, "uninstall even though pods still hold addresses (their networking goes with it)")
	fs.StringVar(&c.stateDir, "state-dir", "", "the state directory (default: the conflist's stateDir, else /var/lib/eni-cni)")
	fs.BoolVar(&c.noEC2, "no-ec2", false, "do not ask EC2 for the ENIs eni-cni created for this instance")
	if err := cmdline.Parse(fs, args); err != nil {
		return nil, err
	}
	return c, c.absRoot()
}

// Uninstall is `eni-cni uninstall`.
func Uninstall(args []string, stdout, stderr io.Writer) error {
	c, err := parseUninstall(args, stderr)
	if err != nil {
		return err
	}
	u, err := c.plan(stdout)
	if err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	if sd, ok := u.Systemd.(*install.Systemd); ok {
		defer sd.Close()
	}
	steps, err := u.Plan()
	if err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	if c.dryRun {
		fmt.Fprintf(stdout, "dry run: nothing is changed\n")
	}
	if err := install.Run(context.Background(), steps, c.dryRun, stdout); err != nil {
		return fmt.Errorf("uninstall from %s: %w", c.l.Root, err)
	}
	return nil
}

// installedConfig is what uninstall learns from the conflist on the node;
// without one, the defaults.
type installedConfig struct {
	cfg  *netconf.Config
	path string // "" when none was found
	note string // why it could not be used
}

func readInstalledConfig(l *install.Layout) installedConfig {
	dir := l.In(l.ConfDir)
	p := filepath.Join(dir, l.ConfName)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		// An eni-cni conflist under another name (installed by hand).
		var found string
		if conf, f, ferr := netconf.Find("", dir); ferr == nil {
			data, found, err = conf, f, nil
			l.ConfName = filepath.Base(found)
			p = found
		}
	} else if err == nil {
		data, err = netconf.PluginConfFrom(data)
	}
	def := &netconf.Config{StateDir: netconf.DefaultStateDir, VethPrefix: netconf.DefaultVethPrefix, Provider: netconf.EC2}
	if err != nil {
		return installedConfig{cfg: def, note: "no eni-cni conflist found: using the defaults (state in " + netconf.DefaultStateDir + ")"}
	}
	cfg, err := netconf.Parse(data)
	if err != nil {
		return installedConfig{cfg: def, path: p, note: fmt.Sprintf("conflist %s is not valid (%v): using the defaults", p, err)}
	}
	return installedConfig{cfg: cfg, path: p}
}

func (c *uninstallCmd) plan(stdout io.Writer) (*install.Uninstall, error) {
	ic := readInstalledConfig(&c.l)
	c.l.StateDir = ic.cfg.StateDir
	if c.stateDir != "" {
		if !path.IsAbs(c.stateDir) {
			return nil, fmt.Errorf("%w: --state-dir %q is not an absolute path", cmdline.ErrUsage, c.stateDir)
		}
		c.l.StateDir, ic.cfg.StateDir = c.stateDir, c.stateDir
	}
	u := &install.Uninstall{Layout: c.l, Live: c.live(), Purge: c.purge, CacheDirs: []string{path.Join(c.l.StateDir, ".bin")}}
	if ic.note != "" {
		u.Notes = append(u.Notes, install.Note("%s", ic.note))
	}
	if data, err := os.ReadFile(c.l.In(c.l.ConfPath())); err == nil {
		if _, err := netconf.PluginConfFrom(data); err != nil {
			u.ForeignConflist = fmt.Sprintf("not an eni-cni network configuration (%v)", err)
		}
	}
	if !u.Live {
		return u, nil
	}
	u.Systemd = install.NewSystemd(c.l.Root)
	st, stateNote := readStateFile(c.l.In(path.Join(c.l.StateDir, alloc.StateFileName)))
	if err := c.guard(st, stateNote); err != nil {
		return nil, err
	}
	if stateNote != "" {
		u.Notes = append(u.Notes, install.Note("%s", stateNote))
	}
	u.Network = append(u.Network, c.waitWarmStep(c.l.In(c.l.StateDir)))
	net, err := networkSteps(ic.cfg, st)
	if err != nil {
		return nil, err
	}
	u.Network = append(u.Network, net...)
	if !c.noEC2 {
		u.After = ec2ReportSteps(ic.cfg, st, stdout)
	}
	return u, nil
}

// guard refuses to pull the network from under running pods: uninstall is
// for a drained node.
func (c *uninstallCmd) guard(st *alloc.State, stateNote string) error {
	if c.force {
		return nil
	}
	if st == nil && stateNote != "" {
		return fmt.Errorf("%s: cannot tell whether pods still use eni-cni; --force to uninstall anyway", stateNote)
	}
	if st != nil && len(st.Allocations) > 0 {
		var pods []string
		for _, a := range st.Allocations {
			pods = append(pods, defaultString(strings.Trim(a.PodNamespace+"/"+a.PodName, "/"), shortID(a.ContainerID)))
			if len(pods) == 5 {
				pods = append(pods, "...")
				break
			}
		}
		return fmt.Errorf("pods still hold addresses from eni-cni: %d (%s; see `eni-cni list`): drain the node first (kubectl drain), or --force to remove their networking too",
			len(st.Allocations), strings.Join(pods, ", "))
	}
	return nil
}

// readStateFile reads (and migrates) the state under its lock, creating
// nothing: a node without a state file has none and no note.
func readStateFile(p string) (*alloc.State, string) {
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return nil, ""
	}
	store, err := alloc.NewDiskStore(filepath.Dir(p))
	if err != nil {
		return nil, fmt.Sprintf("state file %s cannot be read: %v", p, err)
	}
	// Under the lock when there is one; never creating it, so a dry run
	// (or an uninstall of an image tree) writes nothing. The file is
	// always replaced by a rename, so an unlocked read is whole too.
	if _, err := os.Stat(filepath.Join(filepath.Dir(p), alloc.LockFileName)); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), netconf.DefaultLockTimeout)
		defer cancel()
		if err := store.Lock(ctx); err != nil {
			return nil, fmt.Sprintf("state file %s: %v", p, err)
		}
		defer store.Unlock()
	}
	st, err := store.Load()
	if err != nil {
		return nil, fmt.Sprintf("state file %s: %v", p, err)
	}
	return st, ""
}

// waitWarmStep waits for a warm pass that is still running (the timers
// are stopped by now, but a pass started before may be adding addresses
// and rules) and keeps its lock until the process exits. The lock is
// opened as warm opens it (lockfile): never through a symlink, never
// created, never a FIFO.
func (c *uninstallCmd) waitWarmStep(stateDir string) install.Step {
	p := filepath.Join(stateDir, ec2.WarmLockName)
	if _, err := os.Lstat(p); err != nil {
		return install.Note("no warm pass to wait for")
	}
	return install.Step{Desc: "wait for a running warm pass to finish (" + p + ")", Do: func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*ec2.WarmTimeout)
		defer cancel()
		f, err := lockfile.Open(p, os.O_RDONLY)
		if err != nil {
			return fmt.Errorf("open %s: %w", p, err)
		}
		if err := f.LockContext(ctx); err != nil {
			return err
		}
		c.warmLock = f
		return nil
	}}
}

// networkSteps undo the kernel side in the node's network namespace:
// host veths named like ours, the per-address policy rules at our
// priorities, the ENI route tables, the SNAT chain, the NodePort marking.
func networkSteps(cfg *netconf.Config, st *alloc.State) ([]install.Step, error) {
	var steps []install.Step
	veths, err := netsetup.OurVeths(cfg.VethPrefix)
	if err != nil {
		return nil, err
	}
	if len(veths) > 0 {
		steps = append(steps, install.Step{Desc: fmt.Sprintf("delete %d host veths (%s)", len(veths), summarize(veths)),
			Do: func(context.Context) error { return netsetup.DeleteVeths(veths...) }})
	}
	rules, err := netsetup.OurRules()
	if err != nil {
		return nil, err
	}
	known, note := knownAddresses(cfg, st)
	mine, tables := ourRulesAndTables(rules, known, eniTables(st))
	if len(mine) > 0 {
		if note != "" {
			steps = append(steps, install.Note("%s", note))
		}
		steps = append(steps, install.Step{Desc: fmt.Sprintf("delete %d policy rules at priorities %d/%d (to and from pod addresses)", len(mine), netsetup.RulePriorityToPod, netsetup.RulePriorityFromPod),
			Do: func(context.Context) error {
				var errs []error
				for _, r := range mine {
					errs = append(errs, netsetup.DeleteRule(r))
				}
				return errors.Join(errs...)
			}})
	}
	for _, t := range tables {
		n, err := netsetup.TableRoutes(t)
		if err != nil || n == 0 {
			continue
		}
		steps = append(steps, install.Step{Desc: fmt.Sprintf("flush route table %d (%d routes of a secondary ENI)", t, n),
			Do: func(context.Context) error { return netsetup.FlushTable(t) }})
	}
	steps = append(steps, snatStep(cfg), egress4Step(cfg), nodePortStep())
	if !slices.ContainsFunc(steps, func(s install.Step) bool { return s.Do != nil }) {
		steps = append(steps, install.Note("no eni-cni veths, rules or ENI tables in this network namespace"))
	}
	return steps, nil
}

// ourRulesAndTables picks the rules at our priorities that are eni-cni's
// and the route tables to flush: the state's ENI tables, and those the
// from-rules of known addresses use. Without known addresses (known nil)
// every rule at our priorities goes, as the note says, but no table is
// flushed on the strength of such a rule alone: on a node where another
// CNI (the AWS VPC CNI numbers its ENI tables the same way) owns the
// rule, its table and every route in it are not ours to empty.
func ourRulesAndTables(rules []netsetup.PodRule, known func(netip.Addr) bool, tables []int) ([]netsetup.PodRule, []int) {
	var mine []netsetup.PodRule
	for _, r := range rules {
		if known != nil && !known(r.IP) {
			continue
		}
		mine = append(mine, r)
		if known != nil && r.From && r.Table > 0 && r.Table != 254 && !slices.Contains(tables, r.Table) {
			tables = append(tables, r.Table)
		}
	}
	return mine, tables
}

func snatStep(cfg *netconf.Config) install.Step {
	if _, err := exec.LookPath("iptables"); err != nil {
		return install.Note("iptables not installed: no SNAT chain to remove")
	}
	present, err := snat.Present()
	switch {
	case err != nil:
		return install.Note("SNAT chain %s: cannot tell (%v)", snat.Chain, err)
	case !present:
		return install.Note("absent iptables nat chain %s", snat.Chain)
	}
	return install.Step{Desc: "remove iptables nat chain " + snat.Chain + " and its POSTROUTING jump, and the filter chain of that name (the drop of conntrack-INVALID pod traffic) and its FORWARD jump",
		Do: func(context.Context) error { _, err := snat.Remove(); return err }}
}

// egress4Step removes the masquerade of IPv6-only pods' IPv4 egress (the
// first ADD of a boot of such a pod sets it up).
func egress4Step(cfg *netconf.Config) install.Step {
	if _, err := exec.LookPath("iptables"); err != nil {
		return install.Note("iptables not installed: no egress chain to remove")
	}
	present, err := snat.Egress4Present()
	switch {
	case err != nil:
		return install.Note("egress chain %s: cannot tell (%v)", snat.Egress4Chain, err)
	case !present:
		return install.Note("absent iptables nat chain %s", snat.Egress4Chain)
	}
	return install.Step{Desc: "remove iptables nat chain " + snat.Egress4Chain + " (IPv4 egress of IPv6-only pods) and its POSTROUTING jump, and the filter chain of that name and its FORWARD jump",
		Do: func(context.Context) error { _, err := snat.RemoveEgress4(cfg.StateDir); return err }}
}

// nodePortStep removes the primary ENI's connection marking (warm and the
// first ADD of a boot on a secondary ENI set it up): the mangle chain, its
// jump and the fwmark rule. Without iptables only the rule can be there.
func nodePortStep() install.Step {
	present, err := connmark.Present()
	switch {
	case err != nil:
		return install.Note("NodePort marking (chain %s, ip rule %d): cannot tell (%v)", connmark.Chain, connmark.RulePriority, err)
	case !present:
		return install.Note("absent NodePort marking (iptables mangle chain %s, ip rule %d)", connmark.Chain, connmark.RulePriority)
	}
	return install.Step{Desc: fmt.Sprintf("remove the NodePort marking: iptables mangle chain %s, its PREROUTING jump and ip rule %d", connmark.Chain, connmark.RulePriority),
		Do: func(context.Context) error { _, err := connmark.Remove(); return err }}
}

// knownAddresses says which addresses are eni-cni's: the static ranges,
// and what the state records. With neither (an ec2 node without a state
// file) it returns nil: every single-address rule at our priorities goes,
// which would also take the AWS VPC CNI's if it ran on this node.
func knownAddresses(cfg *netconf.Config, st *alloc.State) (func(netip.Addr) bool, string) {
	set := map[netip.Addr]bool{}
	if st != nil {
		for _, a := range st.Allocations {
			set[a.IP] = true
		}
		for _, c := range st.Cooling {
			set[c.IP] = true
		}
		if st.EC2 != nil {
			for _, a := range st.EC2.Addrs {
				set[a.IP] = true
			}
		}
	}
	ranges, _ := cfg.Pool.(alloc.Ranges)
	if st == nil && ranges == nil {
		return nil, "no state file: removing every single-address rule at our priorities (the AWS VPC CNI uses the same ones; do not run this where it runs)"
	}
	return func(ip netip.Addr) bool { return set[ip] || (ranges != nil && ranges.Contains(nil, ip)) }, ""
}

// eniTables are the route tables of the secondary ENIs the state records.
func eniTables(st *alloc.State) []int {
	if st == nil || st.EC2 == nil {
		return nil
	}
	var out []int
	for _, e := range st.EC2.ENIs {
		if t := e.Table(); t > 0 {
			out = append(out, t)
		}
	}
	return out
}

func summarize(names []string) string {
	if len(names) <= 4 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:4], ", ") + fmt.Sprintf(", and %d more", len(names)-4)
}

// ec2ReportSteps list the ENIs warm created for this instance: uninstall
// never deletes them (they may hold addresses pods on their way out still
// use, and EC2 deletes them with the instance: DeleteOnTermination), but an
// operator who keeps the instance should know they are there.
func ec2ReportSteps(cfg *netconf.Config, st *alloc.State, out io.Writer) []install.Step {
	instanceID, region := "", ""
	if st != nil && st.EC2 != nil {
		instanceID, region = st.EC2.InstanceID, st.EC2.Region
		if region == "" && st.EC2.AZ != "" {
			region = (&section.Instance{AZ: st.EC2.AZ}).Region()
		}
	}
	if cfg.Provider != netconf.EC2 && instanceID == "" {
		return nil
	}
	return []install.Step{{Desc: "ENIs eni-cni created for this instance (tag " + ec2.TagInstanceID + "):", BestEffort: true,
		Do: func(ctx context.Context) error {
			reportCreatedENIs(ctx, out, cfg, instanceID, region)
			return nil
		}}}
}

func reportCreatedENIs(ctx context.Context, out io.Writer, cfg *netconf.Config, instanceID, region string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	md := ec2.NewQuickMetadataClient(cfg.IMDSEndpoint)
	if instanceID == "" || region == "" {
		id, r, err := ec2.Identity(ctx, md)
		if err != nil {
			fmt.Fprintf(out, "  cannot tell this instance's ID (%v); list them with:\n  aws ec2 describe-network-interfaces --filters Name=tag:%s,Values=<instance-id>\n", err, ec2.TagInstanceID)
			return
		}
		instanceID, region = defaultString(instanceID, id), defaultString(region, r)
	}
	listCmd := fmt.Sprintf("aws ec2 describe-network-interfaces --region %s --filters Name=tag:%s,Values=%s", region, ec2.TagInstanceID, instanceID)
	enis, err := ec2.ListCreated(ctx, ec2.NewAPI(cfg.EC2Endpoint, region, md), instanceID)
	if err != nil {
		fmt.Fprintf(out, "  %v\n  list them with: %s\n", err, listCmd)
		return
	}
	if len(enis) == 0 {
		fmt.Fprintf(out, "  none\n")
		return
	}
	for _, e := range enis {
		fmt.Fprintf(out, "  %s  %-9s device %d  %s  %d addresses, %d prefixes  created %s  deleteOnTermination=%v\n",
			e.ID, e.Status, e.DeviceIndex, e.SubnetID, e.Addresses, e.Prefixes, defaultString(e.CreatedAt, "?"), e.DeleteOnTermination)
	}
	fmt.Fprintf(out, "  EC2 deletes those with deleteOnTermination=true along with the instance. To remove them now (once no pod uses them):\n")
	for _, e := range enis {
		del := fmt.Sprintf("aws ec2 delete-network-interface --region %s --network-interface-id %s", region, e.ID)
		if e.AttachmentID != "" {
			del = fmt.Sprintf("aws ec2 detach-network-interface --region %s --attachment-id %s && %s", region, e.AttachmentID, del)
		}
		fmt.Fprintf(out, "    %s\n", del)
	}
}

func defaultString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
