package provider

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/eni-cni/eni-cni/atomicfile"
	"github.com/eni-cni/eni-cni/netconf"
)

// WarmStarter starts one `eni-cni warm` pass for the configuration and
// returns without waiting for it. It says how, for messages and the log.
// Two starts at once make one pass: warm takes warm.lock, and a pass that
// finds it taken exits at once. direct asks for a process of its own even
// where systemd would start it (the last start through systemd ran
// nothing).
type WarmStarter interface {
	StartWarm(ctx context.Context, cfg *netconf.Config, direct bool) (how string, err error)
}

// Names of the timer's unit and of the files a started pass uses.
const (
	WarmUnit     = "eni-cni-warm.service"
	warmConfName = "warm.conf" // the ADD's configuration, for a pass it starts
	warmLogName  = "warm.log"  // its output when the plugin has no logFile
	maxWarmLog   = 1 << 20     // warm.log is started afresh beyond this
)

// NodeWarm starts passes on a real node: through systemd when it runs and
// the timer's unit is installed and would warm this very network (so the
// pass runs in the unit's cgroup, with its logs, and systemd itself keeps
// it single), else as a process of its own.
type NodeWarm struct {
	systemdRun string   // exists as a directory when systemd is PID 1 (sd_booted(3))
	unitDirs   []string // where an installed unit may be
	confDir    string   // where the unit's `eni-cni warm` finds its configuration
	// systemctl candidates, the first that exists is run: fixed system
	// paths, never a search of $PATH, which is the runtime's to set.
	systemctl []string
	command   func(cfg *netconf.Config, confPath string) (*exec.Cmd, func(), error)
	spawn     func(cfg *netconf.Config) (string, error) // nil: spawnWarm
}

// NewNodeWarm starts passes with command (Full.WarmCommand) where systemd
// does not.
func NewNodeWarm(full Full) NodeWarm {
	return NodeWarm{
		command:    full.WarmCommand,
		systemdRun: "/run/systemd/system",
		unitDirs:   []string{"/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"},
		confDir:    netconf.DefaultConfDir,
		systemctl:  []string{"/usr/bin/systemctl", "/bin/systemctl"},
	}
}

func (n NodeWarm) StartWarm(ctx context.Context, cfg *netconf.Config, direct bool) (string, error) {
	var unitErr error
	spawn := n.spawn
	if spawn == nil {
		spawn = n.spawnWarm
	}
	if direct {
		how, err := spawn(cfg)
		return how + " (the last start ran no pass)", err
	}
	if systemctl := firstExisting(n.systemctl); systemctl != "" && n.unitServes(cfg) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		// --no-block: queue the start and return; the unit is oneshot, so a
		// start while it runs joins the running pass.
		out, err := exec.CommandContext(ctx, systemctl, "start", "--no-block", WarmUnit).CombinedOutput()
		if err == nil {
			return "systemd unit " + WarmUnit, nil
		}
		unitErr = fmt.Errorf("systemctl start %s: %v: %s", WarmUnit, err, strings.TrimSpace(string(out)))
	}
	how, err := spawn(cfg)
	if unitErr != nil {
		how = how + " (" + unitErr.Error() + ")"
	}
	return how, err
}

// firstExisting is the first of paths that names a regular file, or "".
func firstExisting(paths []string) string {
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// unitServes reports whether the installed timer unit would warm cfg's
// network: `eni-cni warm` without --config takes the first eni-cni
// conflist in /etc/cni/net.d, which must name the same network and state.
func (n NodeWarm) unitServes(cfg *netconf.Config) bool {
	if fi, err := os.Stat(n.systemdRun); err != nil || !fi.IsDir() {
		return false
	}
	installed := false
	for _, d := range n.unitDirs {
		if _, err := os.Stat(filepath.Join(d, WarmUnit)); err == nil {
			installed = true
			break
		}
	}
	if !installed {
		return false
	}
	data, _, err := netconf.Find("", n.confDir)
	if err != nil {
		return false
	}
	unitCfg, err := netconf.Parse(data)
	return err == nil && unitCfg.Network == cfg.Network && unitCfg.StateDir == cfg.StateDir
}

// spawnWarm starts `eni-cni warm --config <stateDir>/warm.conf` as a
// process of its own: a new session (the runtime's signals to the ADD's
// process group do not reach it, and it outlives the ADD), stdin from
// /dev/null, output appended to the plugin's log file (or warm.log in the
// state directory). It must not inherit the ADD's stdout or stderr: the
// runtime reads those until every writer has closed them.
func (n NodeWarm) spawnWarm(cfg *netconf.Config) (string, error) {
	confPath := filepath.Join(cfg.StateDir, warmConfName)
	if err := writeIfChanged(confPath, cfg.Raw); err != nil {
		return "", fmt.Errorf("start eni-cni warm: %w", err)
	}
	out, err := warmLog(cfg)
	if err != nil {
		return "", fmt.Errorf("start eni-cni warm: %w", err)
	}
	defer out.Close()
	cmd, done, err := n.command(cfg, confPath)
	if err != nil {
		return "", fmt.Errorf("start eni-cni warm: %w", err)
	}
	defer done()
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = netconf.WithoutCNI(cmd.Env) // the build's own variables kept
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start eni-cni warm: %w", err)
	}
	pid := cmd.Process.Pid
	// Not waited for by the ADD, but reaped if it ends while the ADD still
	// waits: a zombie would look like a pass still running (see
	// processAlive). When the ADD ends first, whoever inherits it reaps it.
	go cmd.Wait() //nolint:errcheck // its outcome is in the store and its log
	return fmt.Sprintf("process %d (eni-cni warm --config %s)", pid, confPath), nil
}

// warmLog is where a spawned pass writes: the plugin's log file, or, when
// that cannot be opened as a log (/dev/null, a FIFO: the plugin's own
// logger then writes to stderr), warm.log in the state directory. The
// pass's output may go elsewhere; the pass must start, or the ADDs
// waiting on a dry pool fail.
func warmLog(cfg *netconf.Config) (*os.File, error) {
	f, err := openWarmLog(cfg)
	if err != nil && cfg.LogFile != "" {
		return openWarmLog(&netconf.Config{StateDir: cfg.StateDir})
	}
	return f, err
}

// openWarmLog opens the log a spawned pass writes to as the plugin's own
// log is opened (logfile): not through a symlink, which would append root's
// output wherever it points, and not blocking on a FIFO, which would hang
// the ADD that starts the pass.
func openWarmLog(cfg *netconf.Config) (*os.File, error) {
	path := cfg.LogFile
	if path == "" {
		path = filepath.Join(cfg.StateDir, warmLogName)
		if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Size() > maxWarmLog {
			os.Remove(path)
		}
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, err
	}
	// A FIFO with a reader (or a device) opens: the pass's output must go
	// to a file, as the plugin's own log does.
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open warm log %s: not a regular file", path)
	}
	return f, nil
}

// writeIfChanged replaces path with data (atomicfile) unless it already
// holds exactly that, so ADDs that start warm passes do not rewrite it
// every time, and a pass never reads half a file.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return atomicfile.WriteFile(path, data, 0o600)
}
