//go:build lean

package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/alloc"
)

// The shipped binary is this lean build: the CNI verbs and the light
// subcommands, without the CRI client (grpc) and the AWS SDK, whose package
// initialisation alone would add milliseconds to every pod's ADD. It
// carries the full build (the same source without -tags lean) inside it and
// runs that, from an in-memory file, for what needs those libraries: the gc
// and warm subcommands (timer-driven) and the rare IMDS reads of ADD and
// STATUS. `make build` produces embedded/eni-cni-full before this build.
//
//go:embed embedded/eni-cni-full
var fullBinary []byte

// fullDigest is the sha256 of fullBinary, computed by `make build`: hashing
// tens of megabytes at run time would cost more than it saves.
//
//go:embed embedded/eni-cni-full.sha256
var fullDigest string

// defaultCacheDir holds the unpacked full build, so gc and warm (every
// minute) do not copy it out of this binary each time. Root only.
const defaultCacheDir = "/var/lib/eni-cni/.bin"

// fullExecutable returns a path of the full build the kernel can exec: the
// cached copy, written once per build, or else an in-memory file. readOnly
// commands (status, doctor, max-pods) use the cache only if it is already
// there: they must not create /var/lib/eni-cni on a node that never ran
// the plugin.
func fullExecutable(readOnly bool) (string, error) {
	if len(fullBinary) == 0 {
		return "", fmt.Errorf("this eni-cni was built without its full build embedded (use make build)")
	}
	if path, err := cachedFull(readOnly); err == nil {
		return path, nil
	}
	return memfdFull()
}

// readOnlyCommands are the delegated commands that write nothing.
var readOnlyCommands = map[string]bool{"doctor": true, "max-pods": true, "imds-check": true}

// cachedFull returns the cached full build, writing it first if needed.
// The name carries the build's digest, so an upgrade never runs an old one;
// the file is written to a temporary name and renamed, so a crash never
// leaves a truncated one under the final name.
func cachedFull(readOnly bool) (path string, err error) {
	dir := os.Getenv("ENI_CNI_CACHE_DIR")
	if dir == "" {
		dir = defaultCacheDir
	}
	digest := strings.TrimSpace(fullDigest)
	if len(digest) < 16 {
		return "", fmt.Errorf("no digest of the full build")
	}
	path = filepath.Join(dir, "eni-cni-full-"+digest[:16])
	if fi, err := os.Stat(path); err == nil && fi.Size() == int64(len(fullBinary)) && fi.Mode().Perm() == 0o700 {
		return path, nil
	}
	if readOnly {
		return "", fmt.Errorf("no cached full build")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, ".eni-cni-full-*")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(fullBinary); err != nil {
		return "", err
	}
	// Synced before the rename: after a crash the name must never point at
	// a file of the right size but with missing contents.
	if err = f.Sync(); err != nil {
		return "", err
	}
	if err = f.Chmod(0o700); err != nil {
		return "", err
	}
	if err = f.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(f.Name(), path)
}

// memfdOnly is fullExecutable without the on-disk cache.
func memfdOnly() (string, error) {
	if len(fullBinary) == 0 {
		return "", fmt.Errorf("this eni-cni was built without its full build embedded (use make build)")
	}
	return memfdFull()
}

// memfdFull writes the embedded build into a memfd and returns a path the
// kernel can exec. The fd is left open (and inheritable) on purpose: the
// path is only valid while it is, in this process and in a child.
func memfdFull() (string, error) {
	fd, err := unix.MemfdCreate("eni-cni-full", 0)
	if err != nil {
		return "", fmt.Errorf("memfd for the full build: %w", err)
	}
	f := os.NewFile(uintptr(fd), "eni-cni-full")
	if _, err := f.Write(fullBinary); err != nil {
		f.Close()
		return "", fmt.Errorf("write the full build to memfd: %w", err)
	}
	return fmt.Sprintf("/proc/self/fd/%d", fd), nil
}

// runFull replaces this process with the full build running the same
// subcommand, so exit code, stdout and stderr are the full build's own.
func runFull(cmd string, args []string, _, _ io.Writer) error {
	var path string
	var err error
	env := os.Environ()
	if cmd == "install" || cmd == "uninstall" {
		// Never the on-disk cache: install --root must leave nothing in
		// this machine's /var/lib/eni-cni, and uninstall removes the
		// cache. The full build installs this file, not itself.
		path, err = memfdOnly()
		if self, serr := os.Executable(); serr == nil {
			env = append(env, "ENI_CNI_SELF="+self)
		}
	} else {
		path, err = fullExecutable(readOnlyCommands[cmd])
	}
	if err != nil {
		return err
	}
	argv := append([]string{os.Args[0], cmd}, args...)
	err = syscall.Exec(path, argv, env)
	if !strings.HasPrefix(path, "/proc/") {
		// The cached copy would not run (damaged?): drop it, use memory.
		os.Remove(path)
		if path, merr := memfdFull(); merr == nil {
			err = syscall.Exec(path, argv, env)
		}
	}
	return fmt.Errorf("exec the full build: %w", err)
}

// runInternal runs `eni-cni internal <what>` of the full build as a child,
// with the plugin configuration on stdin, and decodes its JSON answer.
func runInternal(ctx context.Context, cfg *config, what string, out any) error {
	path, err := fullExecutable(readOnlyCommands[what])
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, path, "internal", what)
	cmd.Env = withoutCNI(os.Environ())
	cmd.Stdin = bytes.NewReader(cfg.raw)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
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

// withoutCNI drops the CNI_* variables so the child runs a subcommand, not
// a CNI verb.
func withoutCNI(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "CNI_") {
			out = append(out, e)
		}
	}
	return out
}

func imdsRefresh(ctx context.Context, cfg *config, _ *alloc.Manager) (internalResult, error) {
	var r internalResult
	err := runInternal(ctx, cfg, "imds-refresh", &r)
	return r, err
}

func imdsCheck(ctx context.Context, cfg *config) error {
	return runInternal(ctx, cfg, "imds-check", nil)
}
