package integration

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// sh runs a command in the node namespace and fails the test if it fails.
func (n *node) sh(t *testing.T, argv ...string) string {
	t.Helper()
	o, err := runIn(t.Context(), n.path(), nil, nil, argv...)
	if err != nil || o.exit != 0 {
		t.Fatalf("%v: %v %s", argv, err, o)
	}
	return string(o.stdout)
}

// TestEC2WarmPutsBackTheNodeSide: whatever flushes a table, takes an ENI's
// link down or deletes a pod's rules between passes (systemd-networkd,
// amazon-ec2-net-utils, an operator), the next warm pass puts it back,
// without any EC2 call. Then the ENI is detached behind eni-cni's back:
// the next pass notices, its pod's address is flagged lost in `list`.
func TestEC2WarmPutsBackTheNodeSide(t *testing.T) {
	en := newEC2Node(t, ec2fake.Config{})
	en.primaryLink(t)
	nw := newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": 5}, nil)
	pods := newPods(t, 6)
	nw.mustWarm(t)
	var onPrimary []ec2Pod
	for _, p := range pods[:5] {
		onPrimary = append(onPrimary, en.addEC2(t, nw, p))
	}
	if o, made := en.warmAttaching(t, nw); o.exit != 0 || len(made) != 1 {
		t.Fatalf("warm attaching a second ENI: %s, links %v", o, made)
	}
	sec := en.attached()[1]
	link, table := en.linkOf(t, sec.ID), sec.DeviceIndex+1
	subnet := netip.MustParsePrefix(ec2SubnetCIDR)
	s := en.addEC2(t, nw, pods[5])
	if s.eni.ID != sec.ID {
		t.Fatalf("pod %s on %s, want the second ENI %s", s.pod.name, s.eni.ID, sec.ID)
	}
	p := onPrimary[0]
	// No more top-up: a third ENI would wait for a link nobody adds here.
	nw.setConf(t, func(c map[string]any) { c["pool"].(map[string]any)["warmIPTarget"] = 0 })

	// Break the node side in every way the pass must repair.
	tbl := strconv.Itoa(table)
	en.sh(t, "ip", "route", "flush", "table", tbl)
	en.sh(t, "ip", "link", "set", link, "down", "mtu", "1500")
	en.sh(t, "ip", "rule", "del", "from", s.ip.String(), "lookup", tbl, "priority", strconv.Itoa(rulePrioFromPod))
	en.sh(t, "ip", "rule", "del", "to", p.ip.String(), "lookup", "main", "priority", strconv.Itoa(rulePrioToPod))
	if err := ping(t.Context(), p.pod.path(), s.ip); err == nil {
		t.Log("note: pods still reach each other with the node side broken")
	}

	before := en.fake.Calls()
	o := nw.mustWarm(t)
	if d := callsDelta(before, en.fake.Calls()); len(d) != 0 {
		t.Errorf("repairing the node side made EC2 calls %s", formatCalls(d))
	}
	out := string(o.stdout) + string(o.stderr)
	for _, want := range []string{"put back", link, "rule from " + s.ip.String(), "rule to " + p.ip.String()} {
		if !strings.Contains(out, want) {
			t.Errorf("warm output lacks %q:\n%s", want, out)
		}
	}
	en.assertENITable(t, link, table, subnet)
	assertSecondaryPod(t, en.node, s)
	assertPrimaryPod(t, en.node, p)
	for _, c := range []struct {
		from string
		to   netip.Addr
	}{{p.pod.path(), s.ip}, {s.pod.path(), p.ip}} {
		if err := ping(t.Context(), c.from, c.to); err != nil {
			t.Errorf("after the repair: %v", err)
		}
	}

	// A pass with nothing broken repairs nothing and says nothing of it.
	if o := nw.mustWarm(t); strings.Contains(string(o.stdout), "put back") {
		t.Errorf("a pass over an intact node repaired something: %s", o.stdout)
	}

	// The ENI is detached by someone else.
	if err := en.fake.DetachENI(sec.ID); err != nil {
		t.Fatal(err)
	}
	o = nw.warm(t)
	out = string(o.stdout) + string(o.stderr)
	if !strings.Contains(out, sec.ID+" was detached") || !strings.Contains(out, s.ip.String()) {
		t.Errorf("warm after the detach did not say so: %s", o)
	}
	lo, err := runIn(t.Context(), nw.node.path(), nil, nil, pluginBin, "list", "--json", "--config", nw.confFile)
	if err != nil || lo.exit != 0 {
		t.Fatalf("list: %v %s", err, lo)
	}
	var l struct {
		Lost []struct {
			IP  string `json:"ip"`
			ENI string `json:"eni"`
			Pod string `json:"pod"`
		} `json:"lost"`
	}
	if err := json.Unmarshal(lo.stdout, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Lost) != 1 || l.Lost[0].IP != s.ip.String() || l.Lost[0].ENI != sec.ID || !strings.Contains(l.Lost[0].Pod, s.pod.name) {
		t.Errorf("list --json lost: %+v, want %s of %s (%s)", l.Lost, s.ip, sec.ID, s.pod.name)
	}
	text, _ := runIn(t.Context(), nw.node.path(), nil, nil, pluginBin, "list", "--config", nw.confFile)
	if !strings.Contains(string(text.stdout), "LOST: "+s.ip.String()) {
		t.Errorf("list does not flag %s:\n%s", s.ip, text.stdout)
	}
	for _, a := range append(onPrimary, s) {
		nw.del(t, a.pod, "")
	}
}

