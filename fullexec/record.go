package fullexec

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Hashing the 45 MB cached copy was nearly all the CPU of a gc or warm run
// on a settled node (every minute, for a file that had not changed), so the
// digest is computed once per file and boot and recorded beside the file,
// in .verified-<digest16>. A run trusts the record, and skips the hash,
// only when all of these hold:
//   - the record is a regular file opened without following a symlink, of
//     root (or the caller) and writable by nobody else, in the cache
//     directory, whose own checks (root's, writable by its owner only, every
//     directory above it safe) mean nobody else can create, replace or
//     rename anything in it;
//   - it names the embedded digest, the boot it was written in, and the
//     identity fstat gives of the descriptor just opened (O_NOFOLLOW): its
//     device, inode, size, mtime and ctime to the nanosecond. A replaced
//     file is a new inode with a new ctime; any write, truncation, chmod,
//     chown, link or rename of the same file sets its ctime to the current
//     time, and nothing sets it to another (utimensat sets mtime and atime,
//     and ctime to now; an old ctime would take setting the clock back,
//     which takes root);
//   - the file's ctime was at least racyWindow older than the moment the
//     hash began. File systems with one-second timestamps, and the coarse
//     clock the kernel stamps them with, could give a write just after the
//     hash the ctime the hash saw; a file that young is hashed again next
//     run instead of recorded (the racy-git rule).
//
// The boot ID bounds a record to one boot: a change made offline (another
// system mounting the disk can set any timestamp) or damage a crash left is
// caught by the first run after boot, at the cost of one hash per boot.
// Anything unexpected — no record, another boot, a mismatch, an unreadable
// boot ID — means the full hash, as before; a record is never what makes a
// file fail. Read-only commands read records but write none.
//
// Why a record and not something else: without the hash only the owner and
// mode checks would remain, which a wrong copy another root tool or a
// damaged disk left would pass; a once-per-boot marker (in /run) would miss
// a change made during the boot; fs-verity would have the kernel do this,
// but needs a file system and kernel set up for it. The embedded bytes are
// never hashed at run time: `make build` stamps their digest, and they are
// part of the binary root installed.

// recordPrefix names the records: recordPrefix + the first 16 hex digits.
const recordPrefix = ".verified-"

// racyWindow is how much older than the hash a file's ctime must be for
// the hash to be recorded.
const racyWindow = 2 * time.Second

// maxRecord bounds what is read of a record; a real one is ~200 bytes.
const maxRecord = 1024

func recordName(b Build) string { return recordPrefix + b.short() }

// verifier proves a cached copy has the build's digest: by its record, or
// by hashing it. Its functions are fields so tests can count hashes and
// move the clock and the boot.
type verifier struct {
	digest func(*os.File) (string, error)
	bootID func() (string, error)
	now    func() time.Time
}

func newVerifier() verifier {
	return verifier{digest: digestOf, bootID: readBootID, now: time.Now}
}

func readBootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b)), err
}

// verifyDigest proves f, of identity st, has b's digest. A hash it had to
// compute is recorded when write allows and the file is old enough.
func (v verifier) verifyDigest(d, f *os.File, b Build, st unix.Stat_t, write bool) error {
	boot, err := v.bootID()
	want := ""
	if err == nil && boot != "" {
		want = recordOf(b, boot, st)
		if readRecord(d, b) == want {
			return nil
		}
	}
	start := v.now()
	got, err := v.digest(f)
	if err != nil {
		return err
	}
	if got != b.Digest {
		return fmt.Errorf("%s has digest %s, the build %s", f.Name(), got, b.Digest)
	}
	if write && want != "" && time.Unix(0, st.Ctim.Nano()).Add(racyWindow).Before(start) {
		// Best effort: without a record the next run hashes again.
		_ = writeAt(d, recordName(b), tempName(b, ".verified"), []byte(want), 0o600, func(*os.File) error { return nil })
	}
	return nil
}

// recordOf is the record that vouches for a file of identity st having
// b's digest in boot. It is compared whole, never parsed.
func recordOf(b Build, boot string, st unix.Stat_t) string {
	return fmt.Sprintf("eni-cni-full verified\ndigest %s\nboot %s\ndev %d\ninode %d\nsize %d\nmtime %d\nctime %d\n",
		b.Digest, boot, st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano())
}

// readRecord returns b's record in d, or "" when there is none that only
// a trusted owner could have written.
func readRecord(d *os.File, b Build) string { return readTrusted(d, recordName(b)) }

// readTrusted returns the small file name in d, or "" when it is not a
// regular file, opened without following a symlink, that only a trusted
// owner could have written.
func readTrusted(d *os.File, name string) string {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil ||
		st.Mode&unix.S_IFMT != unix.S_IFREG || !trustedOwner(st.Uid) || st.Mode&0o022 != 0 || st.Size > maxRecord {
		return ""
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRecord))
	if err != nil {
		return ""
	}
	return string(data)
}
