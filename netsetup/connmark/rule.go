package connmark

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// fwmarkRule is `fwmark mark/mark lookup main` at RulePriority.
func fwmarkRule(mark uint32) *netlink.Rule {
	r := netlink.NewRule()
	r.Mark = mark
	r.Mask = &mark
	r.Table = unix.RT_TABLE_MAIN
	r.Priority = RulePriority
	r.Family = unix.AF_INET
	return r
}

// ourRules are the fwmark rules at RulePriority into main: the only rules
// of that shape eni-cni writes.
func ourRules() ([]netlink.Rule, error) {
	rules, err := netlinksafe.RuleList(unix.AF_INET)
	if err != nil {
		return nil, fmt.Errorf("list ip rules: %w", err)
	}
	var out []netlink.Rule
	for _, r := range rules {
		if r.Priority == RulePriority && r.Table == unix.RT_TABLE_MAIN && r.Mark != 0 && r.Src == nil && r.Dst == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

func hasRule(rules []netlink.Rule, mark uint32) bool {
	for _, r := range rules {
		if r.Mark == mark && r.Mask != nil && *r.Mask == mark {
			return true
		}
	}
	return false
}

// ensureRule adds the fwmark rule if it is missing and says whether it did.
func ensureRule(mark uint32) (bool, error) {
	rules, err := ourRules()
	if err != nil {
		return false, err
	}
	if hasRule(rules, mark) {
		return false, nil
	}
	if err := netlink.RuleAdd(fwmarkRule(mark)); err != nil && !errors.Is(err, unix.EEXIST) {
		return false, fmt.Errorf("add ip rule fwmark %#x/%#x lookup main: %w", mark, mark, err)
	}
	return true, nil
}

// removeRules deletes every rule ourRules finds, whatever its mark (the
// mark may have been another one when it was written).
func removeRules() (int, error) {
	rules, err := ourRules()
	if err != nil {
		return 0, err
	}
	var errs []error
	for i := range rules {
		if err := netlink.RuleDel(&rules[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete ip rule fwmark %#x lookup main: %w", rules[i].Mark, err))
		}
	}
	return len(rules), errors.Join(errs...)
}

func rpFilterPath(link string) string { return "/proc/sys/net/ipv4/conf/" + link + "/rp_filter" }

// ensureLooseRPFilter sets rp_filter 2 on link unless it already filters
// loosely or not at all (rpFilterOK).
func ensureLooseRPFilter(link string) (bool, error) {
	if rpFilterOK(link) {
		return false, nil
	}
	if err := os.WriteFile(rpFilterPath(link), []byte("2"), 0o644); err != nil {
		return false, fmt.Errorf("loose rp_filter on %s: %w", link, err)
	}
	return true, nil
}

// rpFilterOK says whether link filters by reverse path loosely or not at
// all. The kernel uses the higher of the link's and "all"'s values (1
// strict, 2 loose), so the link's own 2 is enough whatever "all" says, and
// a node that filters nothing (both 0) is left as it is.
func rpFilterOK(link string) bool {
	l, errL := strconv.Atoi(rpFilter(link))
	a, errA := strconv.Atoi(rpFilter("all"))
	return errL == nil && errA == nil && max(l, a) != 1
}

func rpFilter(link string) string {
	b, err := os.ReadFile(rpFilterPath(link))
	if err != nil {
		return "unreadable"
	}
	return strings.TrimSpace(string(b))
}

func linkNameByMAC(mac string) (string, error) {
	links, err := netlinksafe.LinkList()
	if err != nil {
		return "", fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		if strings.EqualFold(l.Attrs().HardwareAddr.String(), mac) {
			return l.Attrs().Name, nil
		}
	}
	return "", fmt.Errorf("%w %s", ErrNoLink, mac)
}
