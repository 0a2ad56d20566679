// Package cmdline holds what every subcommand's command line shares: the
// usage error (exit code 2, with the usage printed) and the parsing of a
// subcommand's flags. The root package and the commands that live in
// packages of their own (install/cli) both use it.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
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
