//go:build lean

package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/fullexec"
)

// The shipped binary is this lean build: the CNI verbs and the light
// subcommands, without the CRI client (grpc) and the AWS SDK, whose package
// initialisation alone would add milliseconds to every pod's ADD. It
// carries the full build (the same source without -tags lean) inside it and
// runs that (package fullexec: a verified cached copy, or memory) for what
// needs those libraries: the gc and warm subcommands (timer-driven) and the
// rare IMDS reads of ADD and STATUS. `make build` produces
// embedded/eni-cni-full before this build.
//
//go:embed embedded/eni-cni-full
var fullBinary []byte

// fullDigest is the sha256 of fullBinary, computed by `make build`. The
// cached copy on disk must have it (hashed once per file and boot); the
// embedded bytes themselves are part of this binary, which root installed.
//
//go:embed embedded/eni-cni-full.sha256
var fullDigest string

// fullBuild is the embedded full build and the digest it must have.
func fullBuild() fullexec.Build {
	return fullexec.Build{Data: fullBinary, Digest: strings.TrimSpace(fullDigest)}
}

// cacheDir is where the unpacked full build is cached, so gc and warm
// (every minute) do not copy 45 MB out of this binary each time: beside
// the state, in stateDir/.bin, which only root writes. It is derived from
// the network's configuration, never from the environment, which is the
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
	var path, dir = "", defaultConfDir
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
	data, _, err := findConfig(path, dir)
	if err != nil {
		return ""
	}
	cfg, err := parseConfig(data)
	if err != nil {
		return ""
	}
	return cfg.StateDir
}

// readOnlyCommands are the delegated commands that write nothing: they use
// the cache only if it is already there (verified as always), and never
// create the state directory on a node that never ran the plugin.
var readOnlyCommands = map[string]bool{"doctor": true, "max-pods": true, "imds-check": true}

// openFull returns the full build, ready to run, for the delegated command.
func openFull(cmd, stateDir string) (*fullexec.Exe, error) {
	if readOnlyCommands[cmd] {
		return fullexec.OpenReadOnly(cacheDir(stateDir), fullBuild())
	}
	return fullexec.Open(cacheDir(stateDir), fullBuild())
}

// runFull replaces this process with the full build running the same
// subcommand, so exit code, stdout and stderr are the full build's own.
func runFull(cmd string, args []string, _, _ io.Writer) error {
	var exe *fullexec.Exe
	var err error
	env := os.Environ()
	if cmd == "install" || cmd == "uninstall" {
		// Never the on-disk cache: install --root must leave nothing in
		// this machine's /var/lib/eni-cni, and uninstall removes the
		// cache. The full build installs this file, not itself.
		exe, err = fullexec.Memory(fullBuild())
		if self, serr := os.Executable(); serr == nil {
			env = withSelf(env, self)
		}
	} else {
		exe, err = openFull(cmd, stateDirOf(args))
	}
	if err != nil {
		return err
	}
	argv := append([]string{os.Args[0], cmd}, args...)
	return exe.Exec(argv, env)
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
func runInternal(ctx context.Context, cfg *config, what string, out any) error {
	exe, err := openFull(what, cfg.StateDir)
	if err != nil {
		return err
	}
	defer exe.Close()
	var stdout, stderr bytes.Buffer
	cmd := internalCmd(ctx, exe, cfg, what, &stdout, &stderr)
	if err := cmd.Start(); err != nil && exe.Cached {
		// The kernel would not run the cached copy: remember, use memory.
		exe.MarkNoExec(err)
		mem, merr := fullexec.Memory(fullBuild())
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

func internalCmd(ctx context.Context, exe *fullexec.Exe, cfg *config, what string, stdout, stderr io.Writer) *exec.Cmd {
	cmd := exec.CommandContext(ctx, exe.Path(), "internal", what)
	cmd.Env = withoutCNI(os.Environ())
	cmd.Stdin = bytes.NewReader(cfg.raw)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd
}

// warmCommand is the command a dry-pool ADD starts as `eni-cni warm`: the
// full build itself (verified, as every delegation runs it), which saves
// the pass an exec of this build on its way there. done releases the
// build's descriptor once the command has started.
func warmCommand(cfg *config, confPath string) (cmd *exec.Cmd, done func(), err error) {
	exe, err := openFull("warm", cfg.StateDir)
	if err != nil {
		return nil, nil, err
	}
	return exec.Command(exe.Path(), "warm", "--config", confPath), func() { exe.Close() }, nil
}

func imdsRefresh(ctx context.Context, cfg *config, _ *alloc.Manager) (internalResult, error) {
	var r internalResult
	err := runInternal(ctx, cfg, "imds-refresh", &r)
	return r, err
}

func imdsCheck(ctx context.Context, cfg *config) error {
	return runInternal(ctx, cfg, "imds-check", nil)
}
