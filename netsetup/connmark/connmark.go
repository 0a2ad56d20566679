// Package connmark owns what keeps replies of connections that entered the
// primary ENI on the primary ENI: NodePort, load balancers in instance mode
// and hostPort traffic DNATed to a pod whose address lives on a secondary
// ENI. Without it the pod's reply follows the pod's `from IP lookup <ENI
// table>` rule out of the secondary ENI and, once conntrack has undone the
// DNAT, carries the primary ENI's address: the VPC's source/destination
// check drops it, since an ENI may send only from its own addresses.
//
// Three pieces, the AWS VPC CNI's answer written anew:
//   - a mangle chain, jumped to first from PREROUTING, that sets a bit of
//     the connection mark on traffic entering the primary ENI for one of
//     its own addresses and copies that bit to the packet mark of traffic
//     coming out of pod veths (the replies);
//   - `ip rule fwmark MARK/MARK lookup main` at a priority before the pods'
//     `from` rules, so marked replies route by the main table, out of the
//     primary ENI;
//   - loose reverse-path filtering on the primary ENI: the DNATed first
//     packet arrives there while the pod's `from` rule routes its source
//     out of the secondary ENI, which strict filtering drops.
//
// The rules only set marks and never end a packet's walk, so they hold with
// kube-proxy in iptables or nftables mode (connection marks are the
// kernel's, whichever front end wrote the rules). It shells out to iptables
// through coreos/go-iptables, as netsetup/snat does.
package connmark

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/coreos/go-iptables/iptables"

	"github.com/eni-cni/eni-cni/lockfile"
)

// LockName is the file in the state directory Ensure holds while it
// rewrites the chain: the first ADDs of a boot run it in parallel, and
// with warm's pass, and iptables has no transaction that spans a check and
// the change it decides (two creates of the chain, two jumps, the chain
// cleared by one while the other appends: its rules twice).
const LockName = "connmark.lock"

// Chain is the mangle chain eni-cni owns. Everything in it is rewritten
// when it drifts; nothing else on the node is touched but the one jump.
const Chain = "ENI-CNI-CONNMARK"

// DefaultMark is the bit used unless Spec says otherwise: the AWS VPC CNI's
// (AWS_VPC_K8S_CNI_CONNMARK), so a node moved from it keeps the meaning of
// the bit. It stays clear of kube-proxy (0x4000 masquerade, 0x8000 drop),
// Calico (0xffff0000), Cilium (0x0f00 and the upper half) and Istio's 1337
// (0x539).
const DefaultMark uint32 = 0x80

// RulePriority is the priority of the fwmark rule: after the pods' `to IP
// lookup main` (512), before their `from IP lookup <table>` (1536); the VPC
// CNI's own choice for the same rule.
const RulePriority = 1024

// ErrNoLink reports a primary ENI whose MAC no link of the node carries.
var ErrNoLink = errors.New("no link with the primary ENI's MAC")

const comment = "eni-cni: replies of connections that entered the primary ENI leave by it"

// Spec is what Ensure sets up.
type Spec struct {
	PrimaryMAC string // the primary ENI's MAC: its link is found by it
	VethPrefix string // host veth prefix of the pods ("eni")
	Mark       uint32 // the connection-mark bit(s); 0 means DefaultMark
}

func (s Spec) mark() uint32 {
	if s.Mark == 0 {
		return DefaultMark
	}
	return s.Mark
}

func (s Spec) valid() error {
	if s.PrimaryMAC == "" || s.VethPrefix == "" {
		return fmt.Errorf("connmark needs the primary ENI's MAC and the veth prefix (have %q, %q)", s.PrimaryMAC, s.VethPrefix)
	}
	return nil
}

// Rules is what Ensure wants in Chain for the primary link named primary.
// The two rules match disjoint input interfaces, so their order is free.
func Rules(s Spec, primary string) [][]string {
	m := fmt.Sprintf("%#x", s.mark())
	return [][]string{
		// --limit-iface-in: only addresses of the primary link itself, not
		// any of the node's.
		{"-i", primary, "-m", "addrtype", "--dst-type", "LOCAL", "--limit-iface-in",
			"-m", "comment", "--comment", comment, "-j", "CONNMARK", "--set-xmark", m + "/" + m},
		{"-i", s.VethPrefix + "+", "-m", "comment", "--comment", comment,
			"-j", "CONNMARK", "--restore-mark", "--nfmask", m, "--ctmask", m},
	}
}

