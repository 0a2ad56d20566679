// Package delegate is how the lean build (the shipped binary) runs what
// it does not link: the gc, warm and other full-build subcommands, and the
// rare IMDS reads of ADD and STATUS, go to the full build embedded in it,
// run through package fullexec (a verified cached copy, or memory). The
// full build is the same source without -tags lean; `make build` embeds it.
package delegate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/fullexec"
	"github.com/eni-cni/eni-cni/netconf"
)

// Use says how a delegated command gets the full build.
type Use int

const (
	// Cached: the cached copy beside the state, created if missing (gc and
	// warm run every minute: they must not copy 45 MB out of this binary
	// each time).
	Cached Use = iota
	// ReadOnly: the cache only if it is already there (verified as
	// always); a command that writes nothing never creates the state
	// directory on a node that never ran the plugin.
	ReadOnly
	// Memory: never the on-disk cache: install --root must leave nothing in
	// this machine's /var/lib/eni-cni, and uninstall removes the cache.
	Memory
)

// Target is how the lean build (the shipped binary) runs a command it does
// not link: with which embedded build, got how.
type Target struct {
	Use Use
	// EC2 sends it to the ec2 build (the AWS SDK without the CRI client,
	// protobuf and D-Bus, whose start-up every timer-driven warm pass and
	// every IMDS read of a dry-pool ADD would pay), else the full build.
	EC2 bool
}

// For names the subcommands that link the CRI client, the AWS SDK or
// D-Bus, with their Target: the one list of them. The full and ec2 builds
// run them in process (runFull in seam_full.go, seam_ec2.go); the lean
// build execs them (seam_lean.go).
func For(cmd string) (Target, bool) {
	switch cmd {
	case "warm", "internal":
		return Target{Use: Cached, EC2: true}, true
	case "gc", "repair":
		return Target{Use: Cached}, true
	case "max-pods": // it writes nothing
		return Target{Use: ReadOnly, EC2: true}, true
	case "doctor":
		return Target{Use: ReadOnly}, true
	case "install", "uninstall":
		return Target{Use: Memory}, true
	}
	return Target{}, false
}

// Full runs the embedded full build.
type Full struct {
	Build fullexec.Build
	// Warm is the build the warm timer runs (the ec2 build): a timer
	// command through the cache publishes it as WarmTimerName.
	Warm *fullexec.Build
}

// WarmTimerName is the cached ec2 build's second name, which the warm
// timer runs directly (fullexec.Publish): one Go process a tick instead
// of the lean binary and the build it execs. Not a name the cache's
// clean-up takes for an old build.
const WarmTimerName = "timer-warm"

// WarmTimerPath is where the warm timer finds the published ec2 build of
// the network whose state is in stateDir.
func WarmTimerPath(stateDir string) string {
	return filepath.Join(cacheDir(stateDir), WarmTimerName)
}

// cacheDir is where the unpacked full build is cached, beside the state,
// in stateDir/.bin, which only root writes. It is derived from the
// network's configuration, never from the environment, which is the
// runtime's to set. "" (no configuration found) means memory only.
func cacheDir(stateDir string) string {
	if stateDir == "" {
		return ""
	}
	return filepath.Join(stateDir, ".bin")
}

// stateDirOf finds the state directory of a subcommand's configuration
// (--config, --conf-dir) without parsing its other flags, which are the
// full build's. Any problem gives "": the full build, run from memory,
// then reports it properly.
func stateDirOf(args []string) string {
	var path, dir = "", netconf.DefaultConfDir
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") || (name != "config" && name != "conf-dir") {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return ""
			}
			i++
			value = args[i]
		}
		if name == "config" {
			path = value
		} else {
			dir = value
		}
	}
	data, _, err := netconf.Find(path, dir)
	if err != nil {
		return ""
	}
	stateDir, err := netconf.StateDirOf(data)
	if err != nil {
		return ""
	}
	return stateDir
}

