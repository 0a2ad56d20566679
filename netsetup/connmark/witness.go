package connmark

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A witness says, in one string, which packet-filter tables the node has
// right now, without running iptables: warm's settled pass spent more CPU
// on the one `iptables -S` of Intact (a dynamically linked C program that
// loads its extensions) than on anything else it does. If the witness
// taken before a listing that said yes equals the witness now, nothing the
// listing read can have changed, and IntactSince skips it.
//
// It covers both back ends the node's iptables may write, without knowing
// which one that is:
//   - nf_tables: the ruleset generation, which the kernel bumps on every
//     committed change to any table of the network namespace;
//   - the legacy mangle table: a SHA-256 of the whole table as the kernel
//     hands it to iptables-legacy (IPT_SO_GET_ENTRIES), with the packet and
//     byte counters, which traffic moves, zeroed.
//
// A back end that is not there is written as absent (it takes a change to
// make it present, which the string then shows: nf_tables a module not
// loaded, which is not loaded to ask; no legacy mangle table, which is not
// created to ask); one that is there but cannot be read, or whose presence
// cannot be told, makes the whole witness "", which never matches. The
// network namespace (its cookie, unique in a boot, or its inode where the
// kernel has no cookies) and the boot bind it: a generation counts from
// zero again in a new namespace.

// ipt_getinfo and ipt_get_entries of linux/netfilter_ipv4/ip_tables.h.
const (
	iptSoGetInfo    = 64 // IPT_SO_GET_INFO
	iptSoGetEntries = 65 // IPT_SO_GET_ENTRIES
	iptNameLen      = 32
	iptInfoLen      = iptNameLen + 4 + 5*4 + 5*4 + 4 + 4
	iptEntriesHdr   = 40 // name, size, padding to the entries' 8-byte alignment
	// In struct ipt_entry: next_offset, and the counters (two u64).
	iptNextOffset = 90
	iptCounters   = 96
	iptCountersTo = 112

	sizeofNfgenmsg = 4      // struct nfgenmsg
	nlaTypeMask    = 0x3fff // ^(NLA_F_NESTED | NLA_F_NET_BYTEORDER)
)

// witness is the node's tables as they are, for spec s on link primary,
// or "" when they cannot be told.
func witness(s Spec, primary string) string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	netns, err := netnsID()
	if err != nil {
		return ""
	}
	gen, err := nftGeneration()
	if err != nil {
		return ""
	}
	mangle, err := legacyMangle()
	if err != nil {
		return ""
	}
	return fmt.Sprintf("connmark intact\nspec %s %s %#x\nprimary %s\nboot %s\nnetns %s\nnftables %s\nlegacy mangle %s\n",
		s.PrimaryMAC, s.VethPrefix, s.mark(), primary, strings.TrimSpace(string(boot)), netns, gen, mangle)
}

// netnsID names this network namespace for the boot.
func netnsID() (string, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	cookie := make([]byte, 8)
	if err := getsockopt(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE, cookie); err == nil {
		return fmt.Sprintf("cookie %d", binary.NativeEndian.Uint64(cookie)), nil
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("inode %d:%d", st.Dev, st.Ino), nil
}

// nftGeneration asks nf_tables for its ruleset generation (NFT_MSG_GETGEN).
func nftGeneration() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	switch nfTablesModule("/", unix.ByteSliceToString(u.Release[:])) {
	case moduleUnloaded:
		return "absent", nil // no ruleset without the module
	case moduleUnknown:
		return "", errors.New("cannot tell whether nf_tables is loaded")
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if errors.Is(err, unix.EPROTONOSUPPORT) {
		return "absent", nil // no nfnetlink in this kernel: no nf_tables either
	}
	if err != nil {
		return "", fmt.Errorf("netfilter netlink socket: %w", err)
	}
	defer unix.Close(fd)
	req := make([]byte, unix.SizeofNlMsghdr+sizeofNfgenmsg)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETGEN)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[8:], 1)
	req[unix.SizeofNlMsghdr] = unix.AF_UNSPEC
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return "", fmt.Errorf("ask nf_tables for its generation: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return "", fmt.Errorf("read nf_tables' generation: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil || len(msgs) == 0 {
		return "", fmt.Errorf("read nf_tables' generation: %d bytes: %v", n, err)
	}
	m := msgs[0]
	if m.Header.Type == unix.NLMSG_ERROR {
		// Even a kernel without nf_tables: no way to tell it from a
		// failure, so no witness (the listing runs).
		var code int32
		if len(m.Data) >= 4 {
			code = -int32(binary.NativeEndian.Uint32(m.Data))
		}
		return "", fmt.Errorf("nf_tables' generation: %w", unix.Errno(code))
	}
	if len(m.Data) < sizeofNfgenmsg {
		return "", errors.New("nf_tables' generation: short answer")
	}
	attrs, err := parseAttrs(m.Data[sizeofNfgenmsg:])
	if err != nil {
		return "", err
	}
	id, ok := attrs[unix.NFTA_GEN_ID]
	if !ok || len(id) != 4 {
		return "", errors.New("nf_tables' generation: no NFTA_GEN_ID")
	}
	return fmt.Sprintf("generation %d", binary.BigEndian.Uint32(id)), nil
}

