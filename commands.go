package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
)

const usage = `usage: eni-cni <command> [flags]

commands:
  version                         print the version
  list   [--config F] [--json]    allocations and pool counts
  status [--config F]             whether the plugin can serve ADD
  warm   [--config F]             one pass of EC2 top-up/trim of the pool, then exit
  gc     [--config F] [--cri-endpoint unix:///...] [--grace D] [--dry-run] [--force] [--json]
                                  free addresses of sandboxes the CRI runtime no longer lists
  repair [--config F] [--cri-endpoint unix:///...] [--dry-run] [--force]
                                  rebuild the state from the node's veths and the CRI
                                  listing when state.json is lost or corrupt (the bad file
                                  is kept as state.json.bad-<time>)
  doctor [--config F] [--json]    check the node for what breaks pod networking; exit 1 on a problem
  max-pods [--instance-type T] [--config F] [--json] [--show-max-allowed]
                                  kubelet maxPods for this node (or T), as the AWS VPC CNI's calculator
  install   [--pool ec2|static ...] [--root DIR] [--dry-run]
                                  install the binary, a conflist and the gc/warm timers
  uninstall [--purge] [--force] [--root DIR] [--dry-run]
                                  remove them, with the veths, rules, ENI tables and SNAT chain
  idle                            wait for SIGTERM (the DaemonSet pod's main container)

With CNI_COMMAND set, eni-cni runs as a CNI plugin instead.
--config defaults to the first conflist in /etc/cni/net.d with an eni-cni plugin.
`

// errUsage is a command line that makes no sense; exit code 2.
var errUsage = errors.New("usage")

// runCommand runs a subcommand and returns the exit code. Failures print a
// one-line reason on stderr.
func runCommand(args []string, stdout, stderr io.Writer) int {
	err := dispatch(args, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "eni-cni: %v\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "eni-cni: %v\n", err)
		return 1
	}
}

func dispatch(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command given", errUsage)
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "eni-cni %s\n", version)
		return nil
	case "list":
		return cmdList(rest, stdout, stderr)
	case "status":
		return cmdStatusCLI(rest, stdout, stderr)
	case "gc", "warm", "internal", "max-pods", "doctor", "install", "uninstall", "repair":
		// These link the CRI client, the AWS SDK or D-Bus; see full.go.
		return runFull(cmd, rest, stdout, stderr)
	case "idle":
		return cmdIdle(rest)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
}

// commonFlags are the flags every config-reading command takes.
type commonFlags struct {
	fs      *flag.FlagSet
	config  string
	confDir string
}

func newFlags(name string, stderr io.Writer) *commonFlags {
	c := &commonFlags{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.SetOutput(stderr)
	c.fs.StringVar(&c.config, "config", "", "conflist or plugin config file (default: first eni-cni conflist in --conf-dir)")
	c.fs.StringVar(&c.confDir, "conf-dir", defaultConfDir, "directory searched when --config is not given")
	return c
}

func (c *commonFlags) parse(args []string) error { return parseFlags(c.fs, args) }

// parseFlags parses a subcommand's flags: bad flags and stray arguments are
// usage errors; -h is flag.ErrHelp for the caller to treat as success.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

// load finds, parses and builds the plugin from the command's config.
func (c *commonFlags) load() (*plugin, string, error) {
	data, path, err := findConfig(c.config, c.confDir)
	if err != nil {
		return nil, path, err
	}
	cfg, err := parseConfig(data)
	if err != nil {
		return nil, path, fmt.Errorf("config %s: %w", path, err)
	}
	p, err := newPlugin(cfg)
	return p, path, err
}

// readOnly opens p's store for a dry run: nothing is created or saved
// (alloc.Manager.ReadOnly, DiskStore.SetReadOnly).
func (p *plugin) readOnly() {
	p.mgr.ReadOnly = true
	if d, ok := p.mgr.Store.(interface{ SetReadOnly() }); ok {
		d.SetReadOnly()
	}
}

// listing is the JSON form of `eni-cni list`.
type listing struct {
	Network     string             `json:"network"`
	StateFile   string             `json:"stateFile"`
	Pool        alloc.Counts       `json:"pool"`
	Allocations []alloc.Allocation `json:"allocations"`
	// Lost are allocated addresses EC2 no longer assigns to this instance
	// (unassigned, or their ENI detached, behind eni-cni's back). Their
	// pods have no working address; they are never handed out again.
	Lost []lostAddr `json:"lost,omitempty"`
}

// lostAddr is a lost address and the attachment holding it.
type lostAddr struct {
	IP  netip.Addr `json:"ip"`
	ENI string     `json:"eni"`
	Key alloc.Key  `json:"attachment"`
	Pod string     `json:"pod,omitempty"`
}

func lostOf(st *alloc.State) []lostAddr {
	var out []lostAddr
	for _, l := range st.EC2.Lost() {
		la := lostAddr{IP: l.IP, ENI: l.ENI}
		if i := slices.IndexFunc(st.Allocations, func(a alloc.Allocation) bool { return a.IP == l.IP }); i >= 0 {
			a := st.Allocations[i]
			la.Key, la.Pod = a.Key, a.PodNamespace+"/"+a.PodName
		}
		out = append(out, la)
	}
	return out
}

func cmdList(args []string, stdout, stderr io.Writer) error {
	f := newFlags("list", stderr)
	asJSON := f.fs.Bool("json", false, "print JSON")
	if err := f.parse(args); err != nil {
		return err
	}
	p, _, err := f.load()
	if err != nil {
		return err
	}
	// Without the lock: a read-only command must not create state.lock (or
	// the state directory) on a node that never ran the plugin.
	st, counts, err := p.mgr.Peek()
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	allocs := append([]alloc.Allocation{}, st.Allocations...)
	sort.Slice(allocs, func(i, j int) bool { return allocs[i].IP.Less(allocs[j].IP) })
	l := listing{Network: p.cfg.Network, StateFile: p.cfg.StateDir + "/" + alloc.StateFileName, Pool: counts, Allocations: allocs, Lost: lostOf(st)}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(l)
	}
	printListing(stdout, l, p.mgr.Age)
	return nil
}