// open returns the full build, ready to run.
func (f Full) open(use Use, stateDir string) (*fullexec.Exe, error) {
	switch use {
	case ReadOnly:
		return fullexec.OpenReadOnly(cacheDir(stateDir), f.Build)
	case Memory:
		return fullexec.Memory(f.Build)
	}
	return fullexec.Open(cacheDir(stateDir), f.Build)
}

// Exec replaces this process with the full build running the same
// subcommand, so exit code, stdout and stderr are the full build's own.
func (f Full) Exec(cmd string, args []string, use Use) error {
	env := oneP(os.Environ())
	if use == Memory {
		// The full build installs this file, not itself.
		if self, serr := os.Executable(); serr == nil {
			env = withSelf(env, self)
		}
	}
	stateDir := ""
	if use != Memory {
		stateDir = stateDirOf(args)
	}
	exe, err := f.open(use, stateDir)
	if err != nil {
		return err
	}
	if use == Cached && (cmd == "warm" || cmd == "gc") {
		f.publishWarm(exe, stateDir)
	}
	argv := append([]string{os.Args[0], cmd}, args...)
	return exe.Exec(argv, env)
}

// publishWarm keeps the warm timer's copy (WarmTimerPath) current on every
// timer run through this binary: the warm pass (whose build, exe, is the
// one to publish) and the minute's gc (which opens it for this). So a copy
// missing, stale after a reboot, or left by the binary this one replaced
// is set right within a minute, and the timer's copy hands over to this
// binary until then. Best effort: a copy that is not right hands over.
//
// Where the cache cannot be used (the build runs from memory) the copy is
// removed instead: it could not verify itself there, or find the binary
// to hand over to, and the timer falls back to this binary only while the
// copy is missing.
func (f Full) publishWarm(exe *fullexec.Exe, stateDir string) {
	if f.Warm == nil {
		return
	}
	if exe.Cached && f.Warm.Digest != f.Build.Digest {
		warm, err := fullexec.Open(cacheDir(stateDir), *f.Warm)
		if err != nil {
			return
		}
		defer warm.Close()
		exe = warm
	}
	if !exe.Cached {
		fullexec.Unpublish(cacheDir(stateDir), WarmTimerName)
		return
	}
	self, err := os.Executable()
	if err != nil {
		return
	}
	_ = exe.Publish(WarmTimerName, self)
}

// oneP gives a delegated build one P (GOMAXPROCS=1) unless the operator
// chose GOMAXPROCS. Every delegated command spends its life waiting: on
// IMDS and the EC2 API, the CRI socket, a lock, iptables. With a P per CPU
// the Go scheduler wakes and spins idle threads at each of those waits for
// work there is none of: on 2 CPUs that was about 1.5 ms of a 20 ms
// settled warm pass, and it grows with the node's CPUs. Waits still
// overlap with one P (the netpoller does not need one), so nothing that
// runs in parallel today is serialised.
func oneP(env []string) []string {
	for _, e := range env {
		if strings.HasPrefix(e, "GOMAXPROCS=") {
			return env
		}
	}
	return append(env[:len(env):len(env)], "GOMAXPROCS=1")
}

// withSelf names self as the binary to install. An ENI_CNI_SELF already in
// the operator's environment is dropped, not merely followed by ours: the
// first of two equal names is the one a Go program reads, so a stale or
// planted value would make install copy that file onto the node as the
// plugin root runs for every pod.
func withSelf(env []string, self string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "ENI_CNI_SELF=") {
			out = append(out, e)
		}
	}
	return append(out, "ENI_CNI_SELF="+self)
}

