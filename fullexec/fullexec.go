// Package fullexec owns running the full build that the shipped (lean)
// eni-cni binary carries inside it: from a copy cached on disk, which is
// used only once it is proven to be what root wrote and what the build
// embeds, or else from a sealed in-memory file.
//
// The rules, each against a way to make root run something else:
//   - every directory from / down to the cache is opened without following
//     symlinks and must be owned by root (or the caller) and writable by
//     nobody else (a sticky world-writable directory such as /tmp may sit
//     on the way: others cannot rename what is not theirs in it); the
//     cache directory itself must be writable by its owner only;
//   - the cached file is opened with O_NOFOLLOW, must be a regular file of
//     root (or the caller), not group- or world-writable, of the embedded
//     build's size, and its SHA-256 must be the embedded digest; anything
//     else is replaced, never run;
//   - the digest is computed once per file and boot, not on every run: a
//     record beside the file (record.go) vouches for it while the file
//     opened is the very one that was hashed, unchanged; any change, a
//     reboot, or a record that is not root's alone means hashing again;
//   - what is run is the verified open descriptor (/proc/self/fd/N, as
//     fexecve does), not the name, which could change after the check;
//   - the in-memory fallback is a memfd that is close-on-exec and sealed
//     against writes, shrinking and growing before it is run;
//   - a cache on a noexec mount is detected before anything is written
//     (fstatfs), and a cache whose files the kernel still refuses to run
//     is remembered with a marker, so no run writes 45 MB for nothing;
//   - builds of other versions are removed when a new one is cached.
package fullexec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Build is an executable and the hex SHA-256 digest it must have.
type Build struct {
	// Name tells the builds one binary carries apart in the cache ("full"
	// when empty).
	Name   string
	Data   []byte
	Digest string
	// Siblings are the other builds the same binary carries (their Name
	// and Digest): their cached copies, records and markers are current,
	// not an old version's to remove.
	Siblings []Build
}

// filePrefix starts the names of cached builds: filePrefix + the build's
// name + "-" + the first 16 hex digits of its digest.
const filePrefix = "eni-cni-"

func (b Build) name() string {
	name := b.Name
	if name == "" {
		name = "full"
	}
	return filePrefix + name + "-" + b.short()
}

// CachedBuilds lists the cached builds in dir, of any version.
func CachedBuilds(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, filePrefix+"*"))
}

func (b Build) short() string {
	if len(b.Digest) < 16 {
		return b.Digest
	}
	return b.Digest[:16]
}

// current reports whether a cache entry is the cached copy, record or
// noexec marker of b or of one of its siblings: exactly their names, so
// that a file carrying a current digest under another name (planted, or
// left by hand) goes like any other.
func (b Build) current(entry string) bool {
	for _, s := range append([]Build{b}, b.Siblings...) {
		if s.Digest != "" && (entry == s.name() || entry == recordName(s) || entry == noExecMarker(s)) {
			return true
		}
	}
	return false
}

// Exe is a verified, open executable.
type Exe struct {
	f *os.File
	// Cached is true when it is the on-disk copy, false for a memfd.
	Cached bool
	dir    *os.File // the verified cache directory, for the noexec marker
	build  Build
}

// Path is a name the kernel can exec while e is open, in this process and
// in children it starts: /proc/self/fd/N, which names the verified
// descriptor, not a path someone could swap.
func (e *Exe) Path() string { return fmt.Sprintf("/proc/self/fd/%d", e.f.Fd()) }

// Close releases the descriptors.
func (e *Exe) Close() error {
	if e.dir != nil {
		e.dir.Close()
	}
	return e.f.Close()
}

