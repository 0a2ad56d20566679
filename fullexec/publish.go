package fullexec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A timer-run command paid for two Go processes on every tick: the lean
// binary, which only finds and verifies the cached build, and the build it
// execs. The start of the first was about a quarter of a settled warm
// pass. So a lean run also gives the verified cached copy a second name in
// the cache directory, the command's own (Publish), which the timer runs
// directly. Before it acts, that process proves it is what a lean run
// verified (VerifyPublished): in this boot, the very file (device, inode,
// size, mtime, ctime) whose digest a lean run hashed and recorded in
// .verified-<digest16>, with that digest named by .published-<name>, the
// lean's note of what it published. Anything else — another boot, a file
// changed or replaced since, a missing or foreign note — and it hands over
// to the lean binary (HandOver), which verifies, repairs and publishes
// again as every delegation does, and runs the command.
//
// What this changes against the lean's check: the check runs in the
// process it vouches for, after the exec, not before it. Against root's
// mistakes and damage (a torn write, an old release's copy, a file
// changed offline) that is the same: the copy finds its record wrong and
// hands over before it reads a configuration or touches the node. Against
// someone who can write the cache it never was a defence either way: the
// directory is root's alone (OpenTrustedDir), as /opt/cni/bin and the
// systemd units are.

// PublishedPrefix starts the note of a published name: PublishedPrefix +
// the name.
const PublishedPrefix = ".published-"

// Publish gives e, a verified cached copy, the second name name in its
// cache directory, and notes in .published-<name> its digest and lean,
// the lean binary that published it (its path and identity: a binary
// replaced since makes the copy hand over to the new one). A name that
// already holds e, with its note, is left alone (an fstat, two stats, one
// small read). The new name is a hard link made through the verified
// descriptor, so it is that file and no other; linking changes the file's
// ctime, so its record goes stale and the next lean run hashes it once
// more and records it again.
func (e *Exe) Publish(name, lean string) error {
	if !e.Cached || e.dir == nil {
		return errors.New("publish: the build runs from memory, not from the cache")
	}
	if err := publishable(name); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(e.f.Fd()), &st); err != nil {
		return fmt.Errorf("publish %s: %w", name, err)
	}
	note, err := publishedOf(e.build, lean)
	if err != nil {
		return fmt.Errorf("publish %s: %w", name, err)
	}
	pst, err := statAt(e.dir, name)
	linked := err == nil && sameFile(pst, st)
	dfd := int(e.dir.Fd())
	tmp := fmt.Sprintf(".%spublish-%s-%d", filePrefix, name, os.Getpid())
	// The note first: a name whose note is not yet right hands over to
	// the lean binary, which is always safe.
	if readNote(e.dir, name) != note {
		if err := writeAt(e.dir, PublishedPrefix+name, tmp+".note", []byte(note), 0o600, func(*os.File) error { return nil }); err != nil {
			return fmt.Errorf("publish %s: %w", name, err)
		}
	}
	if linked {
		// Linking it again would change its ctime, and its record with it.
		return nil
	}
	_ = unix.Unlinkat(dfd, tmp, 0) // a killed run's leftover with our PID
	if err := unix.Linkat(unix.AT_FDCWD, e.Path(), dfd, tmp, unix.AT_SYMLINK_FOLLOW); err != nil {
		return fmt.Errorf("publish %s: link: %w", name, err)
	}
	err = unix.Renameat(dfd, tmp, dfd, name)
	// Gone after a rename, except when name already was a link of the
	// same file (a new note for the same copy, or two runs publishing at
	// once): then rename(2) does nothing and succeeds.
	_ = unix.Unlinkat(dfd, tmp, 0)
	if err != nil {
		return fmt.Errorf("publish %s: rename: %w", name, err)
	}
	_ = unix.Fsync(dfd)
	return nil
}

