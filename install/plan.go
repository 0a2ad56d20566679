package install

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/eni-cni/eni-cni/fullexec"
)

// Install describes one installation.
type Install struct {
	Layout
	// Binary is the file to install as BinDir/eni-cni.
	Binary string
	// Conflist is written as ConfDir/ConfName; nil keeps the file there.
	Conflist []byte
	Timers   TimerMode
	// Units holds the shipped systemd units and the cron file.
	Units fs.FS
	// Live is set when Root is a running node (the host itself, or the
	// host's root mounted into a pod): only then is the state directory
	// created and systemd asked to load and start the timers.
	Live bool
	// Systemd is the running node's service manager; needed when Live and
	// the timers are systemd units.
	Systemd ServiceManager
	// CacheDir is the node path where the shipped binary unpacks its full
	// build (one file per build); when a live install replaces the binary,
	// the previous builds' files there are removed.
	CacheDir string
	// After are the caller's steps once everything is in place (a first
	// warm pass, doctor).
	After []Step
}

// Plan returns the steps of the installation. It only reads: running the
// steps makes the changes.
func (in *Install) Plan() ([]Step, error) {
	if err := in.Layout.validate(); err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(in.Binary)
	if err != nil {
		return nil, fmt.Errorf("read the binary to install: %w", err)
	}
	binStep := fileStep(in.Layout, in.BinPath(), bin, 0o755, "the plugin")
	steps := []Step{binStep}
	conf, err := in.conflistSteps()
	if err != nil {
		return nil, err
	}
	steps = append(steps, conf...)
	timers := resolveTimers(in.Timers, in.Root, in.Live)
	switch timers {
	case TimersSystemd:
		s, err := in.systemdSteps()
		if err != nil {
			return nil, err
		}
		steps = append(steps, s...)
	case TimersCron:
		s, err := in.cronSteps()
		if err != nil {
			return nil, err
		}
		steps = append(steps, s...)
	case TimersNone:
		steps = append(steps, Note("no timers installed (--timers none): run `eni-cni gc` and `eni-cni warm` from your own scheduler"))
	}
	steps = append(steps, in.stateSteps()...)
	if binStep.Do != nil {
		steps = append(steps, in.cacheSteps()...)
	}
	return append(steps, in.After...), nil
}

// ErrNoConflist is an install that was given no configuration and finds
// none on the node: the caller must say which pool to use.
var ErrNoConflist = errors.New("no network configuration")

func (in *Install) conflistSteps() ([]Step, error) {
	var steps []Step
	if in.Conflist != nil {
		steps = append(steps, fileStep(in.Layout, in.ConfPath(), in.Conflist, 0o644, "the network configuration"))
	} else if _, err := os.Stat(in.In(in.ConfPath())); err == nil {
		steps = append(steps, Note("kept %s (no pool flags given)", in.In(in.ConfPath())))
	} else {
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoConflist, in.In(in.ConfPath()))
	}
	if first := firstConf(in.In(in.ConfDir)); first != "" && first < in.ConfName {
		steps = append(steps, Note("WARNING: %s sorts before %s: runtimes use the first file of %s, so that network, not eni-cni, gets the pods; remove it or pick an earlier --conf-name",
			first, in.ConfName, in.In(in.ConfDir)))
	}
	return steps, nil
}

// firstConf is the file a runtime would load first from dir: libcni takes
// .conf, .conflist and .json files in lexical order.
func firstConf(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	var names []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".conf", ".conflist", ".json":
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

func (in *Install) systemdSteps() ([]Step, error) {
	var steps []Step
	for _, u := range append(append([]string{}, Services...), Timers...) {
		data, err := unitFile(in.Units, u, in.Layout)
		if err != nil {
			return nil, err
		}
		steps = append(steps, fileStep(in.Layout, path.Join(in.UnitDir, u), data, 0o644, "systemd unit"))
	}
	for _, t := range Timers {
		link, target := wantsLink(in.Layout, t)
		steps = append(steps, symlinkStep(in.Layout, link, target))
	}
	if !in.Live {
		return append(steps, Note("timers enabled in the tree; they start when it boots (nothing started on this machine)")), nil
	}
	if in.Systemd == nil {
		return nil, errors.New("systemd runs but no connection to it was given")
	}
	sd := in.Systemd
	steps = append(steps, Step{Desc: "systemd: daemon-reload", Do: sd.Reload})
	for _, t := range Timers {
		steps = append(steps, Step{Desc: "systemd: start " + t, Do: func(ctx context.Context) error { return sd.Start(ctx, t) }})
	}
	return steps, nil
}

func (in *Install) cronSteps() ([]Step, error) {
	data, err := unitFile(in.Units, CronSource, in.Layout)
	if err != nil {
		return nil, err
	}
	steps := []Step{fileStep(in.Layout, in.CronFile, data, 0o644, "cron file: gc and warm every minute")}
	if in.Live && !cronInstalled(in.Root) {
		steps = append(steps, Note("WARNING: no cron daemon found in %s: nothing will run gc and warm; install cron or run them from your own scheduler", in.Root))
	}
	return steps, nil
}

// cronInstalled looks for the usual cron daemons.
func cronInstalled(root string) bool {
	for _, p := range []string{"usr/sbin/cron", "usr/sbin/crond", "sbin/crond", "usr/bin/crond", "usr/sbin/cronie", "usr/bin/fcron", "usr/sbin/fcron"} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			return true
		}
	}
	return false
}

// stateSteps creates the empty state directory on a live node. A tree
// being baked gets nothing there: a state file in an image would be every
// node's (same addresses, the builder's ENIs), and the binary creates the
// directory on first use anyway.
func (in *Install) stateSteps() []Step {
	dir := in.In(in.StateDir)
	if !in.Live {
		var found []string
		for _, n := range []string{"state.json", "state.lock", "warm.lock"} {
			if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
				found = append(found, n)
			}
		}
		if len(found) > 0 {
			return []Step{Note("WARNING: %s holds %s: a node image must not carry eni-cni state (every node started from it would reuse this node's addresses); remove the directory before you snapshot the image",
				dir, strings.Join(found, ", "))}
		}
		return nil
	}
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		if fi.Mode().Perm()&0o077 == 0 {
			return []Step{Note("unchanged %s (state directory)", dir)}
		}
		// A DaemonSet's hostPath volume creates it 0755.
		return []Step{{Desc: fmt.Sprintf("chmod 0700 %s (state directory, was %04o)", dir, fi.Mode().Perm()),
			Do: doNoCtx(func() error { return os.Chmod(dir, 0o700) })}}
	}
	return []Step{{Desc: fmt.Sprintf("create %s (state directory, mode 0700)", dir), Do: doNoCtx(func() error { return os.MkdirAll(dir, 0o700) })}}
}

// cacheSteps remove the unpacked embedded builds of the binary being replaced:
// each build unpacks under its own digest, so an upgrade would otherwise
// leave the old one (tens of MB) behind. The new binary unpacks its own on
// first use.
func (in *Install) cacheSteps() []Step {
	if !in.Live || in.CacheDir == "" {
		return nil
	}
	dir := in.In(in.CacheDir)
	old, _ := fullexec.CachedBuilds(dir)
	if len(old) == 0 {
		return nil
	}
	return []Step{{Desc: fmt.Sprintf("remove %d unpacked full builds of the replaced binary from %s", len(old), dir), BestEffort: true,
		Do: doNoCtx(func() error {
			var errs []error
			for _, f := range old {
				if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		})}}
}
