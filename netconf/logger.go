package netconf

import (
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/eni-cni/eni-cni/logfile"
)

// Logger logs to the configured file (size-capped, rotated), or to
// stderr (which runtimes capture) when none is set or it cannot be opened.
// Stdout is reserved for CNI results. The first call opens the file; later
// ones (the provider's warnings during a verb) share it rather than open
// and rotate it a second time from the same process.
func (c *Config) Logger() *slog.Logger {
	c.logOnce.Do(func() { c.log = c.newLogger() })
	return c.log
}

func (c *Config) newLogger() *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(strings.ToUpper(orDefault(c.LogLevel, "info"))))
	var out io.Writer = os.Stderr
	if c.LogFile != "" {
		if w, err := logfile.Open(c.LogFile, c.LogMaxSize, c.LogMaxFiles); err == nil {
			out = w
		}
	}
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: lv}))
}

// WithoutCNI drops the CNI_* variables from a child's environment, so that
// the child runs a subcommand, not a CNI verb.
func WithoutCNI(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "CNI_") {
			out = append(out, e)
		}
	}
	return out
}