// printListing prints the allocations as an aligned table, by address,
// and the pool summary. AGE is on the boot clock (alloc.Manager.Age), so a
// stepped wall clock does not make pods look older or younger.
func printListing(w io.Writer, l listing, age func(alloc.Allocation) time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tNAMESPACE\tIP\tENI\tAGE\tCONTAINER\tIFNAME\tHOST VETH")
	for _, a := range l.Allocations {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", defaultString(a.PodName, "-"), defaultString(a.PodNamespace, "-"),
			a.IP, defaultString(a.ENI, "-"), humanAge(age(a)), shortContainerID(a.ContainerID), a.IfName, a.HostVeth)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nnetwork %q: %d allocations; pool: total %d, free %d, cooling %d, allocated %d (state %s)\n",
		l.Network, len(l.Allocations), l.Pool.Total, l.Pool.Free, l.Pool.Cooling, l.Pool.Allocated, l.StateFile)
	for _, x := range l.Lost {
		fmt.Fprintf(w, "LOST: %s of %s (pod %s) is no longer assigned to this instance by EC2; the pod has no working address, recreate it\n",
			x.IP, x.Key, defaultString(x.Pod, "-"))
	}
	if l.Pool.Outside > 0 {
		fmt.Fprintf(w, "%d allocations hold addresses outside the pool (ranges changed?); they stay until their pods' DEL\n", l.Pool.Outside)
	}
}

// humanAge is a duration as kubectl shows ages: two units at most.
func humanAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

func shortContainerID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// statusReport is the JSON form of `eni-cni status --json`.
type statusReport struct {
	Ready    bool          `json:"ready"`
	Network  string        `json:"network,omitempty"`
	Config   string        `json:"config,omitempty"`
	Source   string        `json:"source,omitempty"`
	StateDir string        `json:"stateDir,omitempty"`
	Pool     *alloc.Counts `json:"pool,omitempty"`
	Error    string        `json:"error,omitempty"`
}

func cmdStatusCLI(args []string, stdout, stderr io.Writer) error {
	f := newFlags("status", stderr)
	asJSON := f.fs.Bool("json", false, "print JSON (also when not ready; the exit code still says)")
	if err := f.parse(args); err != nil {
		return err
	}
	r, err := statusOf(f)
	if *asJSON {
		if jerr := printJSON(stdout, r); jerr != nil {
			return jerr
		}
		if err != nil {
			return errReported{err}
		}
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ready: network %q (%s), pool %s: %d addresses, %d free, %d allocated; state in %s\n",
		r.Network, r.Config, r.Source, r.Pool.Total, r.Pool.Free, r.Pool.Allocated, r.StateDir)
	return nil
}

func statusOf(f *commonFlags) (statusReport, error) {
	p, path, err := f.load()
	r := statusReport{Config: path}
	if err != nil {
		err = fmt.Errorf("%w: %w", errNotReady, err)
		r.Error = err.Error()
		return r, err
	}
	r.Network, r.Source, r.StateDir = p.cfg.Network, p.cfg.Source, p.cfg.StateDir
	c, err := p.status(context.Background())
	if err != nil {
		r.Error = err.Error()
		return r, err
	}
	r.Ready, r.Pool = true, &c
	return r, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// errReported is a failure whose details the command already printed (as
// JSON on stdout): exit non-zero, with the reason once more on stderr.
type errReported struct{ error }

func (e errReported) Unwrap() error { return e.error }
