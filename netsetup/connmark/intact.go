package connmark

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// Intact says, cheaply, whether what Ensure makes looks in place: the
// fwmark rule (one rule dump), loose rp_filter on the primary link (a link
// dump and a file read), and in one `iptables -S` of the mangle table the
// chain's number of rules and the jump. warm runs it every pass and Ensure
// (six iptables execs) only when it says no, so a settled node pays one
// exec for a flushed mangle table to heal. It counts the rules and reads
// the input interface of each (a chain made for another veth prefix or
// primary link name marks nothing); the rest of a rule edited in place is
// Check's and Ensure's to find. Without iptables it says no (Ensure then
// reports why it cannot run).
func Intact(s Spec) (bool, error) {
	ok, _, err := IntactSince(s, "")
	return ok, err
}

// IntactSince is Intact for a caller that remembers, where only root
// writes, the witness of its last yes (witness.go): when the node's tables
// are provably the ones that yes listed, the `iptables -S` is skipped; the
// fwmark rule and rp_filter are looked at every time, as by Intact. seen ""
// means no memory. now is the witness to remember after a yes ("" when the
// tables cannot be told apart, so nothing is to be remembered).
func IntactSince(s Spec, seen string) (ok bool, now string, err error) {
	if err := s.valid(); err != nil {
		return false, "", err
	}
	rules, err := ourRules()
	if err != nil || !hasRule(rules, s.mark()) {
		return false, "", err
	}
	primary, err := linkNameByMAC(s.PrimaryMAC)
	if err != nil || !rpFilterOK(primary) {
		return false, "", err
	}
	// Taken before the listing: a change made after it differs from it
	// next time, and the listing runs again.
	now = witness(s, primary)
	if now != "" && now == seen {
		return true, now, nil
	}
	if ok, err = listed(s, primary); !ok || err != nil {
		return false, "", err
	}
	return true, now, nil
}

// listed reads the chain and the jump in one `iptables -S` of the mangle
// table.
func listed(s Spec, primary string) (bool, error) {
	var out bytes.Buffer
	cmd := exec.Command("iptables", "--wait", strconv.Itoa(lockWait), "-t", "mangle", "-S")
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.Is(err, exec.ErrNotFound) || errors.As(err, &exit) {
			return false, nil
		}
		return false, fmt.Errorf("list the mangle table: %w", err)
	}
	return holdsText(out.String(), Rules(s, primary)), nil
}

// holdsText reads `iptables -t mangle -S`: Chain has as many rules as
// want, one for each input interface of want, and PREROUTING jumps to it.
func holdsText(table string, want [][]string) bool {
	have, jumps := 0, false
	ins := map[string]bool{}
	for line := range strings.Lines(table) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "-A "+Chain+" "):
			have++
			if f := strings.Fields(line); len(f) > 3 && f[2] == "-i" {
				ins[f[3]] = true
			}
		case strings.HasPrefix(line, "-A PREROUTING ") && strings.HasSuffix(line, "-j "+Chain):
			jumps = true
		}
	}
	for _, r := range want {
		if len(r) > 1 && r[0] == "-i" && !ins[r[1]] {
			return false
		}
	}
	return have == len(want) && jumps
}
