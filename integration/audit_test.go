package integration

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// The invariants every crash must keep, checked by the fault walk
// (fault_test.go) after the call that follows a crash, and by the stress
// test (stress_test.go) after every round:
//   - the store is readable (by the binary itself: `eni-cni list`);
//   - no address is allocated twice, or allocated while still cooling, and
//     no two pods carry the same address;
//   - every allocation has its wiring (host veth, /32 route through it,
//     `to` rule), and every pod the runtime still runs holds its address;
//   - nothing is wired without a record: no veth, /32 route or rule of
//     ours that no allocation explains, and no pod the runtime deleted
//     keeps an interface;
//   - no temporary state file survives a gc;
//   - on EC2, after a clean warm pass, the store's pool and ENIs are what
//     EC2 says the instance holds, nothing is marked unusable or dirty, and
//     every ENI eni-cni created is attached with DeleteOnTermination.

// findings collects invariant violations; a round of checks counts them.
type findings struct {
	checks     int
	violations []string
}

func (f *findings) check(ok bool, format string, args ...any) {
	f.checks++
	if !ok {
		f.violations = append(f.violations, fmt.Sprintf(format, args...))
	}
}

// report turns the violations into test errors prefixed with when.
func (f *findings) report(t *testing.T, when string) {
	t.Helper()
	for _, v := range f.violations {
		t.Errorf("%s: %s", when, v)
	}
}

// expectation is what the runtime (the test) knows: the pods it runs, with
// the address their last successful ADD returned, and the pods it deleted.
type expectation struct {
	alive map[*pod]netip.Addr // invalid address: not known (ADD never returned)
	gone  []*pod
	// eniLinks are node veths that stand for ENIs (ec2Node), not pods.
	eniLinks map[string]bool
	// noTemp is set after a gc, which removes leftover temporary files.
	noTemp bool
}

// diskState is the state file as the audit reads it, independently of the
// binary's decoder.
type diskState struct {
	Allocations []struct {
		ContainerID string     `json:"containerID"`
		IfName      string     `json:"ifname"`
		IP          netip.Addr `json:"ip"`
		HostVeth    string     `json:"hostVeth"`
		ENI         string     `json:"eni"`
	} `json:"allocations"`
	Cooling []struct {
		IP    netip.Addr `json:"ip"`
		Until time.Time  `json:"until"`
	} `json:"cooling"`
	EC2 *struct {
		InstanceID string `json:"instanceID"`
		Dirty      bool   `json:"dirty"`
		ENIs       []struct {
			ID string `json:"id"`
		} `json:"enis"`
		Addrs []struct {
			IP       netip.Addr `json:"ip"`
			ENI      string     `json:"eni"`
			Unusable bool       `json:"unusable"`
			Lost     bool       `json:"lost"`
		} `json:"addrs"`
		Pending []json.RawMessage `json:"pending"`
	} `json:"ec2"`
}

// auditNetwork checks the invariants of nw's store against the node's
// kernel state and the pods' namespaces. bin is the binary whose `list`
// must read the store.
func auditNetwork(t *testing.T, bin string, nw *network, e expectation) *findings {
	t.Helper()
	f := &findings{}
	o, err := runIn(t.Context(), nw.node.path(), nil, nil, bin, "list", "--json", "--config", nw.confFile)
	f.check(err == nil && o.exit == 0, "store unreadable: eni-cni list: %v %s", err, o)
	var st diskState
	if b := nw.stateBytes(t); b != nil {
		err := json.Unmarshal(b, &st)
		f.check(err == nil, "state file does not decode: %v", err)
	}
	byIP := map[netip.Addr]string{}
	byCID := map[string]int{}
	for i, a := range st.Allocations {
		if other, dup := byIP[a.IP]; dup {
			f.check(false, "address %s allocated to both %s and %s", a.IP, short(other), short(a.ContainerID))
		}
		byIP[a.IP] = a.ContainerID
		byCID[a.ContainerID] = i
	}
	now := time.Now()
	for _, c := range st.Cooling {
		if holder, ok := byIP[c.IP]; ok && now.Before(c.Until) {
			f.check(false, "address %s allocated to %s while cooling until %s", c.IP, short(holder), c.Until)
		}
	}
	auditHost(t, nw.node, st, e, f)
	auditPods(t, st, byCID, e, f)
	if e.noTemp {
		tmp, _ := filepath.Glob(filepath.Join(nw.stateDir, "state.json.tmp-*"))
		f.check(len(tmp) == 0, "temporary state files survive a gc: %v", tmp)
	}
	return f
}

