package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
)

// repairNode: a static network on a disk store, a fake kernel, and the
// node as repair sees it: pod A (eth0) and pod B (net1, found through its
// namespace) wired, a veth of a sandbox the runtime no longer lists, and a
// veth of another network.
type repairNode struct {
	p        *Plugin
	w        *fakeWire
	store    *alloc.DiskStore
	veths    []netsetup.VethView
	sbs      []gc.Sandbox
	vA, vB   string
	ghost    string
	ipA, ipB netip.Addr
}

func newRepairNode(t *testing.T) *repairNode {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	cfg, err := netconf.Parse([]byte(`{"cniVersion":"1.0.0","name":"pods","stateDir":"` + dir + `","pool":{"source":"static","ranges":["10.99.0.0/24"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	store, err := alloc.NewDiskStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	wall, boot := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), 2*time.Hour
	mgr := &alloc.Manager{Store: store, Pool: cfg.Pool, BootID: "boot-1", Cooldown: cfg.Cooldown, LockTimeout: time.Second,
		Now: func() time.Time { return wall }, Boot: func() time.Duration { return boot }}
	w := newFakeWire()
	n := &repairNode{p: newPluginWith(cfg, mgr, w, staticProvider{cfg.Pool}), w: w, store: store,
		vA: netsetup.HostVethName("eni", "sandbox-a", "eth0"), vB: netsetup.HostVethName("eni", "sandbox-b", "net1"),
		ghost: netsetup.HostVethName("eni", "sandbox-gone", "eth0"),
		ipA:   netip.MustParseAddr("10.99.0.1"), ipB: netip.MustParseAddr("10.99.0.2")}
	n.veths = []netsetup.VethView{
		{Name: n.vA, IPs: []netip.Addr{n.ipA}},
		{Name: n.vB, IPs: []netip.Addr{n.ipB}, PeerIfName: "net1", Netns: "/var/run/netns/cni-b"},
		{Name: n.ghost, IPs: []netip.Addr{netip.MustParseAddr("10.99.0.3")}},
		{Name: netsetup.HostVethName("eni", "other-net", "eth0"), IPs: []netip.Addr{netip.MustParseAddr("172.16.0.5")}},
	}
	for _, v := range n.veths {
		w.wired[v.Name] = v.IPs[0]
	}
	n.sbs = []gc.Sandbox{
		{ID: "sandbox-a", PodNamespace: "default", PodName: "web-a", PodUID: "uid-a", Ready: true},
		{ID: "sandbox-b", PodNamespace: "default", PodName: "web-b", PodUID: "uid-b"},
		{ID: "sandbox-hostnet", PodNamespace: "kube-system", PodName: "kube-proxy"},
	}
	return n
}

func (n *repairNode) Repair(t *testing.T, o RepairOptions) (string, error) {
	t.Helper()
	if o.Inspect == nil {
		o.Inspect = func() ([]netsetup.VethView, error) { return n.veths, nil }
	}
	if o.Sandboxes == nil {
		o.Sandboxes = n.sbs
	}
	var out bytes.Buffer
	err := n.p.Repair(context.Background(), n.store, o, &out)
	return out.String(), err
}

func (n *repairNode) state(t *testing.T) *alloc.State {
	t.Helper()
	st, err := n.store.Load()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (n *repairNode) assertRebuilt(t *testing.T, out string) {
	t.Helper()
	st := n.state(t)
	got := map[string]alloc.Allocation{}
	for _, a := range st.Allocations {
		got[a.ContainerID] = a
	}
	if a := got["sandbox-a"]; a.IP != n.ipA || a.IfName != "eth0" || a.PodName != "web-a" || a.HostVeth != n.vA || a.AllocatedBoot != 2*time.Hour {
		t.Errorf("pod A rebuilt as %+v", a)
	}
	if b := got["sandbox-b"]; b.IP != n.ipB || b.IfName != "net1" || b.Netns != "/var/run/netns/cni-b" || b.HostVeth != n.vB {
		t.Errorf("pod B (net1) rebuilt as %+v", b)
	}
	if len(st.Allocations) != 2 {
		t.Errorf("allocations %+v, want A and B only", st.Allocations)
	}
	if len(st.Cooling) != 1 || st.Cooling[0].IP.String() != "10.99.0.3" {
		t.Errorf("cooling %+v, want the ghost's 10.99.0.3 held back", st.Cooling)
	}
	for _, want := range []string{"record 10.99.0.1 to default/web-a", "hold 10.99.0.3", "2 of 3 routed veths matched"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "172.16.0.5") {
		t.Errorf("another network's address in the output:\n%s", out)
	}
}

// TestRepairLostState: repair rebuilds a missing state file, after which
// ADD works again and hands out neither a live pod's address nor a held one.
func TestRepairLostState(t *testing.T) {
	n := newRepairNode(t)
	ctx := context.Background()
	if _, err := n.p.add(ctx, att("new")); !errors.Is(err, alloc.ErrStateLost) {
		t.Fatalf("ADD before repair: %v, want ErrStateLost", err)
	}
	out, err := n.Repair(t, RepairOptions{})
	if err != nil {
		t.Fatalf("repair: %v\n%s", err, out)
	}
	n.assertRebuilt(t, out)
	res, err := n.p.add(ctx, att("new"))
	if err != nil {
		t.Fatalf("ADD after repair: %v", err)
	}
	if ip := res.IPs[0].Address.IP.String(); ip == "10.99.0.1" || ip == "10.99.0.2" || ip == "10.99.0.3" {
		t.Errorf("ADD after repair got %s, an address still routed on the node", ip)
	}
}

// TestRepairCorruptState: the corrupt file is set aside byte for byte, the
// pool's cooling entries and other networks' allocations are salvaged, and
// this network's allocations come from the node.
func TestRepairCorruptState(t *testing.T) {
	n := newRepairNode(t)
	bad := []byte(`{"version":2,"allocations":[` +
		`{"network":"pods","containerID":"stale","ifname":"eth0","ip":"10.99.0.9","hostVeth":"eniold"},` +
		`{"network":"other","containerID":"o1","ifname":"eth0","ip":"172.16.0.5","hostVeth":"enio1"},` +
		`{"network":"other","containerID":"o2","ifname":"eth0","ip":"172.16.0.5","hostVeth":"enio2"}],` +
		`"cooling":[{"ip":"10.99.0.50","until":"2026-05-01T00:00:10Z"}],"lastIP":"10.99.0.40","ec2":"oops"}`)
	if err := os.WriteFile(n.store.Path(), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := n.Repair(t, RepairOptions{})
	if err != nil {
		t.Fatalf("repair: %v\n%s", err, out)
	}
	matches, _ := filepath.Glob(n.store.Path() + ".bad-*")
	if len(matches) != 1 {
		t.Fatalf("bad file kept as %v, want one state.json.bad-*", matches)
	}
	if kept, _ := os.ReadFile(matches[0]); !bytes.Equal(kept, bad) {
		t.Error("the set-aside file differs from the bad one")
	}
	st := n.state(t)
	var other []string
	for _, a := range st.Allocations {
		if a.Network == "other" {
			other = append(other, a.ContainerID)
		}
		if a.ContainerID == "stale" {
			t.Error("this network's allocation was salvaged instead of rebuilt from the node")
		}
	}
	if strings.Join(other, ",") != "o1" {
		t.Errorf("other network's allocations %v, want o1 (o2 repeats its address)", other)
	}
	if st.LastIP.String() != "10.99.0.40" || len(st.Cooling) != 2 {
		t.Errorf("salvaged lastIP %s, cooling %+v", st.LastIP, st.Cooling)
	}
	for _, want := range []string{"state file is corrupt", "kept the old state file as", "allocation 2 dropped", "ec2 section dropped", "salvaged 0 addresses of the pool, 1 cooling, 1 allocations of other networks"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestRepairDryRun prints the plan and changes nothing, lost or corrupt.
func TestRepairDryRun(t *testing.T) {
	for _, content := range [][]byte{nil, []byte("{truncated")} {
		n := newRepairNode(t)
		if content != nil {
			os.WriteFile(n.store.Path(), content, 0o600)
		}
		out, err := n.Repair(t, RepairOptions{DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "would record 10.99.0.1 to default/web-a") || !strings.Contains(out, "would hold 10.99.0.3") {
			t.Errorf("dry run output:\n%s", out)
		}
		entries, _ := os.ReadDir(filepath.Dir(n.store.Path()))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		after, _ := os.ReadFile(n.store.Path())
		if !bytes.Equal(after, content) || len(names) > 2 {
			t.Errorf("dry run changed the state dir: %v, state %q", names, after)
		}
	}
}

// TestRepairRefusesAListingThatMatchesNothing: a runtime whose sandboxes own
// none of the node's veths (a wrong socket) is not believed without force;
// with force every address is held back, none is handed out.
func TestRepairRefusesAListingThatMatchesNothing(t *testing.T) {
	n := newRepairNode(t)
	wrong := []gc.Sandbox{{ID: "someone-else"}}
	out, err := n.Repair(t, RepairOptions{Sandboxes: wrong})
	if !errors.Is(err, errRepairRefused) || !strings.Contains(err.Error(), "--cri-endpoint") {
		t.Fatalf("repair with a listing that matches nothing: %v", err)
	}
	if _, serr := os.Stat(n.store.Path()); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("a refused repair wrote the state file\n%s", out)
	}
	if _, err := n.Repair(t, RepairOptions{Sandboxes: wrong, Force: true}); err != nil {
		t.Fatal(err)
	}
	if st := n.state(t); len(st.Allocations) != 0 || len(st.Cooling) != 3 {
		t.Errorf("forced repair: allocations %+v, cooling %+v; want none and 3 held", st.Allocations, st.Cooling)
	}
}

// TestRepairReadableState completes a readable state: recorded allocations
// stay, unrecorded wiring is added, contradictions are reported only.
func TestRepairReadableState(t *testing.T) {
	n := newRepairNode(t)
	st := alloc.NewState("boot-1")
	st.Allocations = append(st.Allocations,
		alloc.Allocation{Key: alloc.Key{Network: "pods", ContainerID: "sandbox-a", IfName: "eth0"}, IP: n.ipA, HostVeth: n.vA, PodName: "recorded"},
		alloc.Allocation{Key: alloc.Key{Network: "pods", ContainerID: "gone", IfName: "eth0"}, IP: netip.MustParseAddr("10.99.0.3"), HostVeth: "enielsewhere"},
		alloc.Allocation{Key: alloc.Key{Network: "pods", ContainerID: "unwired", IfName: "eth0"}, IP: netip.MustParseAddr("10.99.0.8"), HostVeth: "eninothere"})
	if err := n.store.Save(st); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(n.store.Path())
	out, err := n.Repair(t, RepairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st = n.state(t)
	if len(st.Allocations) != 4 {
		t.Fatalf("allocations %+v, want the 3 recorded plus pod B", st.Allocations)
	}
	for _, a := range st.Allocations {
		if a.ContainerID == "sandbox-a" && a.PodName != "recorded" {
			t.Error("a recorded allocation was rewritten")
		}
	}
	if matches, _ := filepath.Glob(n.store.Path() + ".bad-*"); len(matches) != 0 || len(before) == 0 {
		t.Errorf("a readable file was set aside: %v", matches)
	}
	for _, want := range []string{"is readable", "record 10.99.0.2 to default/web-b", "conflict, left alone: 10.99.0.3 is routed through " + n.ghost, "unwired/eth0", "has no veth on the node"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestRepairNewerVersionNeedsForce: a file of a newer eni-cni is not
// rebuilt (and so not truncated to what this version knows) without force.
func TestRepairNewerVersionNeedsForce(t *testing.T) {
	n := newRepairNode(t)
	newer := []byte(`{"version":99,"allocations":[]}`)
	os.WriteFile(n.store.Path(), newer, 0o600)
	if _, err := n.Repair(t, RepairOptions{}); !errors.Is(err, errRepairRefused) || !strings.Contains(err.Error(), "newer eni-cni") {
		t.Fatalf("repair of a newer file: %v", err)
	}
	if got, _ := os.ReadFile(n.store.Path()); !bytes.Equal(got, newer) {
		t.Fatal("refused repair changed the file")
	}
	if out, err := n.Repair(t, RepairOptions{Force: true}); err != nil || !strings.Contains(out, "kept the old state file") {
		t.Fatalf("forced repair: %v\n%s", err, out)
	}
}

// TestRepairUntrustedFile: a state file others could write is set aside
// and nothing of it is salvaged.
func TestRepairUntrustedFile(t *testing.T) {
	n := newRepairNode(t)
	os.WriteFile(n.store.Path(), []byte(`{"version":1,"allocations":[{"network":"other","containerID":"planted","ifname":"eth0","ip":"10.1.1.1"}]}`), 0o600)
	os.Chmod(n.store.Path(), 0o666)
	out, err := n.Repair(t, RepairOptions{})
	if err != nil {
		t.Fatalf("repair: %v\n%s", err, out)
	}
	for _, a := range n.state(t).Allocations {
		if a.ContainerID == "planted" {
			t.Error("an allocation from a file others could write was salvaged")
		}
	}
	if !strings.Contains(out, "not safe to trust") {
		t.Errorf("output does not say why:\n%s", out)
	}
}

// failingSave is a disk store whose Save fails (a full disk, an I/O error)
// after everything before it went through.
type failingSave struct{ *alloc.DiskStore }

func (failingSave) Save(*alloc.State) error {
	return fmt.Errorf("save state: %w: no space left on device", alloc.ErrIO)
}

// TestRepairFailedSaveKeepsTheBadFile: when the rebuilt state cannot be
// saved, the bad file is still the state file (nothing lost, nothing
// missing: the next repair salvages from it again), and the copy set
// aside is byte for byte the same.
func TestRepairFailedSaveKeepsTheBadFile(t *testing.T) {
	n := newRepairNode(t)
	bad := []byte(`{"version":2,"allocations":[{"network":"other","containerID":"o1","ifname":"eth0","ip":"172.16.0.5","hostVeth":"enio1"}],"ec2":"oops"}`)
	if err := os.WriteFile(n.store.Path(), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := n.p.Repair(context.Background(), failingSave{n.store}, RepairOptions{Inspect: func() ([]netsetup.VethView, error) { return n.veths, nil }, Sandboxes: n.sbs}, &out)
	if !errors.Is(err, alloc.ErrIO) {
		t.Fatalf("repair with a failing save: %v, want ErrIO\n%s", err, out.String())
	}
	if got, rerr := os.ReadFile(n.store.Path()); rerr != nil || !bytes.Equal(got, bad) {
		t.Fatalf("after the failed save the state file is %q (%v), want the bad file as it was", got, rerr)
	}
	matches, _ := filepath.Glob(n.store.Path() + ".bad-*")
	for _, m := range matches {
		if kept, _ := os.ReadFile(m); !bytes.Equal(kept, bad) {
			t.Errorf("%s differs from the bad file", m)
		}
	}
	// A second repair, with a working store, still salvages from it.
	out2, err := n.Repair(t, RepairOptions{})
	if err != nil {
		t.Fatalf("repair: %v\n%s", err, out2)
	}
	if !strings.Contains(out2, "1 allocations of other networks") {
		t.Errorf("the second repair salvaged nothing:\n%s", out2)
	}
}

// TestRepairReadsTheNodeUnderTheLock: a DEL that completes right after
// repair has looked at the node, before repair takes the lock, must not be
// undone: repair would record the pod again from the veth it saw, for an
// address whose wiring is gone and whose cooldown it would cancel. The
// node is read under the lock, so the DEL waits for repair instead, and
// then frees the address as usual.
func TestRepairReadsTheNodeUnderTheLock(t *testing.T) {
	n := newRepairNode(t)
	if out, err := n.Repair(t, RepairOptions{}); err != nil { // rebuild: A and B recorded
		t.Fatalf("repair: %v\n%s", err, out)
	}
	// The runtime's DEL is another process: its own store on the same
	// directory.
	other, err := alloc.NewDiskStore(n.store.Dir())
	if err != nil {
		t.Fatal(err)
	}
	mgr := *n.p.Mgr
	mgr.Store, mgr.LockTimeout = other, time.Minute
	runtime := newPluginWith(n.p.Cfg, &mgr, n.w, staticProvider{n.p.Cfg.Pool})
	keyB := alloc.Key{Network: "pods", ContainerID: "sandbox-b", IfName: "net1"}
	var delErr error
	delDone := make(chan struct{})
	del := func() { defer close(delDone); delErr = runtime.del(context.Background(), keyB, "") }
	inspect := func() ([]netsetup.VethView, error) {
		var seen []netsetup.VethView
		n.w.mu.Lock()
		for _, v := range n.veths {
			if _, ok := n.w.wired[v.Name]; ok {
				seen = append(seen, v)
			}
		}
		n.w.mu.Unlock()
		// The runtime's DEL of pod B comes now; if repair holds the state
		// lock, it waits for repair.
		try, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := other.Lock(try); err != nil {
			go del()
			return seen, nil
		}
		if err := other.Unlock(); err != nil {
			t.Error(err)
		}
		del()
		return seen, nil
	}
	out, err := n.Repair(t, RepairOptions{Inspect: inspect})
	if err != nil {
		t.Fatalf("repair: %v\n%s", err, out)
	}
	<-delDone
	if delErr != nil {
		t.Fatal(delErr)
	}
	if _, wired := n.w.wired[n.vB]; wired {
		t.Fatal("DEL left pod B's veth")
	}
	st := n.state(t)
	if i := st.Find(keyB); i >= 0 {
		t.Errorf("pod B, deleted, is recorded again with %s (its veth is gone):\n%s", st.Allocations[i].IP, out)
	}
	if !slices.ContainsFunc(st.Cooling, func(c alloc.Cooling) bool { return c.IP == n.ipB }) {
		t.Errorf("pod B's address %s is not cooling: %+v", n.ipB, st.Cooling)
	}
	// The ghost's address, held by both repairs, is held once.
	seen := map[netip.Addr]bool{}
	for _, c := range st.Cooling {
		if seen[c.IP] {
			t.Errorf("%s cools twice: %+v", c.IP, st.Cooling)
		}
		seen[c.IP] = true
	}
}
