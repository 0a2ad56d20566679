// Package install owns what eni-cni puts on a node besides its state: the
// binary in the CNI bin dir, the conflist, and the timers that run `gc` and
// `warm` (systemd units, or a cron file where systemd does not run). It
// plans every change first as a list of steps, so `--dry-run` prints exactly
// what a real run does, and it removes all of it again (Uninstall).
//
// Everything is written below a root directory: "/" on a live node, an
// image's tree when a node image is baked, the host's root mounted into a
// DaemonSet's pod. Only a Live install talks to the node's service manager
// or creates the state directory; a tree being baked never gets a state
// file, a started timer, or anything under the state directory.
//
// Package main supplies what needs the rest of eni-cni: the conflist (it
// owns the configuration), the kernel and iptables cleanup and the EC2
// report of Uninstall, and the warm and doctor runs at the end of a live
// install, as extra steps.
package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/eni-cni/eni-cni/delegate"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// BinaryName is the plugin's file name in the CNI bin dir; runtimes find it
// by the conflist's "type".
const BinaryName = "eni-cni"

// Units are the systemd units of the timers, in the order they are written.
var (
	Timers   = []string{"eni-cni-gc.timer", "eni-cni-warm.timer"}
	Services = []string{"eni-cni-gc.service", "eni-cni-warm.service", "eni-cni-warm-lean.service"}
)

// CronSource is the name of the cron file in the Units file system; it is
// installed as Layout.CronFile.
const CronSource = "eni-cni.cron"

// defaultBinPath is the binary's path written in the shipped units and cron
// file; a Layout with another BinDir rewrites it.
const defaultBinPath = "/opt/cni/bin/eni-cni"

// defaultWarmTimer is the published ec2 build the shipped warm unit and
// cron line run (delegate.WarmTimerPath of the default state directory); a
// Layout with another StateDir rewrites it.
const defaultWarmTimer = "/var/lib/eni-cni/.bin/timer-warm"

// Layout is where things go, as absolute paths on the node; Root is
// prepended when writing.
type Layout struct {
	Root     string // "/" on a live node
	BinDir   string // /opt/cni/bin
	ConfDir  string // /etc/cni/net.d
	ConfName string // 10-eni-cni.conflist
	UnitDir  string // /etc/systemd/system
	CronFile string // /etc/cron.d/eni-cni
	StateDir string // /var/lib/eni-cni
}

// DefaultLayout is the layout of a node as the README describes it.
func DefaultLayout() Layout {
	return Layout{
		Root: "/", BinDir: "/opt/cni/bin", ConfDir: "/etc/cni/net.d", ConfName: "10-eni-cni.conflist",
		UnitDir: "/etc/systemd/system", CronFile: "/etc/cron.d/eni-cni", StateDir: "/var/lib/eni-cni",
	}
}

// In returns the path of the node path p below the root. Below a root
// other than the host's, the directories on the way are resolved as the
// node itself would resolve them, with the root as /: an image whose /etc
// is a symlink to /etc (absolute, or climbing out with ..) means its own
// /etc, never the host's, so install and uninstall --root write and remove
// nothing outside the tree. The last element is not resolved: writes
// rename over it and removals remove the link itself.
func (l Layout) In(p string) string {
	if l.IsHostRoot() || l.Root == "" {
		return filepath.Join(l.Root, p)
	}
	dir, base := path.Split(path.Clean("/" + p))
	return filepath.Join(l.Root, resolveInRoot(l.Root, dir), base)
}

// resolveInRoot resolves the node directory dir below root, following
// symlinks as a chroot would: absolute targets start at root and .. stops
// at it. It returns a node path (without root) whose existing elements are
// not symlinks. After too many links (a loop) it gives up on a name below
// root that is not the link, so nothing is followed out of the tree.
func resolveInRoot(root, dir string) string {
	rest := strings.Split(strings.Trim(path.Clean(dir), "/"), "/")
	done := "/"
	for links := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, name)
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil { // not a symlink, or absent: taken as it is
			done = next
			continue
		}
		if links++; links > 40 {
			return path.Join("/.eni-cni-symlink-loop", next)
		}
		if path.IsAbs(target) {
			done = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return done
}

// IsHostRoot reports whether the layout writes to the running system.
func (l Layout) IsHostRoot() bool { return filepath.Clean(l.Root) == "/" }

// BinPath is the installed binary as the node sees it.
func (l Layout) BinPath() string { return path.Join(l.BinDir, BinaryName) }

// ConfPath is the conflist as the node sees it.
func (l Layout) ConfPath() string { return path.Join(l.ConfDir, l.ConfName) }

func (l Layout) validate() error {
	if l.Root == "" || !filepath.IsAbs(l.Root) {
		return fmt.Errorf("root %q is not an absolute path", l.Root)
	}
	for name, p := range map[string]string{"bin dir": l.BinDir, "conf dir": l.ConfDir, "unit dir": l.UnitDir, "cron file": l.CronFile, "state dir": l.StateDir} {
		if !path.IsAbs(p) {
			return fmt.Errorf("%s %q is not an absolute path", name, p)
		}
	}
	if l.ConfName == "" || strings.ContainsRune(l.ConfName, '/') || !isConfName(l.ConfName) {
		return fmt.Errorf("conflist name %q must be a file name ending in .conflist", l.ConfName)
	}
	return nil
}