// auditHost: every allocation wired, nothing of ours unexplained.
func auditHost(t *testing.T, n *node, st diskState, e expectation, f *findings) {
	t.Helper()
	veths := n.veths(t)
	names := map[int]string{}
	for name, l := range veths {
		names[l.Attrs().Index] = name
	}
	vethIP := map[string]netip.Addr{}
	for _, a := range st.Allocations {
		vethIP[a.HostVeth] = a.IP
	}
	routeTo := map[netip.Addr]string{}
	for _, r := range n.mainRoutes(t) {
		if r.Dst == nil {
			continue
		}
		if ones, _ := r.Dst.Mask.Size(); ones != 32 {
			continue
		}
		ip, _ := netip.AddrFromSlice(r.Dst.IP.To4())
		dev := names[r.LinkIndex]
		routeTo[ip] = dev
		want, ok := vethIP[dev]
		f.check(ok && want == ip, "route %s dev %s: no allocation explains it", ip, devName(dev, r))
	}
	toRule := map[netip.Addr]bool{}
	for _, r := range n.podRules(t) {
		sel := r.Dst
		if r.Priority == rulePrioFromPod {
			sel = r.Src
		}
		if sel == nil {
			continue
		}
		ip, _ := netip.AddrFromSlice(sel.IP.To4())
		if r.Priority == rulePrioToPod {
			toRule[ip] = true
		}
		_, ok := byIPOf(st)[ip]
		f.check(ok, "rule %s: no allocation explains it", r)
	}
	for name := range veths {
		if e.eniLinks[name] {
			continue
		}
		_, ok := vethIP[name]
		f.check(ok, "veth %s: no allocation explains it", name)
	}
	for _, a := range st.Allocations {
		_, hasVeth := veths[a.HostVeth]
		f.check(hasVeth, "allocation %s (%s): no host veth %s", short(a.ContainerID), a.IP, a.HostVeth)
		f.check(routeTo[a.IP] == a.HostVeth, "allocation %s (%s): route is dev %q, want %s", short(a.ContainerID), a.IP, routeTo[a.IP], a.HostVeth)
		f.check(toRule[a.IP], "allocation %s (%s): no rule to %s lookup main", short(a.ContainerID), a.IP, a.IP)
	}
}

func byIPOf(st diskState) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for _, a := range st.Allocations {
		m[a.IP] = true
	}
	return m
}

func devName(dev string, r netlink.Route) string {
	if dev == "" {
		return fmt.Sprintf("ifindex %d", r.LinkIndex)
	}
	return dev
}

// auditPods: pods the runtime runs hold their address, inside and in the
// store; pods it deleted hold nothing; no two pods share an address.
func auditPods(t *testing.T, st diskState, byCID map[string]int, e expectation, f *findings) {
	t.Helper()
	seen := map[netip.Addr]string{}
	alive := make([]*pod, 0, len(e.alive))
	for p := range e.alive {
		alive = append(alive, p)
	}
	sort.Slice(alive, func(i, j int) bool { return alive[i].name < alive[j].name })
	for _, p := range alive {
		want := e.alive[p]
		i, ok := byCID[p.containerID]
		f.check(ok, "pod %s (%s) is running but holds no allocation", p.name, short(p.containerID))
		if !ok {
			continue
		}
		a := st.Allocations[i]
		f.check(!want.IsValid() || a.IP == want, "pod %s: allocation holds %s, its ADD returned %s", p.name, a.IP, want)
		got := podAddrs(t, p)
		f.check(slices.Equal(got, []netip.Addr{a.IP}), "pod %s: %s has addresses %v, its allocation is %s", p.name, p.ifName, got, a.IP)
		for _, ip := range got {
			if other, dup := seen[ip]; dup {
				f.check(false, "pods %s and %s both carry %s", other, p.name, ip)
			}
			seen[ip] = p.name
		}
	}
	for _, p := range e.gone {
		_, ok := byCID[p.containerID]
		f.check(!ok, "pod %s (%s) was deleted but still holds an allocation", p.name, short(p.containerID))
		if _, err := os.Stat(p.path()); err == nil {
			l := p.links(t)
			f.check(len(l) == 1 && l[0] == "lo", "pod %s was deleted but has links %v", p.name, l)
		}
	}
}