// unpublish removes every published name in d and its note: where the
// kernel refuses to run the cached copies, a timer that runs one directly
// would fail on every tick, and its fallback to the lean binary runs only
// while the name is missing.
func unpublish(d *os.File) {
	// A descriptor of its own: d may have been read to its end already.
	fd, err := unix.Openat(int(d.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	list := os.NewFile(uintptr(fd), d.Name())
	defer list.Close()
	names, err := list.Readdirnames(-1)
	if err != nil {
		return
	}
	for _, n := range names {
		if name, ok := strings.CutPrefix(n, PublishedPrefix); ok && publishable(name) == nil {
			_ = unix.Unlinkat(int(d.Fd()), name, 0)
			_ = unix.Unlinkat(int(d.Fd()), n, 0)
		}
	}
}

// Unpublish removes the published name in dir and its note, for a cache
// a lean run could not use (it ran the build from memory): a copy left
// there could not verify itself, the directory being untrusted, nor learn
// whom to hand over to. By path, since the directory may be one
// OpenTrustedDir refuses: someone who can change a directory on the way
// can at most have another file of these two names removed.
func Unpublish(dir, name string) {
	if dir == "" || publishable(name) != nil {
		return
	}
	_ = os.Remove(filepath.Join(dir, name))
	_ = os.Remove(filepath.Join(dir, PublishedPrefix+name))
}

// publishable: a plain name that the cache's clean-up (removeOthers) never
// takes for an old build, a record, a marker or a temporary file.
func publishable(name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, filePrefix) {
		return fmt.Errorf("publish: %q is not a name for a published build", name)
	}
	return nil
}

// publishedOf is the note of b published by the lean binary at lean:
// compared whole by Publish, parsed by VerifyPublished.
func publishedOf(b Build, lean string) (string, error) {
	if !filepath.IsAbs(lean) || strings.ContainsAny(lean, "\n\x00") {
		return "", fmt.Errorf("lean binary %q: not an absolute path", lean)
	}
	var st unix.Stat_t
	if err := unix.Stat(lean, &st); err != nil {
		return "", fmt.Errorf("lean binary: %w", err)
	}
	return fmt.Sprintf("eni-cni published\nbuild %s\ndigest %s\nlean %s\n%s", b.name(), b.Digest, lean, identity(st)), nil
}

// identity is what a file's replacement or change shows in: a new
// inode, or a new ctime (see record.go).
func identity(st unix.Stat_t) string {
	return fmt.Sprintf("dev %d\ninode %d\nsize %d\nmtime %d\nctime %d\n", st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano())
}

// readNote returns the note of name in d, or "" when there is none that
// only a trusted owner could have written.
func readNote(d *os.File, name string) string {
	return readTrusted(d, PublishedPrefix+name)
}

func sameFile(a, b unix.Stat_t) bool { return a.Dev == b.Dev && a.Ino == b.Ino }

// ErrNotVerified: a published copy could not prove it is what a lean run
// verified; it hands over to the lean binary (HandOver).
var ErrNotVerified = errors.New("published build not verified in this boot")

// Published is what the note of a published copy says.
type Published struct {
	Name string // the published name
	Lean string // the lean binary that published it ("" without a note)
	b    Build
	id   string // the lean binary's identity when it published
}

// VerifyPublished proves that this process runs a published copy that a
// lean run verified in this boot, the lean binary unchanged since: exe is
// this process's executable. The error wraps ErrNotVerified and says why;
// Lean is set whenever the note could be read, for HandOver.
func VerifyPublished(exe string) (Published, error) {
	return newVerifier().verifyPublished(exe)
}

func (v verifier) verifyPublished(exe string) (Published, error) {
	dir, name := filepath.Split(exe)
	p := Published{Name: name}
	if err := publishable(name); err != nil {
		return p, fmt.Errorf("%w: %w", ErrNotVerified, err)
	}
	d, err := OpenTrustedDir(filepath.Clean(dir), false)
	if err != nil {
		return p, fmt.Errorf("%w: %w", ErrNotVerified, err)
	}
	defer d.Close()
	p, ok := parseNote(name, readNote(d, name))
	if !ok {
		return p, fmt.Errorf("%w: no note of what %s is (%s%s)", ErrNotVerified, exe, PublishedPrefix, name)
	}
	if err := v.provePublished(d, p, exe); err != nil {
		return p, fmt.Errorf("%w: %w", ErrNotVerified, err)
	}
	return p, nil
}

// provePublished: the running file is the one the name holds, a trusted
// executable whose record says a lean run hashed it in this boot as it is
// now, and the lean binary is the one that published it.
func (v verifier) provePublished(d *os.File, p Published, exe string) error {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("open this executable: %w", err)
	}
	defer self.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(self.Fd()), &st); err != nil {
		return err
	}
	if pst, err := statAt(d, p.Name); err != nil || !sameFile(pst, st) {
		return fmt.Errorf("%s is no longer the file running", exe)
	}
	if err := trustedExe(exe, st); err != nil {
		return err
	}
	boot, err := v.bootID()
	if err != nil || boot == "" {
		return fmt.Errorf("boot ID: %v", err)
	}
	if readRecord(d, p.b) != recordOf(p.b, boot, st) {
		return fmt.Errorf("no record of %s hashed in this boot as it is now", exe)
	}
	var lst unix.Stat_t
	if err := unix.Stat(p.Lean, &lst); err != nil || identity(lst) != p.id {
		return fmt.Errorf("the lean binary %s changed since it published %s", p.Lean, exe)
	}
	return nil
}

// parseNote reads a note: the digest (64 hex digits), the lean binary's
// absolute path and its identity.
func parseNote(name, note string) (Published, bool) {
	p := Published{Name: name}
	var id strings.Builder
	for line := range strings.Lines(note) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		switch k {
		case "digest":
			p.b.Digest = v
		case "lean":
			p.Lean = v
		case "dev", "inode", "size", "mtime", "ctime":
			id.WriteString(line)
		}
	}
	p.id = id.String()
	if len(p.b.Digest) != 64 || strings.Trim(p.b.Digest, "0123456789abcdef") != "" || !filepath.IsAbs(p.Lean) {
		return Published{Name: name}, false
	}
	return p, true
}

// HandOver replaces this process, a published copy that could not verify
// itself, with the lean binary at lean running the same command: argv
// with lean as its program. The lean binary verifies the cache, repairs
// it and publishes again. lean must be an absolute path to a file of a
// trusted owner that nobody else may write.
func HandOver(lean string, argv, env []string) error {
	if !filepath.IsAbs(lean) {
		return fmt.Errorf("hand over to %q: not an absolute path", lean)
	}
	fd, err := unix.Open(lean, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("hand over to %s: %w", lean, err)
	}
	f := os.NewFile(uintptr(fd), lean)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("hand over to %s: %w", lean, err)
	}
	if err := trustedExe(lean, st); err != nil {
		return fmt.Errorf("hand over: %w", err)
	}
	args := append([]string{lean}, argv[1:]...)
	// The descriptor checked, not the name, which could change after it.
	return fmt.Errorf("hand over to %s: %w", lean, unix.Exec(fmt.Sprintf("/proc/self/fd/%d", fd), args, env))
}
