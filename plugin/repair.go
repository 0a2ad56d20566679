package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
)

// `eni-cni repair` rebuilds the store from the node when the state file is
// lost, corrupt or cannot be trusted: the host veths of ours and the /32
// routes through them say which addresses are in use; the CRI runtime's
// listing says which sandbox each veth belongs to (the veth's name is a
// hash of the sandbox ID and the pod interface name, so it is matched, not
// parsed). A readable state file is completed the same way: wiring it does
// not explain is added, nothing it records is removed. The planning is pure
// (planRepair); the CLI, which needs the CRI client, is the root cmd_repair.go.

// repairIfNames are the pod interface names tried for every sandbox when
// the pod's namespace (and with it the real name) cannot be found: kubelet
// always uses eth0; Multus-style extra attachments use net1, net2, ...
var repairIfNames = func() []string {
	names := []string{}
	for i := range 16 {
		names = append(names, fmt.Sprintf("eth%d", i), fmt.Sprintf("net%d", i))
	}
	return names
}()

// repairInput is what repair decides from.
type repairInput struct {
	Network   string
	Prefix    string
	InPool    func(netip.Addr) bool // nil: every address routed through our veths is this network's
	Base      *alloc.State          // the readable state, or what was salvaged
	Veths     []netsetup.VethView
	Sandboxes []gc.Sandbox
	ENIOf     func(netip.Addr) string // the ENI that holds an address (ec2), or nil
	Now       time.Time
	Boot      time.Duration // boot clock at Now (alloc/clock.go)
}

// heldAddr is an address routed through a veth of ours that no listed
// sandbox explains. It is kept out of use for a cooldown rather than
// handed out (its pod may be alive under a name repair cannot derive);
// gc removes the wiring of a veth no allocation explains.
type heldAddr struct {
	IP   netip.Addr
	Veth string
}

// repairPlan is what repair would change.
type repairPlan struct {
	Add       []alloc.Allocation
	Held      []heldAddr
	Conflicts []string           // wiring that contradicts the state: reported, left alone
	Unwired   []alloc.Allocation // allocations of the network with no veth on the node: left to DEL and gc
	Matched   int                // veths matched to a listed sandbox
	Routed    int                // veths of ours routing an address of the network
}

// planRepair decides, without side effects, which allocations the node's
// wiring and the runtime's listing add to in.Base.
func planRepair(in repairInput) repairPlan {
	var plan repairPlan
	owner := map[string]struct {
		sb     gc.Sandbox
		ifName string
	}{}
	names := slices.Clone(repairIfNames)
	for _, v := range in.Veths {
		if v.PeerIfName != "" && !slices.Contains(names, v.PeerIfName) {
			names = append(names, v.PeerIfName)
		}
	}
	for _, sb := range in.Sandboxes {
		for _, n := range names {
			owner[netsetup.HostVethName(in.Prefix, sb.ID, n)] = struct {
				sb     gc.Sandbox
				ifName string
			}{sb, n}
		}
	}
	byIP := map[netip.Addr]alloc.Allocation{}
	byKey := map[alloc.Key]alloc.Allocation{}
	for _, a := range in.Base.Allocations {
		byKey[a.Key] = a
		for _, ip := range a.Wired() {
			byIP[ip] = a
		}
	}
	onNode := map[string]bool{}
	for _, v := range sortedViews(in.Veths) {
		onNode[v.Name] = true
		routed := false
		var egress []netip.Addr
		for _, ip := range v.IPs {
			if alloc.Egress4Range().Contains(ip) {
				egress = append(egress, ip) // once the veth's pod address is known
				continue
			}
			if in.InPool != nil && !in.InPool(ip) {
				continue
			}
			routed = true
			if a, ok := byIP[ip]; ok {
				if a.HostVeth != v.Name {
					plan.Conflicts = append(plan.Conflicts, fmt.Sprintf("%s is routed through %s but allocated to %s (host veth %s)", ip, v.Name, a.Key, a.HostVeth))
				}
				continue
			}
			o, ok := owner[v.Name]
			if !ok {
				plan.Held = append(plan.Held, heldAddr{IP: ip, Veth: v.Name})
				continue
			}
			k := alloc.Key{Network: in.Network, ContainerID: o.sb.ID, IfName: o.ifName}
			if i := secondFamily(plan.Add, k, ip); i >= 0 {
				// A dual-stack pod: its veth routes one address of each
				// family, recorded in one allocation.
				plan.Add[i] = withSecond(plan.Add[i], ip)
				if in.ENIOf != nil {
					// An ec2 pod's ENI is its IPv4 address's, whose
					// table it uses; its IPv6 address is the /80's.
					plan.Add[i].ENI = in.ENIOf(plan.Add[i].IP)
				}
				byIP[ip], byKey[k] = plan.Add[i], plan.Add[i]
				continue
			}
			if a, dup := byKey[k]; dup {
				plan.Conflicts = append(plan.Conflicts, fmt.Sprintf("%s is routed through %s, whose sandbox %s already holds %s", ip, v.Name, k, a.IP))
				continue
			}
			a := alloc.Allocation{
				Key: k, IP: ip, PodNamespace: o.sb.PodNamespace, PodName: o.sb.PodName, PodUID: o.sb.PodUID,
				Netns: v.Netns, HostVeth: v.Name, AllocatedAt: in.Now.UTC(), AllocatedBoot: in.Boot,
			}
			if in.ENIOf != nil {
				a.ENI = in.ENIOf(ip)
			}
			plan.Add = append(plan.Add, a)
			byIP[ip], byKey[k] = a, a
		}
		for _, ip := range egress {
			plan.addEgress4(v.Name, ip, byIP)
		}
		if routed {
			plan.Routed++
			if _, ok := owner[v.Name]; ok {
				plan.Matched++
			}
		}
	}
	for _, a := range in.Base.Allocations {
		if a.Network == in.Network && !onNode[a.HostVeth] {
			plan.Unwired = append(plan.Unwired, a)
		}
	}
	return plan
}

