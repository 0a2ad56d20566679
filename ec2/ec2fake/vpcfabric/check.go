package vpcfabric

import (
	"bytes"
	"cmp"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// The source/destination check of a port is a chain in the router's raw
// PREROUTING (before conntrack, so nothing else sees a dropped packet): a
// RETURN per source the ENI owns, counting what it lets through, then a
// counted DROP.

// CheckChain is the chain of a port's source check.
func CheckChain(port string) string { return "SRC-CHECK-" + port }

// run runs a command in the network namespace at nsPath.
func run(nsPath string, stdin []byte, args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"--net=" + nsPath, "--"}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s in %s: %w: %s", strings.Join(args, " "), nsPath, err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

func sysctls(nsPath string, kv ...string) error {
	_, err := run(nsPath, nil, append([]string{"sysctl", "-qw"}, kv...)...)
	return err
}

// restore applies iptables-restore lines to one table without flushing it.
func restore(nsPath, table string, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	in := "*" + table + "\n" + strings.Join(lines, "\n") + "\nCOMMIT\n"
	_, err := run(nsPath, []byte(in), "iptables-restore", "--noflush", "-w", "5")
	return err
}

func openCheck(router, port string) error {
	c := CheckChain(port)
	return restore(router, "raw", []string{":" + c + " - [0:0]", "-A " + c + " -j DROP", "-A PREROUTING -i " + port + " -j " + c})
}

func closeCheck(router, port string) error {
	c := CheckChain(port)
	return restore(router, "raw", []string{"-D PREROUTING -i " + port + " -j " + c, "-F " + c, "-X " + c})
}

// allow lets the sources add through the port's check and no longer del.
func allow(router, port string, add, del []netip.Prefix) error {
	var lines []string
	for _, q := range add {
		lines = append(lines, "-I "+CheckChain(port)+" 1 -s "+q.String()+" -j RETURN")
	}
	for _, q := range del {
		lines = append(lines, "-D "+CheckChain(port)+" -s "+q.String()+" -j RETURN")
	}
	return restore(router, "raw", lines)
}

// chainCounts reads a table's rules with their counters: per chain, the
// packets of each rule's source (an invalid prefix for rules without one)
// and of its DROP.
type chainCounts struct {
	passed  map[netip.Prefix]int
	dropped int
}

func readCounts(nsPath, table string) (map[string]*chainCounts, error) {
	out, err := run(nsPath, nil, "iptables", "-w", "5", "-t", table, "-v", "-S")
	if err != nil {
		return nil, err
	}
	counts := map[string]*chainCounts{}
	for _, l := range strings.Split(out, "\n") {
		fs := strings.Fields(l)
		if len(fs) < 2 || fs[0] != "-A" {
			continue
		}
		cc := counts[fs[1]]
		if cc == nil {
			cc = &chainCounts{passed: map[netip.Prefix]int{}}
			counts[fs[1]] = cc
		}
		var src netip.Prefix
		pkts := -1
		for i := 2; i+1 < len(fs); i++ {
			switch fs[i] {
			case "-s":
				src, _ = netip.ParsePrefix(fs[i+1])
			case "-c":
				pkts, _ = strconv.Atoi(fs[i+1])
			}
		}
		switch {
		case pkts < 0:
		case strings.HasSuffix(l, "-j DROP"):
			cc.dropped += pkts
		case src.IsValid():
			cc.passed[src] += pkts
		}
	}
	return counts, nil
}

func (f *Fabric) dropsOf(port string) (int, error) {
	counts, err := readCounts(f.cfg.Router, "raw")
	if err != nil {
		return 0, err
	}
	if cc := counts[CheckChain(port)]; cc != nil {
		return cc.dropped, nil
	}
	return 0, nil
}

// PortCounters is one ENI's source check.
type PortCounters struct {
	ENI       string `json:"eni"`
	Instance  string `json:"instance,omitempty"`
	Port      string `json:"port"`
	Dropped   int    `json:"dropped"`
	Unplugged bool   `json:"unplugged,omitempty"` // detached or deleted: Dropped is what it had
	// PassedFrom is how many packets of each of the ENI's sources the
	// check let through.
	PassedFrom map[netip.Prefix]int `json:"-"`
}

// Passed is how many packets with source a the check let through.
func (c PortCounters) Passed(a netip.Addr) int { return c.PassedFrom[netip.PrefixFrom(a, 32)] }

// Counters is every drop the fabric counted.
type Counters struct {
	Ports []PortCounters `json:"ports"`
	// Internet is what was sent toward the internet from an address
	// without a public mapping.
	Internet int `json:"internet"`
}

// Dropped is the sum of every drop: 0 on a healthy fabric.
func (c Counters) Dropped() int {
	n := c.Internet
	for _, p := range c.Ports {
		n += p.Dropped
	}
	return n
}

// Port returns the counters of ENI eniID's port.
func (c Counters) Port(eniID string) (PortCounters, bool) {
	for _, p := range c.Ports {
		if p.ENI == eniID {
			return p, true
		}
	}
	return PortCounters{}, false
}

// Counters reads every check's counters.
func (f *Fabric) Counters() (Counters, error) {
	raw, err := readCounts(f.cfg.Router, "raw")
	if err != nil {
		return Counters{}, fmt.Errorf("read the source checks: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out Counters
	for id, p := range f.ports {
		pc := PortCounters{ENI: id, Instance: p.instance, Port: p.name, Dropped: f.gone[id], PassedFrom: map[netip.Prefix]int{}}
		if cc := raw[CheckChain(p.name)]; cc != nil {
			pc.Dropped += cc.dropped
			pc.PassedFrom = cc.passed
		}
		out.Ports = append(out.Ports, pc)
	}
	for id, d := range f.gone {
		if f.ports[id] == nil {
			out.Ports = append(out.Ports, PortCounters{ENI: id, Dropped: d, Unplugged: true})
		}
	}
	slices.SortFunc(out.Ports, func(a, b PortCounters) int {
		return cmp.Or(cmp.Compare(a.Instance, b.Instance), cmp.Compare(a.Port, b.Port), cmp.Compare(a.ENI, b.ENI))
	})
	if f.internet {
		filter, err := readCounts(f.cfg.Router, "filter")
		if err != nil {
			return Counters{}, fmt.Errorf("read the internet gateway's check: %w", err)
		}
		if cc := filter[internetChain]; cc != nil {
			out.Internet = cc.dropped
		}
	}
	return out, nil
}
