// Package cli is the command line of `eni-cni install` and `eni-cni
// uninstall`: their flags, the conflist the pool flags generate (checked
// with the plugin's own parser), and what they learn from the node (the
// installed conflist, the state, the kernel's leftovers, the ENIs warm
// created) to turn into package install's steps.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/eni-cni/eni-cni/cmdline"
	"github.com/eni-cni/eni-cni/install"
	"github.com/eni-cni/eni-cni/netconf"
)

// selfEnv names the binary the operator ran when the lean build runs this
// (full) build from memory: that file, which carries both builds, is the
// one to install.
const selfEnv = "ENI_CNI_SELF"

// exampleRanges is the demo's static pool (testdata/10-pods.conflist),
// installed only when asked for with --example-conflist.
var exampleRanges = []string{"10.99.0.0/24", "10.98.0.10-10.98.0.20"}

// layoutFlags are the flags install and uninstall share.
type layoutFlags struct {
	l        install.Layout
	activate bool
	dryRun   bool
}

func (f *layoutFlags) register(fs *flag.FlagSet) {
	f.l = install.DefaultLayout()
	fs.StringVar(&f.l.Root, "root", "/", "install into this directory tree (a node image being baked, a test); nothing on the running host is enabled, started or changed")
	fs.StringVar(&f.l.BinDir, "bin-dir", f.l.BinDir, "CNI bin dir on the node")
	fs.StringVar(&f.l.ConfDir, "conf-dir", f.l.ConfDir, "CNI conf dir on the node")
	fs.StringVar(&f.l.ConfName, "conf-name", f.l.ConfName, "file name of the conflist")
	fs.StringVar(&f.l.UnitDir, "unit-dir", f.l.UnitDir, "systemd unit dir on the node")
	fs.StringVar(&f.l.CronFile, "cron-file", f.l.CronFile, "cron file on the node (where systemd does not run)")
	fs.BoolVar(&f.activate, "activate", false, "with --root: the root is a running node's (a DaemonSet pod's host mount): start its timers through its systemd and clean up its network")
	fs.BoolVar(&f.dryRun, "dry-run", false, "print what would be done and change nothing")
}

func (f *layoutFlags) live() bool { return f.l.IsHostRoot() || f.activate }

// absRoot makes a relative --root absolute (the layout wants absolute
// paths; a relative one is a directory the operator means from here).
func (f *layoutFlags) absRoot() error {
	abs, err := filepath.Abs(f.l.Root)
	if err != nil {
		return fmt.Errorf("%w: --root %q: %v", cmdline.ErrUsage, f.l.Root, err)
	}
	f.l.Root = abs
	return nil
}

// installCmd is a parsed `eni-cni install`.
type installCmd struct {
	layoutFlags
	units    fs.FS
	gen      conflistFlags
	set      map[string]bool
	binary   string
	conflist string
	example  bool
	timers   string
	noRun    bool
}

func parseInstall(args []string, stderr io.Writer) (*installCmd, error) {
	c := &installCmd{set: map[string]bool{}}
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.layoutFlags.register(fs)
	c.gen.register(fs)
	fs.StringVar(&c.binary, "binary", "", "the eni-cni binary to install (default: this one)")
	fs.StringVar(&c.conflist, "conflist", "", "install this conflist (checked) instead of generating one")
	fs.BoolVar(&c.example, "example-conflist", false, "install the demo's static conflist (10.99.0.0/24): to try eni-cni, not for a cluster")
	fs.StringVar(&c.timers, "timers", "auto", "how gc and warm run: auto, systemd, cron or none")
	fs.BoolVar(&c.noRun, "no-run", false, "on a live node, do not run warm and doctor at the end")
	if err := cmdline.Parse(fs, args); err != nil {
		return nil, err
	}
	if err := c.absRoot(); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	for n := range c.set {
		c.gen.given = c.gen.given || generating[n]
	}
	sources := 0
	for _, b := range []bool{c.conflist != "", c.example, c.gen.given} {
		if b {
			sources++
		}
	}
	if sources > 1 {
		return nil, fmt.Errorf("%w: give pool flags, --conflist or --example-conflist, not several", cmdline.ErrUsage)
	}
	if c.activate && c.l.IsHostRoot() {
		c.activate = false // the host root is live anyway
	}
	return c, nil
}

