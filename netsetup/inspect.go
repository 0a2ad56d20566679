package netsetup

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// VethView is one of the node's host veths named like ours, as `eni-cni
// repair` sees it: the addresses routed through it and, when the pod's
// namespace can be found, the pod end's name and the namespace's path.
type VethView struct {
	Name       string
	IPs        []netip.Addr // /32 routes through it in the main table
	PeerIfName string       // "" if the pod's namespace was not found
	Netns      string       // "" if not found
}

// NetnsDirs are where runtimes bind-mount pod network namespaces
// (containerd and CRI-O: /var/run/netns/cni-<uuid>, /run is the same).
var NetnsDirs = []string{"/run/netns", "/var/run/netns"}

// InspectVeths lists our host veths with their routed addresses and, where
// it can, their pod ends. The pod end is found through the veth's
// link-netnsid: each bind-mounted namespace in dirs is asked for its id,
// and the one that matches holds the peer at the veth's peer index. The
// host veth's name is a hash of (sandbox ID, pod interface name), so the
// pod end's real name is what lets repair match sandboxes whose interface
// is not the usual eth0.
func InspectVeths(prefix string, dirs []string) ([]VethView, error) {
	links, err := netlinksafe.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var names []string
	byName := map[string]netlink.Link{}
	for _, l := range links {
		if l.Type() == "veth" && IsOurVeth(prefix, l.Attrs().Name) {
			names = append(names, l.Attrs().Name)
			byName[l.Attrs().Name] = l
		}
	}
	routes, err := OurRoutes(names)
	if err != nil {
		return nil, err
	}
	ips := map[string][]netip.Addr{}
	for _, r := range routes {
		ips[r.Veth] = append(ips[r.Veth], r.IP)
	}
	spaces := namespacesByID(dirs)
	out := make([]VethView, 0, len(names))
	for _, n := range names {
		v := VethView{Name: n, IPs: ips[n]}
		a := byName[n].Attrs()
		if path, ok := spaces[a.NetNsID]; ok && a.NetNsID >= 0 {
			v.Netns = path
			v.PeerIfName = linkNameIn(path, a.ParentIndex)
		}
		out = append(out, v)
	}
	return out, nil
}

// namespacesByID maps the netnsid this namespace uses for each namespace
// bind-mounted in dirs to its path. Unreadable entries are skipped: this is
// a best effort for a repair tool.
func namespacesByID(dirs []string) map[int]string {
	out := map[int]string{}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			h, err := netns.GetFromPath(path)
			if err != nil {
				continue
			}
			id, err := netlink.GetNetNsIdByFd(int(h))
			h.Close()
			if err == nil && id >= 0 {
				if _, dup := out[id]; !dup {
					out[id] = path
				}
			}
		}
	}
	return out
}

func linkNameIn(nsPath string, index int) string {
	h, err := netns.GetFromPath(nsPath)
	if err != nil {
		return ""
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return ""
	}
	defer nh.Close()
	l, err := nh.LinkByIndex(index)
	if err != nil {
		return ""
	}
	return l.Attrs().Name
}