// Exec replaces the process with e. If the kernel refuses to run the
// cached copy (a noexec mount fstatfs did not show, a security module),
// the refusal is remembered in the cache and the build runs from memory.
func (e *Exe) Exec(argv, env []string) error {
	err := syscall.Exec(e.Path(), argv, env)
	if !e.Cached {
		return fmt.Errorf("exec the full build from memory: %w", err)
	}
	e.MarkNoExec(err)
	mem, merr := Memory(e.build)
	if merr != nil {
		return errors.Join(fmt.Errorf("exec the cached full build: %w", err), merr)
	}
	return mem.Exec(argv, env)
}

// MarkNoExec records that the kernel refused to run the cached copy with
// err, so later runs go to memory without writing the cache again. Only
// refusals of the exec itself count.
func (e *Exe) MarkNoExec(err error) {
	if e.dir == nil || !(errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)) {
		return
	}
	fd, ferr := unix.Openat(int(e.dir.Fd()), noExecMarker(e.build), unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if ferr == nil {
		unix.Close(fd)
	}
	unpublish(e.dir)
}

func noExecMarker(b Build) string { return ".noexec-" + b.short() }

// Open returns the build ready to run: the cached copy in dir once
// verified (written first when missing or not trusted), else a sealed
// memfd. dir "" means no cache. The error of the cache, if any, is only
// returned when memory fails too.
func Open(dir string, b Build) (*Exe, error) { return newVerifier().open(dir, b, true) }

// OpenReadOnly is Open for commands that must write nothing: a cached copy
// that is already there is used once verified; otherwise, or when the
// directory does not exist, the build runs from memory.
func OpenReadOnly(dir string, b Build) (*Exe, error) { return newVerifier().open(dir, b, false) }

func (v verifier) open(dir string, b Build, write bool) (*Exe, error) {
	if len(b.Data) == 0 || len(b.Digest) != sha256.Size*2 {
		return nil, errors.New("no full build embedded (build with make build)")
	}
	var cerr error
	if dir != "" {
		e, err := v.openCached(dir, b, write)
		if err == nil {
			return e, nil
		}
		cerr = err
	}
	e, err := Memory(b)
	if err != nil {
		return nil, errors.Join(err, cerr)
	}
	return e, nil
}

// errNoCache: the cache cannot be used; the build runs from memory.
var errNoCache = errors.New("cache not usable")

func (v verifier) openCached(dir string, b Build, write bool) (*Exe, error) {
	d, err := OpenTrustedDir(dir, write)
	if err != nil {
		return nil, err
	}
	e, err := v.cachedIn(d, b, write)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("%w: %s: %w", errNoCache, dir, err)
	}
	return e, nil
}

func (v verifier) cachedIn(d *os.File, b Build, write bool) (*Exe, error) {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(d.Fd()), &fs); err != nil {
		return nil, err
	}
	noexec := fs.Flags&unix.ST_NOEXEC != 0
	if _, err := statAt(d, noExecMarker(b)); err == nil || noexec {
		// A copy published before the mount became noexec: the timer
		// could not run it, and runs the lean binary only while the name
		// is missing (MarkNoExec's reason).
		if write {
			unpublish(d)
		}
		if noexec {
			return nil, errors.New("mounted noexec")
		}
		return nil, errors.New("the kernel refused to run a copy here before")
	}
	f, err := v.openVerified(d, b, write)
	if err != nil {
		if !write {
			return nil, err
		}
		// The record vouches for the file about to be replaced: gone
		// with it, so nothing depends on the new file's identity
		// differing from the old one's.
		_ = unix.Unlinkat(int(d.Fd()), recordName(b), 0)
		if f, err = writeBuild(d, b); err != nil {
			return nil, err
		}
		removeOthers(d, b)
	}
	return &Exe{f: f, Cached: true, dir: d, build: b}, nil
}