// Install is `eni-cni install`; units are the timers' units and the cron
// file it installs.
func Install(args []string, units fs.FS, stdout, stderr io.Writer) error {
	c, err := parseInstall(args, stderr)
	if err != nil {
		return err
	}
	c.units = units
	in, err := c.plan(stdout)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	steps, err := in.Plan()
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if sd, ok := in.Systemd.(*install.Systemd); ok {
		defer sd.Close()
	}
	ctx := context.Background()
	if c.dryRun {
		fmt.Fprintf(stdout, "dry run: nothing is changed\n")
	}
	if err := install.Run(ctx, steps, c.dryRun, stdout); err != nil {
		return fmt.Errorf("install into %s: %w", c.l.Root, err)
	}
	return nil
}

// plan turns the flags into an install.Install.
func (c *installCmd) plan(stdout io.Writer) (*install.Install, error) {
	var err error
	in := &install.Install{Layout: c.l, Units: c.units, Live: c.live()}
	if in.Timers, err = install.ParseTimerMode(c.timers); err != nil {
		return nil, fmt.Errorf("%w: %v", cmdline.ErrUsage, err)
	}
	if in.Binary, err = c.sourceBinary(); err != nil {
		return nil, err
	}
	if in.Conflist, err = c.conflistData(&in.Layout); err != nil {
		return nil, err
	}
	cfg, err := c.finalConfig(in)
	if err != nil {
		return nil, err
	}
	in.StateDir = cfg.StateDir
	in.CacheDir = path.Join(cfg.StateDir, ".bin")
	if in.Live {
		in.Systemd = install.NewSystemd(c.l.Root)
		if !c.noRun {
			in.After = c.afterSteps(in, cfg, stdout)
		}
	}
	return in, nil
}

// sourceBinary is the file to install: --binary, else the binary the
// operator ran.
func (c *installCmd) sourceBinary() (string, error) {
	if c.binary != "" {
		return c.binary, nil
	}
	if self := os.Getenv(selfEnv); self != "" {
		return self, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find this binary (use --binary): %w", err)
	}
	return self, nil
}

// conflistData returns the conflist to write, or nil to keep the eni-cni
// conflist already on the node (whose name it then puts in l).
func (c *installCmd) conflistData(l *install.Layout) ([]byte, error) {
	switch {
	case c.conflist != "":
		data, err := os.ReadFile(c.conflist)
		if err != nil {
			return nil, err
		}
		if err := checkConflist(data); err != nil {
			return nil, fmt.Errorf("conflist %s: %w", c.conflist, err)
		}
		return data, nil
	case c.example:
		c.gen.pool, c.gen.ranges = netconf.Static, exampleRanges
		return c.gen.render(c.set, c.withPortmap(*l))
	case c.gen.given:
		return c.gen.render(c.set, c.withPortmap(*l))
	}
	if _, found, err := netconf.Find("", l.In(l.ConfDir)); err == nil {
		l.ConfName = filepath.Base(found)
		return nil, nil
	}
	return nil, fmt.Errorf("%w in %s: say which pool, e.g. --pool ec2 (on EC2) or --pool static --ranges 10.244.1.0/24 (--example-conflist installs the demo's)",
		install.ErrNoConflist, l.In(l.ConfDir))
}

func (c *installCmd) withPortmap(l install.Layout) bool {
	switch strings.ToLower(c.gen.portmap) {
	case "yes", "true":
		return true
	case "no", "false":
		return false
	}
	_, err := os.Stat(filepath.Join(l.In(l.BinDir), "portmap"))
	return err == nil
}