type moduleState int

const (
	moduleUsable   moduleState = iota // built in, or loaded
	moduleUnloaded                    // a loadable module, not loaded now
	moduleUnknown
)

// nfTablesModule says whether nf_tables may be asked: asking a kernel whose
// nf_tables is a module not loaded would load it (netfilter modules load
// on demand), which listing a node's legacy iptables never did. Such a
// kernel has no nf_tables ruleset; when it cannot be told, there is no
// witness and the table is listed. root is "/" but in tests; release is
// the running kernel's.
func nfTablesModule(root, release string) moduleState {
	mods, err := os.ReadFile(filepath.Join(root, "proc/modules"))
	if errors.Is(err, os.ErrNotExist) {
		return moduleUsable // a kernel without loadable modules
	}
	if err != nil {
		return moduleUnknown
	}
	if strings.Contains("\n"+string(mods), "\nnf_tables ") {
		return moduleUsable
	}
	if _, err := os.Stat(filepath.Join(root, "sys/module/nf_tables")); err == nil {
		return moduleUsable
	}
	builtin, err := os.ReadFile(filepath.Join(root, "lib/modules", release, "modules.builtin"))
	switch {
	case err != nil:
		return moduleUnknown
	case strings.Contains(string(builtin), "/nf_tables.ko"):
		return moduleUsable
	}
	return moduleUnloaded
}

// parseAttrs reads netlink attributes (type → payload).
func parseAttrs(b []byte) (map[uint16][]byte, error) {
	out := map[uint16][]byte{}
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b))
		if l < unix.SizeofRtAttr || l > len(b) {
			return nil, fmt.Errorf("netlink attribute of %d bytes in %d", l, len(b))
		}
		out[binary.NativeEndian.Uint16(b[2:])&nlaTypeMask] = b[unix.SizeofRtAttr:l]
		b = b[min((l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1), len(b)):]
	}
	return out, nil
}

// legacyMangle hashes the legacy mangle table. It asks the kernel only
// when /proc lists the table: asking for a table that is not loaded would
// load it (and with it hooks on every packet).
func legacyMangle() (string, error) {
	names, err := os.ReadFile("/proc/thread-self/net/ip_tables_names")
	if errors.Is(err, os.ErrNotExist) {
		return "absent", nil // no ip_tables module in this kernel
	}
	if err != nil {
		return "", err
	}
	if !strings.Contains("\n"+string(names), "\nmangle\n") {
		return "absent", nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return "", fmt.Errorf("raw socket for the legacy mangle table: %w", err)
	}
	defer unix.Close(fd)
	info := make([]byte, iptInfoLen)
	copy(info, "mangle")
	if err := getsockopt(fd, unix.IPPROTO_IP, iptSoGetInfo, info); err != nil {
		return "", fmt.Errorf("legacy mangle table: %w", err)
	}
	size := int(binary.NativeEndian.Uint32(info[iptInfoLen-4:]))
	entries := make([]byte, iptEntriesHdr+size)
	copy(entries, "mangle")
	binary.NativeEndian.PutUint32(entries[iptNameLen:], uint32(size))
	if err := getsockopt(fd, unix.IPPROTO_IP, iptSoGetEntries, entries); err != nil {
		// EAGAIN: the table changed between the two calls.
		return "", fmt.Errorf("legacy mangle table: %w", err)
	}
	table := entries[iptEntriesHdr:]
	for off := 0; off+iptCountersTo <= len(table); {
		clear(table[off+iptCounters : off+iptCountersTo])
		next := int(binary.NativeEndian.Uint16(table[off+iptNextOffset:]))
		if next == 0 {
			break
		}
		off += next
	}
	h := sha256.New()
	h.Write(info[iptNameLen:]) // hooks, underflows, number of entries, size
	h.Write(table)
	return fmt.Sprintf("sha256 %x", h.Sum(nil)), nil
}

// getsockopt is getsockopt(2) into b, which x/sys/unix offers only for
// fixed types.
func getsockopt(fd, level, opt int, b []byte) error {
	l := uint32(len(b))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt),
		uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