func statAt(d *os.File, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// openVerified opens the cached copy and proves it is the build: opened
// without following a symlink, a regular executable file of a trusted
// owner that nobody else may write, of the right size and digest. With
// write, a digest it had to compute is recorded for later runs.
func (v verifier) openVerified(d *os.File, b Build, write bool) (*os.File, error) {
	fd, err := unix.Openat(int(d.Fd()), b.name(), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", b.name(), err)
	}
	f := os.NewFile(uintptr(fd), b.name())
	st, err := checkFile(f, b)
	if err == nil {
		err = v.verifyDigest(d, f, b, st, write)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkFile checks what fstat shows of the cached copy, on every run.
func checkFile(f *os.File, b Build) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return st, err
	}
	if err := trustedExe(f.Name(), st); err != nil {
		return st, err
	}
	if st.Size != int64(len(b.Data)) {
		return st, fmt.Errorf("%s has %d bytes, the build %d", f.Name(), st.Size, len(b.Data))
	}
	return st, nil
}

// trustedExe: a regular executable file of a trusted owner that nobody
// else may write.
func trustedExe(name string, st unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%s is not a regular file", name)
	case !trustedOwner(st.Uid):
		return fmt.Errorf("%s is owned by uid %d", name, st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others (mode %o)", name, st.Mode&0o7777)
	case st.Mode&0o100 == 0:
		return fmt.Errorf("%s is not executable (mode %o)", name, st.Mode&0o7777)
	}
	return nil
}

// digestOf hashes the file through a small buffer. A read-only mapping
// would save the copy but not the CPU (the hash is nearly all of it: 47
// against 46 ms for 45 MB) and would put all 45 MB in this process's RSS.
func digestOf(f *os.File) (string, error) {
	h := sha256.New()
	buf := make([]byte, 256<<10)
	// A SectionReader: io.CopyBuffer would hand an *os.File to its
	// WriteTo, which ignores buf.
	if _, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, 1<<62), buf); err != nil {
		return "", fmt.Errorf("read %s: %w", f.Name(), err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeBuild puts the build in the cache under its name: a new file only this
// process can have written (O_EXCL, mode 0700), synced, then renamed over
// whatever held the name (a stale copy, a symlink, a foreign file: rename
// replaces the entry and follows nothing). The descriptor returned is a
// read-only reopening of that very file; the writable one is closed before
// anything runs it (the kernel refuses to run a file open for writing).
func writeBuild(d *os.File, b Build) (f *os.File, err error) {
	err = writeAt(d, b.name(), tempName(b, ""), b.Data, 0o700, func(w *os.File) error {
		rfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", w.Fd()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("reopen %s: %w", w.Name(), err)
		}
		f = os.NewFile(uintptr(rfd), b.name())
		return nil
	})
	if err != nil && f != nil {
		f.Close()
	}
	return f, err
}

// tempName is where a file of b is written before its rename: a name
// removeOthers recognises, ending in our PID, so a killed run's leftover
// is known to be abandoned.
func tempName(b Build, kind string) string {
	return fmt.Sprintf(".%s%s-%d", b.name(), kind, os.Getpid())
}

// writeAt replaces name in d with data: a new file only this process can
// have written (O_EXCL, mode), synced, then renamed over whatever held
// the name, and the directory synced. before runs on the written file
// just before the rename.
func writeAt(d *os.File, name, tmp string, data []byte, mode uint32, before func(*os.File) error) (err error) {
	dfd := int(d.Fd())
	_ = unix.Unlinkat(dfd, tmp, 0) // a leftover of a killed run with our PID
	wfd, err := unix.Openat(dfd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	w := os.NewFile(uintptr(wfd), tmp)
	defer func() {
		w.Close()
		if err != nil {
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	if _, err = w.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	// Synced before the rename: after a crash the name must never hold a
	// file of the right size with missing contents (and the digest check
	// would refuse it anyway).
	if err = w.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err = unix.Fchmod(wfd, mode); err != nil { // whatever the umask
		return err
	}
	if err = before(w); err != nil {
		return err
	}
	if err = unix.Renameat(dfd, tmp, dfd, name); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	_ = unix.Fsync(dfd)
	return nil
}

// removeOthers deletes cached builds of other versions, their noexec
// markers and records, and temporary files that killed runs left, once this build is
// cached; the builds of this version (b and its siblings) stay. A running
// process keeps its deleted file.
func removeOthers(d *os.File, b Build) {
	names, err := d.Readdirnames(-1)
	if err != nil {
		return
	}
	mine := tempName(b, "")
	for _, n := range names {
		stale := ((strings.HasPrefix(n, filePrefix) || strings.HasPrefix(n, ".noexec-") || strings.HasPrefix(n, recordPrefix)) && !b.current(n)) ||
			(strings.HasPrefix(n, "."+filePrefix) && n != mine && tempAbandoned(d, n))
		if stale {
			_ = unix.Unlinkat(int(d.Fd()), n, 0)
		}
	}
}

// tempAbandoned: a temporary file whose writer no longer runs (the PID is
// its suffix), so no rename of it is to come.
func tempAbandoned(d *os.File, name string) bool {
	i := strings.LastIndexByte(name, '-')
	var pid int
	if _, err := fmt.Sscan(name[i+1:], &pid); err != nil || pid <= 0 {
		return true
	}
	return unix.Kill(pid, 0) == unix.ESRCH
}

// Memory returns the build in a memfd: close-on-exec, and sealed against
// any change before it can be run.
func Memory(b Build) (*Exe, error) {
	fd, err := unix.MemfdCreate("eni-cni-full", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // kernels before 6.3 know no MFD_EXEC
		fd, err = unix.MemfdCreate("eni-cni-full", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("memfd for the full build: %w", err)
	}
	f := os.NewFile(uintptr(fd), "eni-cni-full")
	if _, err := f.Write(b.Data); err != nil {
		f.Close()
		return nil, fmt.Errorf("write the full build to memfd: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal the full build's memfd: %w", err)
	}
	return &Exe{f: f, build: b}, nil
}

// OpenTrustedDir opens dir, walking from / without following symlinks,
// and checks each directory on the way: owned by root or the caller, not
// writable by others unless sticky (then what lies below must be ours, as
// the next step checks). The last one must be writable by its owner only.
// With create, missing directories are made with mode 0700.
func OpenTrustedDir(dir string, create bool) (*os.File, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%s is not an absolute path", dir)
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(strings.Trim(filepath.Clean(dir), "/"), "/")
	if parts[0] == "" {
		parts = nil
	}
	path := "/"
	for i := 0; ; i++ {
		last := i == len(parts)
		if err := checkDir(fd, path, last); err != nil {
			unix.Close(fd)
			return nil, err
		}
		if last {
			break
		}
		next, err := openDirAt(fd, parts[i], create)
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", filepath.Join(path, parts[i]), err)
		}
		fd, path = next, filepath.Join(path, parts[i])
	}
	// Readdir and fstatfs need a real descriptor, not an O_PATH one.
	rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	unix.Close(fd)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(rfd), dir), nil
}

func openDirAt(parent int, name string, create bool) (int, error) {
	flags := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(parent, name, flags, 0)
	if errors.Is(err, unix.ENOENT) && create {
		if err := unix.Mkdirat(parent, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		fd, err = unix.Openat(parent, name, flags, 0)
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return -1, fmt.Errorf("a symlink or not a directory: %w", err)
	}
	return fd, err
}

func checkDir(fd int, path string, last bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	mode := st.Mode & 0o7777
	switch {
	case !trustedOwner(st.Uid):
		return fmt.Errorf("%s is owned by uid %d, not root", path, st.Uid)
	case mode&0o022 == 0:
		return nil
	case !last && mode&unix.S_ISVTX != 0:
		return nil // /tmp-like: others cannot replace what is ours in it
	}
	return fmt.Errorf("%s is writable by group or others (mode %o)", path, mode)
}

// trustedOwner: root, or the user running us (tests without root).
func trustedOwner(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }
