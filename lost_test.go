package main

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/netsetup"
)

// lostNode is a node whose state was lost: the fake kernel still wires two
// pods of the pool (10.99.0.0/24) and one of another network, the store is
// empty.
func lostNode(t *testing.T) (*plugin, *fakeWire, *alloc.MemStore) {
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
	if _, err := p.status(ctx); toCNIError(err).Code != types.ErrPluginNotAvailable || !errors.Is(err, alloc.ErrStateLost) {
		t.Errorf("STATUS on a lost state: %v, want code 50", err)
	}
	if _, _, err := p.mgr.Snapshot(ctx); !errors.Is(err, alloc.ErrStateLost) {
		t.Errorf("a locked read on a lost state: %v", err)
	}
	if _, _, err := p.mgr.Peek(); !errors.Is(err, alloc.ErrStateLost) {
		t.Errorf("list (Peek) on a lost state: %v", err)
	}
	host := &fakeHost{veths: []string{netsetup.HostVethName("eni", "live1", "eth0")},
		routes: []gc.HostRoute{{IP: netip.MustParseAddr("10.99.0.1"), Veth: netsetup.HostVethName("eni", "live1", "eth0")}}}
	_, err = p.collect(ctx, gc.FromSandboxes(nil), gc.Options{Grace: 600e9, Force: true}, false, host)
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
		store func(*alloc.MemStore) alloc.Store
	}{
		{"corrupt", func(s *alloc.MemStore) alloc.Store { return failingStore{s, alloc.ErrCorrupt} }},
		{"newer version", func(s *alloc.MemStore) alloc.Store { return failingStore{s, alloc.ErrUnsupportedVersion} }},
		{"untrusted", func(s *alloc.MemStore) alloc.Store { return failingStore{s, alloc.ErrInsecure} }},
		{"lost", func(s *alloc.MemStore) alloc.Store { return s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, w, s := lostNode(t)
			p.mgr.Store = tc.store(s)
			var logs strings.Builder
			p.log = slog.New(slog.NewTextHandler(&logs, nil))
			veth := netsetup.HostVethName("eni", "live1", "eth0")
			if err := p.del(context.Background(), att("live1").Key); err != nil {
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
		p.mgr.Store = failingStore{s, alloc.ErrLockTimeout}
		if err := p.del(context.Background(), att("live1").Key); !errors.Is(err, alloc.ErrLockTimeout) {
			t.Errorf("DEL on a busy lock: %v, want the timeout (the runtime retries)", err)
		}
		if len(w.torn) != 0 {
			t.Errorf("tore down %v on a lock timeout", w.torn)
		}
	})
}

// failingStore fails every Load with err.
type failingStore struct {
	*alloc.MemStore
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