// lockWait is how long, in seconds, iptables waits for the xtables lock
// (iptables-legacy; iptables-nft takes none) before it gives up with exit
// 4. kube-proxy holds it for seconds, a stuck holder for ever: warm must
// not keep warm.lock that long (no later pass would fill the pool), nor an
// ADD its pod. The next pass tries again.
const lockWait = 5

func newIPTables() (*iptables.IPTables, error) {
	return iptables.New(iptables.IPFamily(iptables.ProtocolIPv4), iptables.Timeout(lockWait))
}

// onNode checks s and finds what Check and Ensure work on: the primary
// link's name and iptables.
func (s Spec) onNode() (primary string, ipt *iptables.IPTables, err error) {
	if err := s.valid(); err != nil {
		return "", nil, err
	}
	if primary, err = linkNameByMAC(s.PrimaryMAC); err != nil {
		return "", nil, err
	}
	if ipt, err = newIPTables(); err != nil {
		return "", nil, fmt.Errorf("iptables: %w", err)
	}
	return primary, ipt, nil
}

var jump = []string{"-m", "comment", "--comment", comment, "-j", Chain}

// Ensure makes the node hold the chain, its jump, the fwmark rule and loose
// rp_filter on the primary link, and says what it had to (re)make: nothing
// when all was in place (a list and a few checks), so warm can run it every
// pass and heal a flushed mangle table or a lost rule. It holds LockName in
// stateDir while it works.
func Ensure(stateDir string, s Spec) (changed []string, err error) {
	primary, ipt, err := s.onNode()
	if err != nil {
		return nil, err
	}
	lk, err := lock(stateDir)
	if err != nil {
		return nil, err
	}
	defer lk.Close()
	changed, err = ensureChain(ipt, Rules(s, primary))
	if err != nil {
		return changed, err
	}
	if ok, err := ensureLooseRPFilter(primary); err != nil {
		return changed, err
	} else if ok {
		changed = append(changed, "loose rp_filter on "+primary)
	}
	// The rule last: EnsureOnce takes it as the sign that all the rest
	// was done.
	if ok, err := ensureRule(s.mark()); err != nil {
		return changed, err
	} else if ok {
		changed = append(changed, fmt.Sprintf("ip rule fwmark %#x/%#x lookup main", s.mark(), s.mark()))
	}
	return changed, nil
}

