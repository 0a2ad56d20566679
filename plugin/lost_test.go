package plugin

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
)

// lostNode is a node whose state was lost: the fake kernel still wires two
// pods of the pool (10.99.0.0/24) and one of another network, the store is
// empty.
func lostNode(t *testing.T) (*Plugin, *fakeWire, *allocfake.Store) {
	t.Helper()
	p, w, s := newTestPlugin(t, "10.99.0.0/24")
	w.wired[netsetup.HostVethName("eni", "live1", "eth0")] = netip.MustParseAddr("10.99.0.1")
	w.wired[netsetup.HostVethName("eni", "live2", "eth0")] = netip.MustParseAddr("10.99.0.2")
	w.wired[netsetup.HostVethName("eni", "other-net", "eth0")] = netip.MustParseAddr("172.16.0.5")
	return p, w, s
}

// TestLostStateRefusesToHandOutAddresses: no state file while the node
// routes pool addresses through our veths is not a new node. ADD, STATUS,
// list and gc refuse with a message pointing at `eni-cni repair`; nothing
// is allocated, wired or written.
func TestLostStateRefusesToHandOutAddresses(t *testing.T) {
	p, w, s := lostNode(t)
	ctx := context.Background()
	before := len(w.wired)
	_, err := p.add(ctx, att("new"))
	if !errors.Is(err, alloc.ErrStateLost) || toCNIError(err).Code != types.ErrIOFailure {
		t.Fatalf("ADD on a lost state: %v, want ErrStateLost (code 5)", err)
	}
	for _, want := range []string{"eni-cni repair", "2 addresses", "10.99.0.1 dev eni", `network "pods"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
	if len(w.wired) != before || s.Saves != 0 || s.Bytes() != nil {
		t.Errorf("a refused ADD wired or saved something: %d wired, %d saves", len(w.wired), s.Saves)
	}
	if _, err := p.Status(ctx); toCNIError(err).Code != types.ErrPluginNotAvailable || !errors.Is(err, alloc.ErrStateLost) {
		t.Errorf("STATUS on a lost state: %v, want code 50", err)
	}
	if _, _, err := p.Mgr.Snapshot(ctx); !errors.Is(err, alloc.ErrStateLost) {
		t.Errorf("a locked read on a lost state: %v", err)
	}
	if _, _, err := p.Mgr.Peek(); !errors.Is(err, alloc.ErrStateLost) {
		t.Errorf("list (Peek) on a lost state: %v", err)
	}
	host := &fakeHost{veths: []string{netsetup.HostVethName("eni", "live1", "eth0")},
		routes: []gc.HostRoute{{IP: netip.MustParseAddr("10.99.0.1"), Veth: netsetup.HostVethName("eni", "live1", "eth0")}}}
	_, err = p.Collect(ctx, gc.FromSandboxes(nil), gc.Options{Grace: 600e9, Force: true}, false, host)
	if !errors.Is(err, alloc.ErrStateLost) || len(host.veths) != 1 || len(host.routes) != 1 {
		t.Errorf("gc on a lost state: %v, host %+v; want a refusal and the live pods' wiring kept (their veths would be 'leftovers')", err, host)
	}
}

// TestNewNodeStartsEmpty: no state file and no wiring of this network (a
// brand-new node, or only another network's pods) is a normal start.
func TestNewNodeStartsEmpty(t *testing.T) {
	p, w, _ := newTestPlugin(t, "10.99.0.0/24")
	w.wired[netsetup.HostVethName("eni", "other-net", "eth0")] = netip.MustParseAddr("172.16.0.5")
	if _, err := p.add(context.Background(), att("first")); err != nil {
		t.Fatalf("first ADD on a new node: %v", err)
	}
}

// TestDelWithUnusableStore: DEL on a corrupt, lost or untrusted store tears
// the host side down by the derived veth name and succeeds (logged as an
// error), so the pod does not stay Terminating; ADD still refuses. A lock
// timeout is not such a case: DEL fails and the runtime retries.
func TestDelWithUnusableStore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(*allocfake.Store) alloc.Store
	}{
		{"corrupt", func(s *allocfake.Store) alloc.Store { return failingStore{s, alloc.ErrCorrupt} }},
		{"newer version", func(s *allocfake.Store) alloc.Store { return failingStore{s, alloc.ErrUnsupportedVersion} }},
		{"untrusted", func(s *allocfake.Store) alloc.Store { return failingStore{s, alloc.ErrInsecure} }},
		{"lost", func(s *allocfake.Store) alloc.Store { return s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, w, s := lostNode(t)
			p.Mgr.Store = tc.store(s)
			var logs strings.Builder
			p.log = slog.New(slog.NewTextHandler(&logs, nil))
			veth := netsetup.HostVethName("eni", "live1", "eth0")
			if err := p.del(context.Background(), att("live1").Key, ""); err != nil {
				t.Fatalf("DEL: %v, want success after tearing down by name", err)
			}
			if _, ok := w.wired[veth]; ok || !slices.Contains(w.unrouted, veth) {
				t.Errorf("veth %s not unrouted and deleted: wired %v, unrouted %v", veth, w.wired, w.unrouted)
			}
			if _, ok := w.wired[netsetup.HostVethName("eni", "live2", "eth0")]; !ok {
				t.Error("another pod's veth was torn down")
			}
			if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "eni-cni repair") || !strings.Contains(logs.String(), "10.99.0.1") {
				t.Errorf("not logged loudly: %q", logs.String())
			}
			if _, err := p.add(context.Background(), att("new")); err == nil {
				t.Error("ADD succeeded on an unusable store")
			}
		})
	}
	t.Run("lock timeout still fails", func(t *testing.T) {
		p, w, s := lostNode(t)
		p.Mgr.Store = failingStore{s, alloc.ErrLockTimeout}
		if err := p.del(context.Background(), att("live1").Key, ""); !errors.Is(err, alloc.ErrLockTimeout) {
			t.Errorf("DEL on a busy lock: %v, want the timeout (the runtime retries)", err)
		}
		if len(w.torn) != 0 {
			t.Errorf("tore down %v on a lock timeout", w.torn)
		}
	})
}

// failingStore fails every Load with err.
type failingStore struct {
	*allocfake.Store
	err error
}

func (f failingStore) Load() (*alloc.State, error) { return nil, f.err }

// TestAddRouteTakenGivesAddressBack: when the node already routes the
// picked address to another veth, ADD fails with code 11 and gives the
// address back; the retry takes the next one.
func TestAddRouteTakenGivesAddressBack(t *testing.T) {
	p, w, s := newTestPlugin(t, "10.99.0.1-10.99.0.3")
	ctx := context.Background()
	w.setupErr = netsetup.ErrRouteTaken
	_, err := p.add(ctx, att("c1"))
	if toCNIError(err).Code != types.ErrTryAgainLater {
		t.Fatalf("ADD onto a taken route: %v, want code 11", err)
	}
	if st, _ := s.Load(); len(st.Allocations) != 0 {
		t.Fatalf("allocation kept: %+v", st.Allocations)
	}
	w.setupErr = nil
	res, err := p.add(ctx, att("c1"))
	if err != nil || res.IPs[0].Address.IP.String() != "10.99.0.2" {
		t.Fatalf("retry: %v %v, want the next address 10.99.0.2", res, err)
	}
}

// sharedPlugins are two networks' plugins on one store and one node, as
// two conflists with the same stateDir make them: "pods" (10.99.0.0/24)
// has no pods, "blue" (10.98.0.0/24) has two live pods whose records were
// lost with the file.
func sharedPlugins(t *testing.T) (pods, blue *Plugin, w *fakeWire, s *allocfake.Store) {
	t.Helper()
	pods, w, s = newTestPlugin(t, "10.99.0.0/24")
	cfg, err := netconf.Parse([]byte(`{"cniVersion":"1.0.0","name":"blue","pool":{"source":"static","ranges":["10.98.0.0/24"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	mgr := &alloc.Manager{Store: s, Pool: cfg.Pool, BootID: "b", Cooldown: cfg.Cooldown, LockTimeout: time.Second}
	blue = newPluginWith(cfg, mgr, w, staticProvider{cfg.Pool})
	w.wired[netsetup.HostVethName("eni", "blue1", "eth0")] = netip.MustParseAddr("10.98.0.1")
	w.wired[netsetup.HostVethName("eni", "blue2", "eth0")] = netip.MustParseAddr("10.98.0.2")
	return pods, blue, w, s
}

func blueAtt(cid string) attachment {
	a := att(cid)
	a.Network = "blue"
	return a
}

// TestSharedStateDirLostForOneNetwork: the shared state file was lost and
// the network without pods wrote a fresh one first (an ADD, or only look-
// ups, which must not write it). The other network's live pods are still
// detected: its ADD and STATUS refuse with a message naming the network
// and `eni-cni repair`, its gc sweeps none of its live veths, its pods'
// addresses are never handed out.
func TestSharedStateDirLostForOneNetwork(t *testing.T) {
	ctx := context.Background()
	for _, first := range []string{"add", "lookups"} {
		t.Run(first+" first", func(t *testing.T) {
			pods, blue, w, s := sharedPlugins(t)
			switch first {
			case "add":
				if _, err := pods.add(ctx, att("p1")); err != nil {
					t.Fatalf("pods ADD: %v", err)
				}
			case "lookups":
				if err := pods.del(ctx, att("unknown").Key, ""); err != nil {
					t.Fatalf("pods DEL of an unknown key: %v", err)
				}
				if err := pods.check(ctx, att("unknown"), nil); !errors.Is(err, errNoAllocation) {
					t.Fatalf("pods CHECK of an unknown key: %v", err)
				}
				if _, err := pods.Status(ctx); err != nil {
					t.Fatalf("pods STATUS: %v", err)
				}
				if s.Saves != 0 || s.Bytes() != nil {
					t.Fatalf("look-ups wrote the state file: %s", s.Bytes())
				}
			}
			wired := len(w.wired)
			_, err := blue.add(ctx, blueAtt("new"))
			if !errors.Is(err, alloc.ErrStateLost) || toCNIError(err).Code != types.ErrIOFailure {
				t.Fatalf("blue ADD: %v, want ErrStateLost (code 5)", err)
			}
			for _, want := range []string{"eni-cni repair", `network "blue"`, "2 addresses", "10.98.0.1 dev eni"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message lacks %q: %v", want, err)
				}
			}
			if len(w.wired) != wired {
				t.Errorf("a refused ADD wired something: %v", w.wired)
			}
			if _, err := blue.Status(ctx); !errors.Is(err, alloc.ErrStateLost) {
				t.Errorf("blue STATUS: %v, want a refusal", err)
			}
			veth := netsetup.HostVethName("eni", "blue1", "eth0")
			host := &fakeHost{veths: []string{veth}, routes: []gc.HostRoute{{IP: netip.MustParseAddr("10.98.0.1"), Veth: veth}}}
			_, err = blue.Collect(ctx, gc.FromSandboxes(nil), gc.Options{Grace: 600e9, Force: true}, false, host)
			if !errors.Is(err, alloc.ErrStateLost) || len(host.veths) != 1 || len(host.routes) != 1 {
				t.Errorf("blue gc: %v, host %+v; want a refusal and its live veths kept", err, host)
			}
			if st, err := s.Load(); err == nil && !st.Missing() {
				for _, a := range st.Allocations {
					if a.Network == "blue" {
						t.Errorf("blue allocated %s while refused", a.IP)
					}
				}
			}
			// The network without pods keeps working meanwhile.
			if _, err := pods.add(ctx, att("p2")); err != nil {
				t.Errorf("pods ADD: %v", err)
			}
		})
	}
}

// TestUnrecordedNetworkIgnoresRecordedPods: a network the store does not
// record yet (its first call on a node where another network, sharing the
// store and an overlapping pool, has pods) counts only wiring the store
// does not explain: the other network's recorded pods are not a lost state.
func TestUnrecordedNetworkIgnoresRecordedPods(t *testing.T) {
	ctx := context.Background()
	pods, _, w, _ := sharedPlugins(t)
	delete(w.wired, netsetup.HostVethName("eni", "blue1", "eth0"))
	delete(w.wired, netsetup.HostVethName("eni", "blue2", "eth0"))
	for _, cid := range []string{"p1", "p2"} {
		if _, err := pods.add(ctx, att(cid)); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := netconf.Parse([]byte(`{"cniVersion":"1.0.0","name":"green","pool":{"source":"static","ranges":["10.99.0.0/24"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	mgr := &alloc.Manager{Store: pods.Mgr.Store, Pool: cfg.Pool, BootID: "b", Cooldown: cfg.Cooldown, LockTimeout: time.Second}
	green := newPluginWith(cfg, mgr, w, staticProvider{cfg.Pool})
	g := att("g1")
	g.Network = "green"
	res, err := green.add(ctx, g)
	if err != nil {
		t.Fatalf("green's first ADD beside pods' recorded pods: %v", err)
	}
	if ip := res.IPs[0].Address.IP.String(); ip == "10.99.0.1" || ip == "10.99.0.2" {
		t.Errorf("green got %s, a live pod's address", ip)
	}
	// A pod of the shared pool that no record explains makes green's
	// store lost for green.
	w.wired[netsetup.HostVethName("eni", "stray", "eth0")] = netip.MustParseAddr("10.99.0.200")
	h := att("h1")
	h.Network = "hue"
	cfg.Network = "hue"
	hue := newPluginWith(cfg, &alloc.Manager{Store: pods.Mgr.Store, Pool: cfg.Pool, BootID: "b", Cooldown: cfg.Cooldown, LockTimeout: time.Second}, w, staticProvider{cfg.Pool})
	if _, err := hue.add(ctx, h); !errors.Is(err, alloc.ErrStateLost) || !strings.Contains(err.Error(), "10.99.0.200") || strings.Contains(err.Error(), "10.99.0.1 ") {
		t.Errorf("hue ADD with a stray pod in its pool: %v, want ErrStateLost naming only 10.99.0.200", err)
	}
}
