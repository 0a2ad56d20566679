package netsetup

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ForgetFlows deletes the node's conntrack entries of the connections ips
// started (their original source). A masqueraded flow's entry lives as
// long as its peer keeps sending (each reply refreshes it: a UDP stream
// never ends), so once the address is freed and given to a new pod, the
// cooldown long over, the old pod's replies would be de-masqueraded to
// it. A kernel without conntrack's netlink interface tracks nothing to
// forget.
func ForgetFlows(ips ...netip.Addr) error {
	var filters4, filters6 []netlink.CustomConntrackFilter
	for _, ip := range ips {
		f := &netlink.ConntrackFilter{}
		if err := f.AddIP(netlink.ConntrackOrigSrcIP, ip.AsSlice()); err != nil {
			return fmt.Errorf("conntrack filter of %s: %w", ip, err)
		}
		if ip.Is4() {
			filters4 = append(filters4, f)
		} else {
			filters6 = append(filters6, f)
		}
	}
	for _, fam := range []struct {
		family  netlink.InetFamily
		filters []netlink.CustomConntrackFilter
	}{{unix.AF_INET, filters4}, {unix.AF_INET6, filters6}} {
		if len(fam.filters) == 0 {
			continue
		}
		_, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, fam.family, fam.filters...)
		if errors.Is(err, netlink.ErrDumpInterrupted) {
			// The table changed under the dump: once more, whole.
			_, err = netlink.ConntrackDeleteFilters(netlink.ConntrackTable, fam.family, fam.filters...)
		}
		if err != nil && !errors.Is(err, unix.EPROTONOSUPPORT) {
			return fmt.Errorf("delete conntrack entries of %v: %w", ips, err)
		}
	}
	return nil
}
