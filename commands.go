package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
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
  gc     [--config F] [--cri-endpoint unix:///...] [--grace D] [--dry-run] [--force]
                                  free addresses of sandboxes the CRI runtime no longer lists
  repair [--config F] [--cri-endpoint unix:///...] [--dry-run] [--force]
                                  rebuild the state from the node's veths and the CRI
                                  listing when state.json is lost or corrupt (the bad file
                                  is kept as state.json.bad-<time>)

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
	case "gc", "warm", "repair", "internal":
		// These link the CRI client and the AWS SDK; see full.go.
		return runFull(cmd, rest, stdout, stderr)
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

func (c *commonFlags) parse(args []string) error {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if c.fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, c.fs.Arg(0))
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

// listing is the JSON form of `eni-cni list`.
type listing struct {
	Network     string             `json:"network"`
	StateFile   string             `json:"stateFile"`
	Pool        alloc.Counts       `json:"pool"`
	Allocations []alloc.Allocation `json:"allocations"`
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
	st, counts, err := p.mgr.Snapshot(context.Background())
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	allocs := append([]alloc.Allocation{}, st.Allocations...)
	sort.Slice(allocs, func(i, j int) bool { return allocs[i].IP.Less(allocs[j].IP) })
	l := listing{Network: p.cfg.Network, StateFile: p.cfg.StateDir + "/" + alloc.StateFileName, Pool: counts, Allocations: allocs}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(l)
	}
	printListing(stdout, l, p.mgr.Age)
	return nil
}

// printListing prints the table; AGE is on the boot clock (alloc.Manager.Age),
// so a stepped wall clock does not make pods look older or younger.
func printListing(w io.Writer, l listing, age func(alloc.Allocation) time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NETWORK\tCONTAINER\tIFNAME\tIP\tPOD\tHOST VETH\tENI\tAGE")
	for _, a := range l.Allocations {
		pod := a.PodNamespace + "/" + a.PodName
		if a.PodName == "" {
			pod = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Network, shortContainerID(a.ContainerID), a.IfName,
			a.IP, pod, a.HostVeth, defaultString(a.ENI, "-"), age(a).Round(time.Second))
	}
	tw.Flush()
	fmt.Fprintf(w, "pool: total %d, free %d, cooling %d, allocated %d (state %s)\n",
		l.Pool.Total, l.Pool.Free, l.Pool.Cooling, l.Pool.Allocated, l.StateFile)
	if l.Pool.Outside > 0 {
		fmt.Fprintf(w, "%d allocations hold addresses outside the pool (ranges changed?); they stay until their pods' DEL\n", l.Pool.Outside)
	}
}

func shortContainerID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func cmdStatusCLI(args []string, stdout, stderr io.Writer) error {
	f := newFlags("status", stderr)
	if err := f.parse(args); err != nil {
		return err
	}
	p, path, err := f.load()
	if err != nil {
		return fmt.Errorf("%w: %w", errNotReady, err)
	}
	c, err := p.status(context.Background())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ready: network %q (%s), pool %s: %d addresses, %d free, %d allocated; state in %s\n",
		p.cfg.Network, path, p.cfg.Source, c.Total, c.Free, c.Allocated, p.cfg.StateDir)
	return nil
}