// lock takes LockName in stateDir; closing the file releases it.
func lock(stateDir string) (*lockfile.File, error) {
	if stateDir == "" {
		return nil, errors.New("connmark needs the state directory for its lock")
	}
	path := filepath.Join(stateDir, LockName)
	lk, err := lockfile.Open(path, os.O_CREATE|os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := lk.Lock(); err != nil {
		lk.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return lk, nil
}

// EnsureOnce is Ensure for the first ADD of a boot: when the fwmark rule is
// there (Ensure writes it last, and nothing of this survives a reboot) it
// returns after one rule dump, without running iptables or taking the
// lock. Keeping the rest in shape is warm's every-pass Ensure.
func EnsureOnce(stateDir string, s Spec) (changed []string, err error) {
	rules, err := ourRules()
	if err != nil {
		return nil, err
	}
	if hasRule(rules, s.mark()) {
		return nil, nil
	}
	return Ensure(stateDir, s)
}

// ensureChain makes the mangle chain hold exactly want and PREROUTING jump
// to it.
func ensureChain(ipt *iptables.IPTables, want [][]string) (changed []string, err error) {
	exists, err := ipt.ChainExists("mangle", Chain)
	if err != nil {
		return nil, fmt.Errorf("look for chain %s: %w", Chain, err)
	}
	if !exists {
		if err := ipt.NewChain("mangle", Chain); err != nil {
			return nil, fmt.Errorf("create chain %s: %w", Chain, err)
		}
	}
	same, err := holds(ipt, want)
	if err != nil {
		return nil, err
	}
	if !same {
		if err := ipt.ClearChain("mangle", Chain); err != nil {
			return nil, fmt.Errorf("clear chain %s: %w", Chain, err)
		}
		for _, r := range want {
			if err := ipt.Append("mangle", Chain, r...); err != nil {
				return []string{"chain " + Chain}, fmt.Errorf("add rule to %s: %w", Chain, err)
			}
		}
		changed = append(changed, "chain "+Chain)
	}
	if ok, err := ipt.Exists("mangle", "PREROUTING", jump...); err != nil {
		return changed, fmt.Errorf("look for the PREROUTING jump: %w", err)
	} else if !ok {
		// First: the chain only sets marks, and a rule before it that
		// accepts a packet (Calico's do) would skip it.
		if err := ipt.Insert("mangle", "PREROUTING", 1, jump...); err != nil {
			return changed, fmt.Errorf("add the PREROUTING jump: %w", err)
		}
		changed = append(changed, "jump from mangle PREROUTING")
	}
	return changed, nil
}

// holds says whether Chain has exactly the rules of want. `iptables -C`
// compares as the kernel sees the rules, so the way iptables prints them
// (quoting, --set-xmark vs --set-mark) does not matter.
func holds(ipt *iptables.IPTables, want [][]string) (bool, error) {
	have, err := ipt.List("mangle", Chain)
	if err != nil {
		return false, fmt.Errorf("list chain %s: %w", Chain, err)
	}
	n := 0
	for _, h := range have {
		if len(h) > 3 && h[:3] == "-A " {
			n++
		}
	}
	if n != len(want) {
		return false, nil
	}
	for _, r := range want {
		ok, err := ipt.Exists("mangle", Chain, r...)
		if err != nil {
			return false, fmt.Errorf("look for a rule of %s: %w", Chain, err)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// Present reports whether any of it is on the node (the chain, or a fwmark
// rule at RulePriority): uninstall says what it will remove before it does.
// Without iptables on the node there is no chain to find (eni-cni made it
// with iptables), only perhaps the rule.
func Present() (bool, error) {
	rules, err := ourRules()
	if err != nil || len(rules) > 0 {
		return len(rules) > 0, err
	}
	ipt, err := newIPTables()
	if err != nil {
		return false, nil
	}
	exists, err := ipt.ChainExists("mangle", Chain)
	if err != nil {
		return false, fmt.Errorf("look for chain %s: %w", Chain, err)
	}
	return exists, nil
}

// Remove takes the jump, the chain and the fwmark rule away. rp_filter is
// left loose: what it was before is not known, and loose is what the
// secondary ENIs have anyway. Nothing to remove is no error, and no change;
// without iptables only the rule can be there.
func Remove() (changed bool, err error) {
	chain, cerr := removeChain()
	n, rerr := removeRules()
	return chain || n > 0, errors.Join(cerr, rerr)
}

func removeChain() (bool, error) {
	ipt, err := newIPTables()
	if err != nil {
		return false, nil // no iptables, no chain of ours
	}
	exists, err := ipt.ChainExists("mangle", Chain)
	if err != nil {
		return false, fmt.Errorf("look for chain %s: %w", Chain, err)
	}
	if !exists {
		return false, nil
	}
	// Every jump: two first ADDs of a boot racing in the Ensure of an
	// earlier release (before LockName) may each have inserted one, and a
	// chain still jumped to cannot be deleted. (A chain without its jump
	// can be there: half an uninstall.)
	for range 16 {
		ok, err := ipt.Exists("mangle", "PREROUTING", jump...)
		if err != nil {
			return true, fmt.Errorf("look for the PREROUTING jump: %w", err)
		}
		if !ok {
			break
		}
		if err := ipt.Delete("mangle", "PREROUTING", jump...); err != nil {
			return true, fmt.Errorf("delete the PREROUTING jump: %w", err)
		}
	}
	if err := ipt.ClearAndDeleteChain("mangle", Chain); err != nil {
		return true, fmt.Errorf("delete chain %s: %w", Chain, err)
	}
	return true, nil
}