// addEgress4 records ip, an egress address routed through veth, with the
// allocation this repair adds for that veth's IPv6-only pod; one the
// state records already is known, and any other is held back as an
// unexplained pod address is.
func (plan *repairPlan) addEgress4(veth string, ip netip.Addr, byIP map[netip.Addr]alloc.Allocation) {
	if _, ok := byIP[ip]; ok {
		return
	}
	for i, a := range plan.Add {
		if a.HostVeth == veth && a.IP.Is6() && !a.IP6.IsValid() && !a.Egress4.IsValid() {
			plan.Add[i].Egress4 = ip
			byIP[ip] = plan.Add[i]
			return
		}
	}
	plan.Held = append(plan.Held, heldAddr{IP: ip, Veth: veth})
}

// secondFamily finds the allocation this repair adds for k that holds one
// address of the family other than ip's and none of ip's: ip is its second.
func secondFamily(add []alloc.Allocation, k alloc.Key, ip netip.Addr) int {
	for i, a := range add {
		if a.Key == k && !a.IP6.IsValid() && a.IP.Is4() != ip.Is4() {
			return i
		}
	}
	return -1
}

// withSecond gives a its second address, IPv4 in IP and IPv6 in IP6.
func withSecond(a alloc.Allocation, ip netip.Addr) alloc.Allocation {
	if ip.Is4() {
		a.IP, a.IP6 = ip, a.IP
	} else {
		a.IP6 = ip
	}
	return a
}

