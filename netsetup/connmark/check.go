package connmark

import "fmt"

// Check lists what the node lacks of Spec, in words for `eni-cni doctor`
// (nothing when all is in place). It changes nothing. An error means it
// could not look, not that something is missing.
func Check(s Spec) (missing []string, err error) {
	primary, ipt, err := s.onNode()
	if err != nil {
		return nil, err
	}
	exists, err := ipt.ChainExists("mangle", Chain)
	if err != nil {
		return nil, fmt.Errorf("look for chain %s: %w", Chain, err)
	}
	if !exists {
		missing = append(missing, "iptables mangle chain "+Chain)
	} else {
		if ok, err := holds(ipt, Rules(s, primary)); err != nil {
			return nil, err
		} else if !ok {
			missing = append(missing, fmt.Sprintf("the rules of %s for %s and %s+", Chain, primary, s.VethPrefix))
		}
		if ok, err := ipt.Exists("mangle", "PREROUTING", jump...); err != nil {
			return nil, fmt.Errorf("look for the PREROUTING jump: %w", err)
		} else if !ok {
			missing = append(missing, "the jump to "+Chain+" from mangle PREROUTING")
		}
	}
	rules, err := ourRules()
	if err != nil {
		return nil, err
	}
	if m := s.mark(); !hasRule(rules, m) {
		missing = append(missing, fmt.Sprintf("ip rule %d: fwmark %#x/%#x lookup main", RulePriority, m, m))
	}
	if !rpFilterOK(primary) {
		missing = append(missing, fmt.Sprintf("loose rp_filter on %s (is %s, all %s)", primary, rpFilter(primary), rpFilter("all")))
	}
	return missing, nil
}