// TestEC2SNATOnAddAndOff: with snat on, warm installs the chain matching
// pod sources only; after a reboot (the nat table is empty, the store says
// the chain was made in another boot) the first ADD installs it before any
// warm pass; turning snat off makes the next pass remove it.
func TestEC2SNATOnAddAndOff(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("iptables not installed")
	}
	en := newEC2Node(t, ec2fake.Config{})
	en.primaryLink(t)
	nw := newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": 2}, map[string]any{"snat": true})
	pods := newPods(t, 1)
	nw.mustWarm(t)
	nat := func() string { return en.sh(t, "iptables", "-t", "nat", "-S") }
	primary := en.fake.PrimaryENI()
	got := nat()
	for _, want := range []string{"-N ENI-CNI-SNAT", "-j ENI-CNI-SNAT", "-d " + ec2VPCCIDR, "-s " + primary.PrimaryIP + "/32", "-s " + ec2SubnetCIDR, "--to-source " + primary.PrimaryIP} {
		if !strings.Contains(got, want) {
			t.Errorf("nat table after warm lacks %q:\n%s", want, got)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if strings.Contains(l, "-j SNAT") && !strings.Contains(l, "-s "+ec2SubnetCIDR) {
			t.Errorf("SNAT rule not limited to pod sources: %s", l)
		}
	}

	// "Reboot": the nat table is empty, the store remembers another boot.
	en.sh(t, "iptables", "-t", "nat", "-F")
	en.sh(t, "iptables", "-t", "nat", "-X", "ENI-CNI-SNAT")
	var st map[string]any
	if err := json.Unmarshal(nw.stateBytes(t), &st); err != nil {
		t.Fatal(err)
	}
	st["ec2"].(map[string]any)["snatBoot"] = "a-previous-boot"
	b, _ := json.Marshal(st)
	if err := os.WriteFile(nw.statePath(), b, 0o600); err != nil {
		t.Fatal(err)
	}
	en.addEC2(t, nw, pods[0])
	if got := nat(); !strings.Contains(got, "-j ENI-CNI-SNAT") || !strings.Contains(got, "--to-source "+primary.PrimaryIP) {
		t.Errorf("the first ADD after a reboot did not install the chain:\n%s", got)
	}

	nw.setConf(t, func(c map[string]any) { c["snat"] = false })
	if o := nw.mustWarm(t); !strings.Contains(string(o.stdout), "snat is off") {
		t.Errorf("warm with snat off: %s", o.stdout)
	}
	if got := nat(); strings.Contains(got, "ENI-CNI-SNAT") {
		t.Errorf("snat off left the chain:\n%s", got)
	}
	nw.del(t, pods[0], "")
}
