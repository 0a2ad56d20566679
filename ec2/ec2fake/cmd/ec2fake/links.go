package main

import (
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// hypervisor makes the link of each ENI the fake attaches appear in this
// process's network namespace, as the instance's kernel would see a
// hot-plugged ENI: a veth named prefix<device> with the ENI's MAC, its peer
// in another namespace (the "VPC"), both up; the node end is left down, as
// after a real attach. It removes the links it made when closed.
type hypervisor struct {
	prefix string
	peer   netns.NsHandle
	errOut io.Writer

	mu   sync.Mutex
	made []string
}

func newHypervisor(prefix, peerNetns string, errOut io.Writer) (*hypervisor, error) {
	peer, err := netns.GetFromPath(peerNetns)
	if err != nil {
		return nil, fmt.Errorf("--links-peer-netns %s: %w", peerNetns, err)
	}
	return &hypervisor{prefix: prefix, peer: peer, errOut: errOut}, nil
}

func (h *hypervisor) attach(e ec2fake.ENI) {
	if err := h.makeLink(e); err != nil {
		fmt.Fprintf(h.errOut, "ec2fake: link of %s: %v\n", e.ID, err)
	}
}

func (h *hypervisor) makeLink(e ec2fake.ENI) error {
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s%d", h.prefix, e.DeviceIndex)
	h.mu.Lock()
	defer h.mu.Unlock()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, HardwareAddr: mac}, PeerName: name + "p", PeerNamespace: netlink.NsFd(h.peer)}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	h.made = append(h.made, name)
	ph, err := netlink.NewHandleAt(h.peer)
	if err != nil {
		return err
	}
	defer ph.Close()
	p, err := ph.LinkByName(name + "p")
	if err != nil {
		return err
	}
	return ph.LinkSetUp(p)
}

func (h *hypervisor) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, name := range h.made {
		if l, err := netlink.LinkByName(name); err == nil {
			netlink.LinkDel(l)
		}
	}
	h.peer.Close()
}