// runInternal runs `eni-cni internal <what>` of the full build as a child,
// with the plugin configuration on stdin, and decodes its JSON answer.
func (f Full) runInternal(ctx context.Context, cfg *netconf.Config, what string, use Use, out any) error {
	exe, err := f.open(use, cfg.StateDir)
	if err != nil {
		return err
	}
	defer exe.Close()
	var stdout, stderr bytes.Buffer
	cmd := internalCmd(ctx, exe, cfg, what, &stdout, &stderr)
	if err := cmd.Start(); err != nil && exe.Cached {
		// The kernel would not run the cached copy: remember, use memory.
		exe.MarkNoExec(err)
		mem, merr := fullexec.Memory(f.Build)
		if merr != nil {
			return errors.Join(err, merr)
		}
		defer mem.Close()
		cmd = internalCmd(ctx, mem, cfg, what, &stdout, &stderr)
		err = cmd.Start()
		if err != nil {
			return fmt.Errorf("run the full build: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("run the full build: %w", err)
	}
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("instance metadata did not answer in time (%s): %w", what, ctx.Err())
		}
		msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stderr.String()), "eni-cni: "))
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("%s", msg)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(stdout.Bytes(), out)
}

func internalCmd(ctx context.Context, exe *fullexec.Exe, cfg *netconf.Config, what string, stdout, stderr io.Writer) *exec.Cmd {
	cmd := exec.CommandContext(ctx, exe.Path(), "internal", what)
	cmd.Env = oneP(netconf.WithoutCNI(os.Environ()))
	cmd.Stdin = bytes.NewReader(cfg.Raw)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd
}

// WarmCommand is the command a dry-pool ADD starts as `eni-cni warm`: the
// full build itself (verified, as every delegation runs it), which saves
// the pass an exec of this build on its way there. done releases the
// build's descriptor once the command has started.
func (f Full) WarmCommand(cfg *netconf.Config, confPath string) (cmd *exec.Cmd, done func(), err error) {
	exe, err := f.open(Cached, cfg.StateDir)
	if err != nil {
		return nil, nil, err
	}
	cmd = exec.Command(exe.Path(), "warm", "--config", confPath)
	cmd.Env = oneP(os.Environ())
	return cmd, func() { exe.Close() }, nil
}

// RefreshIMDS is provider.Full's: `eni-cni internal imds-refresh`.
func (f Full) RefreshIMDS(ctx context.Context, cfg *netconf.Config, _ *alloc.Manager) (provider.Refreshed, error) {
	var r provider.Refreshed
	err := f.runInternal(ctx, cfg, "imds-refresh", Cached, &r)
	return r, err
}

// CheckIMDS is provider.Full's: `eni-cni internal imds-check`, which
// writes nothing.
func (f Full) CheckIMDS(ctx context.Context, cfg *netconf.Config) error {
	return f.runInternal(ctx, cfg, "imds-check", ReadOnly, nil)
}

// AsWarmTimer is how a build starts a command when it may be the warm
// timer's published copy: run is true when this process runs cmd itself,
// either because it is not that copy (the lean binary exec'd it, or it is
// a build run by hand) or because the copy proved it is what a lean run
// verified in this boot (fullexec.VerifyPublished). Otherwise it hands
// over to the lean binary that published it, and returns only with the
// reason that failed.
func AsWarmTimer(cmd string, stderr io.Writer) (run bool, err error) {
	exe, err := os.Executable()
	if err != nil || filepath.Base(exe) != WarmTimerName {
		return true, nil
	}
	p, err := fullexec.VerifyPublished(exe)
	if err == nil && cmd != "warm" {
		err = fmt.Errorf("%w: %s runs warm, not %q", fullexec.ErrNotVerified, exe, cmd)
	}
	if err == nil {
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.GOMAXPROCS(1) // as oneP gives a delegated build
		}
		return true, nil
	}
	if p.Lean == "" {
		return false, fmt.Errorf("%w; run `eni-cni %s` through the eni-cni binary, which publishes it again", err, cmd)
	}
	fmt.Fprintf(stderr, "eni-cni: %v: handing over to %s\n", err, p.Lean)
	return false, fullexec.HandOver(p.Lean, os.Args, os.Environ())
}
