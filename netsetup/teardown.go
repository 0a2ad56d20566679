package netsetup

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/fault"
)

// Attachment names what Setup made for one pod address on the node and,
// when Netns is set, in the pod.
type Attachment struct {
	HostVeth string
	IP       netip.Addr
	// Netns and IfName name the pod's end, when DEL knows them: the
	// pod-side `from` rule and a default route the interface carries
	// outlive the link unless removed or handed on. Either may be gone.
	Netns, IfName string
}

// Teardown removes what Setup made for a pod's addresses, by name: first
// the host routes and the rules (`to` and `from`, in whatever table), then
// the host veth (the kernel deletes its pod end with it). It needs no netns
// and succeeds when things are already gone, so DEL can run it twice.
func Teardown(hostVeth string, ips ...netip.Addr) error {
	a := make([]Attachment, 0, len(ips))
	for _, ip := range ips {
		a = append(a, Attachment{HostVeth: hostVeth, IP: ip})
	}
	return errors.Join(Unroute(a), DeleteVeths(hostVeth))
}

// Unroute removes the host routes and rules of the attachments (one per
// address: a dual-stack pod has two), with one listing of the rules of
// each family for all of them, and the pod side of those whose
// pod namespace is named and still there (unwirePod). Afterwards nothing on the node
// routes their addresses to the old veths, so the addresses may be released
// while the (slow) veth deletion is still running.
func Unroute(atts []Attachment) error {
	ips := make(map[netip.Addr]bool, len(atts))
	var errs []error
	v6 := false
	for _, a := range atts {
		if !a.IP.IsValid() {
			continue
		}
		ips[a.IP] = true
		v6 = v6 || a.IP.Is6()
		if a.Netns != "" {
			if err := unwirePod(a); err != nil {
				errs = append(errs, err)
			}
		}
		if err := DeleteRoute(PodRoute{IP: a.IP, Veth: a.HostVeth}); err != nil {
			errs = append(errs, fmt.Errorf("delete route %s dev %s: %w", a.IP, a.HostVeth, err))
		}
	}
	if len(ips) == 0 {
		return errors.Join(errs...)
	}
	fault.Point("unroute:after-routes")
	rules, err := netlinksafe.RuleList(unix.AF_INET)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list rules: %w", err))...)
	}
	if v6 {
		rules6, err := netlinksafe.RuleList(unix.AF_INET6)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("list ipv6 rules: %w", err))...)
		}
		rules = append(rules, rules6...)
	}
	for i := range rules {
		r := &rules[i]
		ip, ok := ruleIP(r)
		if !ok || !ips[ip] || !isOurRule(r, ip) {
			continue
		}
		if err := netlink.RuleDel(r); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete rule for %s prio %d: %w", ip, r.Priority, err))
		}
	}
	return errors.Join(errs...)
}

// DeleteRules removes every rule of ours for ip: `to ip` and `from ip`, in
// any table, at our priorities.
func DeleteRules(ip netip.Addr) error {
	return Unroute([]Attachment{{IP: ip}})
}

func ruleIP(r *netlink.Rule) (netip.Addr, bool) {
	n := r.Dst
	if r.Priority == RulePriorityFromPod {
		n = r.Src
	}
	if n == nil {
		return netip.Addr{}, false
	}
	return addrOf(n.IP)
}

// DeleteVeths deletes host veths by name (their pod ends go with them);
// ones already gone are skipped. Each deletion waits in the kernel for RCU
// grace periods (15–30 ms); several are deleted in one request by putting
// them in a link group of their own and deleting the group, so a GC of
// fifty pods waits once, not fifty times.
func DeleteVeths(names ...string) error {
	var links []netlink.Link
	var errs []error
	for _, n := range names {
		if n == "" {
			continue
		}
		l, err := netlinksafe.LinkByName(n)
		switch {
		case err == nil && l.Type() != "veth":
			// A name from a state file is data: never let it delete
			// the node's eth0 or an ENI.
			errs = append(errs, fmt.Errorf("refusing to delete %s: it is a %s link, not a veth", n, l.Type()))
		case err == nil:
			links = append(links, l)
		case !isNotFound(err):
			errs = append(errs, fmt.Errorf("find %s: %w", n, err))
		}
	}
	if len(links) > 1 {
		if err := deleteGroup(links); err == nil {
			return errors.Join(errs...)
		}
	}
	for _, l := range links {
		if err := netlink.LinkDel(l); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s: %w", l.Attrs().Name, err))
		}
	}
	return errors.Join(errs...)
}

// deleteGroup moves links into a fresh link group and deletes the group
// with one RTM_DELLINK. The group number is random in a range nothing
// assigns by convention; a collision would need another program to use the
// same 24-bit number in the same instant.
func deleteGroup(links []netlink.Link) error {
	group := uint32(0x7e000000) | rand.Uint32N(1<<24)
	for _, l := range links {
		if err := netlink.LinkSetGroup(l, int(group)); err != nil {
			return fmt.Errorf("set group of %s: %w", l.Attrs().Name, err)
		}
	}
	req := nl.NewNetlinkRequest(unix.RTM_DELLINK, unix.NLM_F_ACK)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_GROUP, nl.Uint32Attr(group)))
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("delete link group %d: %w", group, err)
	}
	return nil
}