// finalConfig parses the conflist that will be in place, checking a kept
// one too: an install never leaves a configuration the plugin refuses.
func (c *installCmd) finalConfig(in *install.Install) (*netconf.Config, error) {
	data := in.Conflist
	p := in.In(in.ConfPath())
	if data == nil {
		var err error
		if data, err = os.ReadFile(p); err != nil {
			return nil, err
		}
	}
	if err := checkConflist(data); err != nil {
		return nil, fmt.Errorf("conflist %s: %w (fix it, or give pool flags to replace it)", p, err)
	}
	conf, err := netconf.PluginConfFrom(data)
	if err != nil {
		return nil, err
	}
	return netconf.Parse(conf)
}

// afterSteps run on a live node once everything is in place: one warm
// pass, so the pool is there before the first pod rather than after the
// first timer tick, and doctor, if this build has it.
func (c *installCmd) afterSteps(in *install.Install, cfg *netconf.Config, out io.Writer) []install.Step {
	var steps []install.Step
	bin := in.BinPath()
	hostRoot := in.IsHostRoot()
	if cfg.Provider == netconf.EC2 {
		switch {
		case hostRoot:
			steps = append(steps, install.Step{Desc: "run `" + bin + " warm` once (fills the pool now, not at the first timer tick)", BestEffort: true,
				Do: func(ctx context.Context) error {
					return runNodeCommand(ctx, out, bin, "warm", "--config", in.ConfPath())
				}})
		case install.SystemdRunning(in.Root) && in.Timers != install.TimersCron && in.Timers != install.TimersNone:
			sd, unit := in.Systemd, in.FirstWarmUnit()
			steps = append(steps, install.Step{Desc: "systemd: start " + unit + " (a first warm pass on the node)", BestEffort: true,
				Do: func(ctx context.Context) error { return sd.Start(ctx, unit) }})
		default:
			steps = append(steps, install.Note("warm: the first pass runs from cron within a minute"))
		}
	}
	if !hostRoot {
		return append(steps, install.Note("doctor: run `%s doctor` on the node itself (skipped: this is not the host's root)", bin))
	}
	return append(steps, install.Step{Desc: "run `" + bin + " doctor`", BestEffort: true,
		Do: func(ctx context.Context) error {
			if !hasCommand(ctx, bin, "doctor") {
				fmt.Fprintf(out, "  skipped: this build of eni-cni has no doctor command\n")
				return nil
			}
			return runNodeCommand(ctx, out, bin, "doctor", "--config", in.ConfPath())
		}})
}

// runNodeCommand runs the installed binary as an operator would, its
// output indented under the step's line.
func runNodeCommand(ctx context.Context, out io.Writer, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = netconf.WithoutCNI(os.Environ())
	w := &indentWriter{w: out, prefix: "  "}
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	w.flush()
	if err != nil {
		return fmt.Errorf("%s %s: %w", path.Base(bin), args[0], err)
	}
	return nil
}

// hasCommand asks the binary whether it knows a subcommand: `cmd --help`
// exits 0 for a known one and 2 (usage) for an unknown one.
func hasCommand(ctx context.Context, bin, name string) bool {
	cmd := exec.CommandContext(ctx, bin, name, "--help")
	cmd.Env = netconf.WithoutCNI(os.Environ())
	return cmd.Run() == nil
}

// indentWriter prefixes each line.
type indentWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (iw *indentWriter) Write(p []byte) (int, error) {
	iw.buf = append(iw.buf, p...)
	for {
		i := strings.IndexByte(string(iw.buf), '\n')
		if i < 0 {
			return len(p), nil
		}
		fmt.Fprintf(iw.w, "%s%s\n", iw.prefix, iw.buf[:i])
		iw.buf = iw.buf[i+1:]
	}
}

func (iw *indentWriter) flush() {
	if len(iw.buf) > 0 {
		fmt.Fprintf(iw.w, "%s%s\n", iw.prefix, iw.buf)
		iw.buf = nil
	}
}
