package netsetup

import (
	"errors"
	"fmt"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// unwirePod removes the pod side of a.IfName that the kernel does not
// remove with the link: its `from` rule. A pod whose
// namespace is gone, or a path that is not a namespace other than the
// node's, has nothing to undo.
func unwirePod(a Attachment) error {
	podNS, err := netns.GetFromPath(a.Netns)
	if err != nil {
		return nil
	}
	defer podNS.Close()
	if isOwnNetns(podNS) {
		return nil
	}
	h, err := netlinksafe.NewHandleAt(podNS)
	if err != nil {
		return nil
	}
	defer h.Close()
	var errs []error
	rules, err := retryDump(func() ([]netlink.Rule, error) { return h.RuleList(unix.AF_INET) })
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list rules in %s: %w", a.Netns, err))...)
	}
	want := hostNet(a.IP).String()
	for i := range rules {
		r := &rules[i]
		if r.Priority != PodRulePriority || r.Src == nil || r.Src.String() != want {
			continue
		}
		if err := h.RuleDel(r); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete rule from %s lookup %d in %s: %w", a.IP, r.Table, a.Netns, err))
		}
	}
	return errors.Join(errs...)
}

// isOwnNetns: DEL does not check its CNI_NETNS, and the node's own
// namespace has no pod side to undo.
func isOwnNetns(ns netns.NsHandle) bool {
	self, err := netns.Get()
	if err != nil {
		return true
	}
	defer self.Close()
	return self.Equal(ns)
}
