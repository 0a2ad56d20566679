package install

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Uninstall describes the removal of eni-cni from a node.
type Uninstall struct {
	Layout
	// Live: Root is a running node; its timers are stopped first.
	Live bool
	// Systemd is the running node's service manager (Live, systemd nodes).
	Systemd ServiceManager
	// Purge also removes the state directory (state.json, locks): the
	// record of which address each pod holds.
	Purge bool
	// CacheDirs are node paths of the unpacked full build (always removed:
	// a cache).
	CacheDirs []string
	// ForeignConflist is set (to why) when the file at ConfPath is not an
	// eni-cni conflist: another plugin's network, which is kept.
	ForeignConflist string
	// Network are the caller's steps that undo the kernel side (veths,
	// rules, ENI route tables, the SNAT chain); they run after the timers
	// are stopped and the conflist is gone, so nothing puts them back.
	Network []Step
	// After are the caller's last steps (the EC2 report).
	After []Step
	// Notes are printed first (what the caller could not find out).
	Notes []Step
}

// Plan returns the steps of the removal. Every step is best effort: an
// uninstall removes what it can and reports the rest, and a second run
// finds everything absent.
func (u *Uninstall) Plan() ([]Step, error) {
	if err := u.Layout.validate(); err != nil {
		return nil, err
	}
	steps := append([]Step{}, u.Notes...)
	steps = append(steps, u.timerSteps()...)
	if u.ForeignConflist != "" {
		steps = append(steps, Note("kept %s: %s", u.In(u.ConfPath()), u.ForeignConflist))
	} else {
		steps = append(steps, removeStep(u.Layout, u.ConfPath(), false, "the network configuration"))
	}
	steps = append(steps, u.Network...)
	steps = append(steps, removeStep(u.Layout, u.BinPath(), false, "the plugin"))
	steps = append(steps, u.stateSteps()...)
	for i := range steps {
		steps[i].BestEffort = true
	}
	return append(steps, u.After...), nil
}

// timerSteps stop the timers and their services (so no warm pass puts
// addresses or rules back meanwhile) and remove units, links and cron file,
// whichever are there: a node may have moved from cron to systemd.
func (u *Uninstall) timerSteps() []Step {
	var steps []Step
	units := append(append([]string{}, Timers...), Services...)
	var present []string // node paths of units and links
	for _, t := range Timers {
		link, _ := wantsLink(u.Layout, t)
		present = appendIfPresent(present, u.Layout, link)
	}
	for _, n := range units {
		present = appendIfPresent(present, u.Layout, path.Join(u.UnitDir, n))
	}
	live := u.Live && u.Systemd != nil && SystemdRunning(u.Root)
	if live && len(present) > 0 {
		sd := u.Systemd
		for _, n := range units {
			steps = append(steps, Step{Desc: "systemd: stop " + n, Do: func(ctx context.Context) error { return sd.Stop(ctx, n) }})
		}
	}
	if len(present) == 0 {
		steps = append(steps, Note("absent systemd units of eni-cni in %s", u.In(u.UnitDir)))
	}
	for _, p := range present {
		steps = append(steps, removeStep(u.Layout, p, false, "systemd unit"))
	}
	if live && len(present) > 0 {
		steps = append(steps, Step{Desc: "systemd: daemon-reload", Do: u.Systemd.Reload})
	}
	return append(steps, removeStep(u.Layout, u.CronFile, false, "cron file"))
}

func appendIfPresent(list []string, l Layout, p string) []string {
	if _, err := os.Lstat(l.In(p)); err == nil {
		return append(list, p)
	}
	return list
}

// stateSteps remove the cache of the full build, and with Purge the whole
// state directory; without it the state is kept and said so.
func (u *Uninstall) stateSteps() []Step {
	var steps []Step
	dir := u.In(u.StateDir)
	purge := u.Purge
	if purge {
		if foreign := foreignEntries(dir); len(foreign) > 0 {
			purge = false
			steps = append(steps, Note("WARNING: kept %s (--purge): it holds %s, not only eni-cni's; remove eni-cni's state files there by hand", dir, strings.Join(foreign, ", ")))
		} else {
			steps = append(steps, removeStep(u.Layout, u.StateDir, true, "state directory (--purge)"))
		}
	}
	for _, c := range u.CacheDirs {
		if purge && isBelow(c, u.StateDir) {
			continue
		}
		steps = append(steps, removeStep(u.Layout, c, true, "cache of the unpacked full build"))
	}
	if u.Purge {
		return steps
	}
	if has, err := dirHasEntries(dir, func(n string) bool { return n != ".bin" }); err == nil && has {
		how := "--purge"
		if u.StateDir != DefaultLayout().StateDir {
			how = "--purge --state-dir " + u.StateDir
		}
		steps = append(steps, Note("kept %s (the store: allocations, cooling addresses, the ec2 pool's record; uninstall %s removes it)", dir, how))
	}
	return steps
}

// foreignEntries lists what in the state directory eni-cni does not
// create: a subdirectory other than the cache, a symlink, a device. The
// directory comes from the conflist's stateDir, and a --purge of /var/lib
// or / must not take every other program's files with it.
func foreignEntries(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() || (e.Name() == ".bin" && e.IsDir()) {
			continue
		}
		if out = append(out, e.Name()); len(out) == 5 {
			return append(out, "...")
		}
	}
	return out
}

func isBelow(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !filepath.IsAbs(rel) && (len(rel) < 3 || rel[:3] != "../")
}

func dirHasEntries(dir string, keep func(string) bool) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	for _, e := range entries {
		if keep(e.Name()) {
			return true, nil
		}
	}
	return false, nil
}