func isConfName(n string) bool { return strings.HasSuffix(n, ".conflist") && len(n) > len(".conflist") }

// TimerMode says how gc and warm are scheduled.
type TimerMode string

// Timer modes. Auto picks systemd where it runs (or, for a tree being baked,
// where it is installed) and cron otherwise.
const (
	TimersAuto    TimerMode = "auto"
	TimersSystemd TimerMode = "systemd"
	TimersCron    TimerMode = "cron"
	TimersNone    TimerMode = "none"
)

// ParseTimerMode checks a --timers value.
func ParseTimerMode(s string) (TimerMode, error) {
	switch m := TimerMode(s); m {
	case TimersAuto, TimersSystemd, TimersCron, TimersNone:
		return m, nil
	}
	return "", fmt.Errorf("timers %q: want auto, systemd, cron or none", s)
}

// SystemdRunning reports whether systemd is the running init of the system
// whose root is root: systemd creates /run/systemd/system at boot (the
// check sd_booted() makes).
func SystemdRunning(root string) bool {
	fi, err := os.Stat(filepath.Join(root, "run/systemd/system"))
	return err == nil && fi.IsDir()
}

// systemdInstalled reports whether a tree that is not running (an image
// being baked) has systemd as its init.
func systemdInstalled(root string) bool {
	for _, p := range []string{"lib/systemd/systemd", "usr/lib/systemd/systemd"} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			return true
		}
	}
	return false
}

// resolveTimers turns auto into systemd or cron.
func resolveTimers(m TimerMode, root string, live bool) TimerMode {
	if m != TimersAuto && m != "" {
		return m
	}
	if SystemdRunning(root) || (!live && systemdInstalled(root)) {
		return TimersSystemd
	}
	return TimersCron
}

// ServiceManager is the part of systemd a live install needs.
type ServiceManager interface {
	// Reload makes systemd read unit files again (daemon-reload).
	Reload(ctx context.Context) error
	// Start starts a unit and returns without waiting for it to finish.
	Start(ctx context.Context, unit string) error
	// Stop stops a unit; a unit systemd does not know is not an error.
	Stop(ctx context.Context, unit string) error
}

// Step is one change to the node. Dry runs print Desc and skip Do.
type Step struct {
	Desc string
	// Do makes the change; nil for a step that only reports (a file that
	// is already right, a note for the operator).
	Do func(ctx context.Context) error
	// BestEffort steps do not stop the steps after them when they fail
	// (an uninstall removes whatever it can); their errors are still
	// returned at the end.
	BestEffort bool
}

// Note is a step that only says something.
func Note(format string, args ...any) Step { return Step{Desc: fmt.Sprintf(format, args...)} }

// Run executes steps in order, printing each before it runs (a first warm
// pass may take a while, and its output belongs under its line). With
// dryRun it prints what it would do and changes nothing. It stops at the
// first failure of a step that is not BestEffort.
func Run(ctx context.Context, steps []Step, dryRun bool, out io.Writer) error {
	var errs []error
	for _, s := range steps {
		if s.Do == nil {
			fmt.Fprintf(out, "%s\n", s.Desc)
			continue
		}
		if dryRun {
			fmt.Fprintf(out, "would %s\n", s.Desc)
			continue
		}
		fmt.Fprintf(out, "%s\n", s.Desc)
		if err := s.Do(ctx); err != nil {
			fmt.Fprintf(out, "  FAILED: %v\n", err)
			errs = append(errs, fmt.Errorf("%s: %w", s.Desc, err))
			if !s.BestEffort {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// unitFile returns a unit or the cron file from units, with the binary's
// path (and the conf dir, when it is not the default) rewritten for l.
func unitFile(units fs.FS, name string, l Layout) ([]byte, error) {
	data, err := fs.ReadFile(units, name)
	if err != nil {
		return nil, fmt.Errorf("read %s of this build: %w", name, err)
	}
	bin := l.BinPath()
	if l.ConfDir != DefaultLayout().ConfDir {
		for _, cmd := range []string{defaultBinPath + " gc", defaultBinPath + " warm", defaultWarmTimer + " warm"} {
			data = bytes.ReplaceAll(data, []byte(cmd), []byte(cmd+" --conf-dir "+l.ConfDir))
		}
	}
	data = bytes.ReplaceAll(data, []byte(defaultWarmTimer), []byte(delegate.WarmTimerPath(l.StateDir)))
	return bytes.ReplaceAll(data, []byte(defaultBinPath), []byte(bin)), nil
}

// FirstWarmUnit is the unit that runs a first warm pass now: the warm
// unit once the binary has published the build it runs (a reinstall),
// else the unit that runs the pass through the binary, which publishes it
// (the warm unit would fail on the missing file and leave it to its
// OnFailure= fallback, reporting a failed start).
func (in *Install) FirstWarmUnit() string {
	if _, err := os.Lstat(in.In(delegate.WarmTimerPath(in.StateDir))); err == nil {
		return "eni-cni-warm.service"
	}
	return "eni-cni-warm-lean.service"
}

// wantsLink is the symlink `systemctl enable` makes for a unit with
// WantedBy=timers.target: made by hand it works in a tree that is not
// running, and on a live node a daemon-reload picks it up.
func wantsLink(l Layout, timer string) (link, target string) {
	return path.Join(l.UnitDir, "timers.target.wants", timer), path.Join(l.UnitDir, timer)
}