func sortedViews(vs []netsetup.VethView) []netsetup.VethView {
	out := slices.Clone(vs)
	slices.SortFunc(out, func(a, b netsetup.VethView) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// apply adds the plan to st: the new allocations, and the held addresses
// as cooling entries lasting one cooldown from now.
func (plan repairPlan) apply(st *alloc.State, now time.Time, boot, cooldown time.Duration) {
	st.Allocations = append(st.Allocations, plan.Add...)
	// An address recorded now cools no more; one held now replaces its
	// older entry (a repeated repair), so no address cools twice.
	taken := map[netip.Addr]bool{}
	for _, a := range plan.Add {
		for _, ip := range a.Wired() {
			taken[ip] = true
		}
	}
	for _, h := range plan.Held {
		taken[h.IP] = true
	}
	st.Cooling = slices.DeleteFunc(st.Cooling, func(c alloc.Cooling) bool { return taken[c.IP] })
	for _, h := range plan.Held {
		st.Cooling = append(st.Cooling, alloc.Cooling{IP: h.IP, Until: now.Add(cooldown).UTC(), UntilBoot: boot + cooldown, For: cooldown})
	}
}

// RepairStore is the store repair works on: it reads and sets aside a
// file the normal path refuses.
type RepairStore interface {
	alloc.Store
	Path() string
	ReadRaw() ([]byte, error)
	SetAside(now time.Time) (string, error)
}

// RepairOptions are the command's choices and the node's facts.
type RepairOptions struct {
	DryRun, Force bool
	// Inspect reads the node's veths of ours with their /32 routes and pod
	// ends (netsetup.InspectVeths). It is called with the state lock held.
	Inspect   func() ([]netsetup.VethView, error)
	Sandboxes []gc.Sandbox
	// Discover fills an empty ec2 pool from IMDS (full build); nil leaves
	// it empty for `warm` to fill.
	Discover func(ctx context.Context, st *alloc.State) (string, error)
}

// errRepairRefused: repair will not guess; --force overrides.
var errRepairRefused = errors.New("repair refused")

// repair rebuilds or completes the store (see the comment at the top).
func (p *Plugin) Repair(ctx context.Context, store RepairStore, o RepairOptions, out io.Writer) error {
	lockCtx, cancel := context.WithTimeout(ctx, p.Cfg.LockTimeout)
	defer cancel()
	if err := store.Lock(lockCtx); err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	defer store.Unlock()
	base, rebuild, err := p.repairBase(store, o.Force, out)
	if err != nil {
		return err
	}
	// The node is read under the lock (netlink, fast), so no ADD or DEL
	// changes it between this look and the save: a DEL done just before
	// would otherwise be undone from a stale look (its pod recorded
	// again, its cooldown cancelled). The runtime's listing is read before
	// the lock, as gc reads it: a slow runtime must not stall ADDs. A
	// sandbox it does not list yet cannot have been wired meanwhile: an
	// ADD records its allocation (in base) before it wires, and ADD is
	// refused while the store is lost or corrupt.
	veths, err := o.Inspect()
	if err != nil {
		return fmt.Errorf("repair: list the node's veths: %w (nothing changed)", err)
	}
	if o.Discover != nil && p.Cfg.Provider == netconf.EC2 && (base.EC2 == nil || len(base.EC2.Addrs) == 0) {
		msg, err := o.Discover(ctx, base)
		if err != nil {
			fmt.Fprintf(out, "repair: warning: the ec2 pool could not be read from IMDS (%v); `eni-cni warm` fills it later\n", err)
		} else {
			fmt.Fprintf(out, "repair: %s\n", msg)
		}
	}
	now, boot := p.Mgr.Clock(), p.repairBoot()
	in := repairInput{Network: p.Cfg.Network, Prefix: p.Cfg.VethPrefix, Base: base, Veths: veths, Sandboxes: o.Sandboxes, Now: now, Boot: boot}
	if p.Cfg.Provider == netconf.Static {
		in.InPool = func(ip netip.Addr) bool { return p.Cfg.Pool.Contains(base, ip) }
	} else {
		in.ENIOf = func(ip netip.Addr) string { return eniOf(base, ip) }
	}
	plan := planRepair(in)
	if plan.Routed > 0 && plan.Matched == 0 && !o.Force {
		return fmt.Errorf("repair: %w: the runtime lists %d sandboxes, none of which owns one of the %d veths routing this network's addresses (a wrong --cri-endpoint looks like this); --force holds all their addresses back instead",
			errRepairRefused, len(o.Sandboxes), plan.Routed)
	}
	printRepair(out, plan, o.DryRun, p.Cfg.Cooldown)
	if o.DryRun {
		return nil
	}
	if rebuild {
		if kept, err := store.SetAside(now); err == nil {
			fmt.Fprintf(out, "repair: kept the old state file as %s\n", kept)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("repair: %w (nothing changed)", err)
		}
	}
	plan.apply(base, now, boot, p.Cfg.Cooldown)
	base.RecordNetwork(p.Cfg.Network) // the file knows this network from now on
	if err := store.Save(base); err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	fmt.Fprintf(out, "repair: saved %s (%d allocations)\n", store.Path(), len(base.Allocations))
	if slices.ContainsFunc(base.Allocations, func(a alloc.Allocation) bool { return a.Network == p.Cfg.Network && a.Egress4.IsValid() }) {
		// A flushed nat table is found by CHECK and restored here.
		if err := p.ensureEgress4(false); err != nil {
			return fmt.Errorf("repair: %w", err)
		}
	}
	return nil
}

// repairBoot is the boot clock repair stamps with (injected in tests).
func (p *Plugin) repairBoot() time.Duration {
	if p.Mgr.Boot != nil {
		return p.Mgr.Boot()
	}
	return alloc.BootClock()
}

// repairBase is the state to start from: the readable file (completed, not
// rebuilt), or what can be salvaged from an unusable one (rebuilt; the old
// file is set aside). A file of a newer eni-cni is refused without force:
// rebuilding would drop what that version knows.
func (p *Plugin) repairBase(store RepairStore, force bool, out io.Writer) (st *alloc.State, rebuild bool, err error) {
	st, err = store.Load()
	switch {
	case err == nil && !st.Missing():
		fmt.Fprintf(out, "repair: %s is readable: adding what the node has and it does not record\n", store.Path())
		if st.BootID != p.Mgr.BootID && st.BootID != "" {
			st.Allocations, st.Cooling = []alloc.Allocation{}, []alloc.Cooling{}
		}
		st.BootID = p.Mgr.BootID
		return st, false, nil
	case err == nil:
		fmt.Fprintf(out, "repair: %s does not exist: rebuilding it from the node and the runtime\n", store.Path())
		st.BootID = p.Mgr.BootID
		return st, true, nil
	case errors.Is(err, alloc.ErrUnsupportedVersion) && !force:
		return nil, false, fmt.Errorf("repair: %w: %w; a newer eni-cni wrote it (downgraded?): install that version, or --force to rebuild and set the file aside", errRepairRefused, err)
	case !storeUnusable(err):
		return nil, false, fmt.Errorf("repair: %w", err)
	}
	fmt.Fprintf(out, "repair: %v: rebuilding from the node and the runtime\n", err)
	salvaged := alloc.NewState("")
	if data, rerr := store.ReadRaw(); rerr == nil {
		var notes []string
		salvaged, notes = alloc.Salvage(data)
		for _, n := range notes {
			fmt.Fprintf(out, "repair: salvage: %s\n", n)
		}
	}
	// This network's allocations come from the node; other networks'
	// (a shared stateDir) are kept as salvaged.
	salvaged.Allocations = slices.DeleteFunc(salvaged.Allocations, func(a alloc.Allocation) bool { return a.Network == p.Cfg.Network })
	poolSize := 0
	if salvaged.EC2 != nil {
		poolSize = len(salvaged.EC2.Addrs)
	}
	fmt.Fprintf(out, "repair: salvaged %d addresses of the pool, %d cooling, %d allocations of other networks\n",
		poolSize, len(salvaged.Cooling), len(salvaged.Allocations))
	salvaged.Version, salvaged.BootID = alloc.SchemaVersion, p.Mgr.BootID
	return salvaged, true, nil
}

// eniOf is the ENI that holds ip according to the ec2 pool, or "".
func eniOf(st *alloc.State, ip netip.Addr) string {
	if st.EC2 == nil {
		return ""
	}
	if ip.Is6() {
		eni, _ := st.EC2.ENIOf6(ip)
		return eni
	}
	for _, a := range st.EC2.Addrs {
		if a.IP == ip {
			return a.ENI
		}
	}
	return ""
}

func printRepair(w io.Writer, plan repairPlan, dryRun bool, hold time.Duration) {
	would := func(s string) string {
		if dryRun {
			return "would " + s
		}
		return s
	}
	for _, a := range plan.Add {
		pod := "-"
		if a.PodName != "" {
			pod = a.PodNamespace + "/" + a.PodName
		}
		egress := ""
		if a.Egress4.IsValid() {
			egress = a.Egress4.String()
		}
		fmt.Fprintf(w, "repair: %s %s to %s (%s, host veth %s%s%s)\n", would("record"), a.IP, pod, a.Key, a.HostVeth, ifSet(", eni ", a.ENI), ifSet(", egress ", egress))
	}
	for _, h := range plan.Held {
		fmt.Fprintf(w, "repair: %s %s (routed through %s, which no listed sandbox owns) out of use for %s; gc removes that wiring\n", would("hold"), h.IP, h.Veth, hold)
	}
	for _, c := range plan.Conflicts {
		fmt.Fprintf(w, "repair: conflict, left alone: %s\n", c)
	}
	for _, a := range plan.Unwired {
		fmt.Fprintf(w, "repair: note: %s (%s) has no veth on the node; its DEL or gc frees it\n", a.Key, a.IP)
	}
	fmt.Fprintf(w, "repair: %s %d allocations, %d addresses held back, %d conflicts (%d of %d routed veths matched a sandbox)\n",
		would("add"), len(plan.Add), len(plan.Held), len(plan.Conflicts), plan.Matched, plan.Routed)
}

func ifSet(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}
