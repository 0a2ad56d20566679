package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/eni-cni/eni-cni/cmdline"
	"github.com/eni-cni/eni-cni/delegate"
	"github.com/eni-cni/eni-cni/plugin"
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
var errUsage = cmdline.ErrUsage

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
		return cmdVersion(stdout)
	case "list":
		return cmdList(rest, stdout, stderr)
	case "status":
		return cmdStatus(rest, stdout, stderr)
	case "idle":
		return cmdIdle(rest)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	if to, ok := delegate.For(cmd); ok {
		return runFull(cmd, to.Use, rest, stdout, stderr)
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
}

// commonFlags are a subcommand's flags (cmdline.Flags) and the plugin
// they configure.
type commonFlags struct{ *cmdline.Flags }

func newFlags(name string, stderr io.Writer) commonFlags {
	return commonFlags{cmdline.NewFlags(name, stderr)}
}

// load finds, parses and builds the plugin from the command's config.
func (c commonFlags) load() (*plugin.Plugin, string, error) {
	cfg, path, err := c.LoadConfig()
	if err != nil {
		return nil, path, err
	}
	p, err := plugin.Open(cfg, full())
	return p, path, err
}

// errReported is a failure whose details the command already printed (as
// JSON on stdout): exit non-zero, with the reason once more on stderr.
type errReported struct{ error }

func (e errReported) Unwrap() error { return e.error }
