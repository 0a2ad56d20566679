package netsetup

import (
	"net"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestFlushTableTakesOnlyThatTable(t *testing.T) {
	n := newNS(t)
	err := n.Do(func(ns.NetNS) error {
		la := netlink.NewLinkAttrs()
		la.Name = "enitest0"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "enitest1"}); err != nil {
			t.Fatal(err)
		}
		link, err := netlink.LinkByName("enitest0")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
		_, subnet, _ := net.ParseCIDR("10.98.16.0/20")
		for _, table := range []int{2, 3, unix.RT_TABLE_MAIN} {
			r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: subnet, Scope: netlink.SCOPE_LINK, Table: table}
			if err := netlink.RouteAdd(r); err != nil {
				t.Fatalf("add route to table %d: %v", table, err)
			}
		}
		if n, err := TableRoutes(2); err != nil || n != 1 {
			t.Fatalf("table 2: %d routes, %v", n, err)
		}
		for range 2 {
			if err := FlushTable(2); err != nil {
				t.Fatalf("flush: %v", err)
			}
		}
		for table, want := range map[int]int{2: 0, 3: 1} {
			if n, _ := TableRoutes(table); n != want {
				t.Errorf("table %d: %d routes, want %d", table, n, want)
			}
		}
		main, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN, LinkIndex: link.Attrs().Index}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF)
		if len(main) != 1 {
			t.Errorf("main table routes of the link: %v", main)
		}
		for _, bad := range []int{0, unix.RT_TABLE_MAIN, unix.RT_TABLE_LOCAL, unix.RT_TABLE_DEFAULT} {
			if err := FlushTable(bad); err == nil {
				t.Errorf("FlushTable(%d) accepted", bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