// podAddrs returns the IPv4 addresses of the pod's interface (none when
// it has no such interface).
func podAddrs(t *testing.T, p *pod) []netip.Addr {
	t.Helper()
	h := openHandle(t, p.path())
	defer h.Close()
	link, err := h.LinkByName(p.ifName)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range dump(t, "pod addresses", func() ([]netlink.Addr, error) { return h.AddrList(link, netlink.FAMILY_V4) }) {
		ip, _ := netip.AddrFromSlice(a.IP.To4())
		out = append(out, ip)
	}
	return out
}

// auditEC2 compares the store with EC2's view (the fake's) after a warm
// pass that was not interrupted.
func auditEC2(t *testing.T, nw *network, fake *ec2fake.Server, f *findings) {
	t.Helper()
	var st diskState
	if err := json.Unmarshal(nw.stateBytes(t), &st); err != nil || st.EC2 == nil {
		f.check(false, "ec2 state unreadable or without its ec2 section: %v", err)
		return
	}
	src := st.EC2
	instance := src.InstanceID
	assigned := map[netip.Addr]string{}
	attached := map[string]bool{}
	for _, e := range fake.ENIs() {
		if e.Tags["eni-cni/instance-id"] != "" {
			f.check(e.InstanceID == instance && e.DeviceIndex >= 0, "ENI %s created by eni-cni is not attached (status %s): leaked", e.ID, e.Status)
			f.check(e.DeviceIndex < 0 || e.DeleteOnTermination, "ENI %s created by eni-cni is attached without DeleteOnTermination", e.ID)
		}
		if e.InstanceID != instance || e.DeviceIndex < 0 {
			continue
		}
		attached[e.ID] = true
		for _, s := range e.SecondaryIPs {
			assigned[netip.MustParseAddr(s)] = e.ID
		}
		for _, s := range e.Prefixes {
			p := netip.MustParsePrefix(s)
			for a := p.Addr(); p.Contains(a); a = a.Next() {
				assigned[a] = e.ID
			}
		}
	}
	known := map[string]bool{}
	for _, e := range src.ENIs {
		known[e.ID] = true
		f.check(attached[e.ID], "store knows ENI %s, which EC2 does not show attached", e.ID)
	}
	for id := range attached {
		f.check(known[id], "ENI %s is attached but unknown to the store", id)
	}
	inPool := map[netip.Addr]bool{}
	for _, p := range src.Addrs {
		inPool[p.IP] = true
		f.check(assigned[p.IP] == p.ENI, "pool address %s (ENI %s): EC2 says %q", p.IP, p.ENI, assigned[p.IP])
		f.check(!p.Unusable && !p.Lost, "pool address %s still unusable or lost after a clean warm", p.IP)
	}
	var missing []string
	for ip, id := range assigned {
		if !inPool[ip] {
			missing = append(missing, ip.String()+" on "+id)
		}
	}
	sort.Strings(missing)
	f.check(len(missing) == 0, "EC2 assigned addresses the store does not know (leaked): %s", strings.Join(missing, ", "))
	f.check(!src.Dirty, "store still marked dirty after a clean warm")
	f.check(len(src.Pending) == 0, "pending ENIs after a clean warm: %s", src.Pending)
	for _, a := range st.Allocations {
		f.check(assigned[a.IP] != "", "allocation %s holds %s, which EC2 no longer assigns", short(a.ContainerID), a.IP)
	}
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
