// Package cmdline holds what every subcommand's command line shares: the
// usage error (exit code 2, with the usage printed) and the parsing of a
// subcommand's flags, the flags that find a configuration, and JSON output.
// The root package and the commands that live in
// packages of their own (install/cli) both use it.
package cmdline

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/eni-cni/eni-cni/netconf"
)

// ErrUsage is a command line that makes no sense; exit code 2.
var ErrUsage = errors.New("usage")

// Parse parses a subcommand's flags: bad flags and stray arguments are
// usage errors; -h is flag.ErrHelp for the caller to treat as success.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	return nil
}

// Flags are a subcommand's flags with the two every config-reading command
// takes: --config and --conf-dir.
type Flags struct {
	FS      *flag.FlagSet
	Config  string
	ConfDir string
}

// NewFlags starts the flags of subcommand name; errors and usage go to stderr.
func NewFlags(name string, stderr io.Writer) *Flags {
	f := &Flags{FS: flag.NewFlagSet(name, flag.ContinueOnError)}
	f.FS.SetOutput(stderr)
	f.FS.StringVar(&f.Config, "config", "", "conflist or plugin config file (default: first eni-cni conflist in --conf-dir)")
	f.FS.StringVar(&f.ConfDir, "conf-dir", netconf.DefaultConfDir, "directory searched when --config is not given")
	return f
}

// Parse is the package's Parse of these flags.
func (f *Flags) Parse(args []string) error { return Parse(f.FS, args) }

// LoadConfig finds and parses the configuration the flags name, and says
// where it was found.
func (f *Flags) LoadConfig() (*netconf.Config, string, error) {
	data, path, err := netconf.Find(f.Config, f.ConfDir)
	if err != nil {
		return nil, path, err
	}
	cfg, err := netconf.Parse(data)
	if err != nil {
		return nil, path, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, path, nil
}

// PrintJSON writes v as indented JSON.
func PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
