package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
)

// fakeWire models the kernel as a set of wired host veths.
type fakeWire struct {
	mu         sync.Mutex
	wired      map[string]netip.Addr // host veth -> routed pod IP
	setupErr   error
	unrouteErr error
	vethErr    error
	unrouted   []string
	torn       []string // veths deleted
}

func newFakeWire() *fakeWire { return &fakeWire{wired: map[string]netip.Addr{}} }

var (
	hostMAC = net.HardwareAddr{2, 0, 0, 0, 0, 1}
	podMAC  = net.HardwareAddr{2, 0, 0, 0, 0, 2}
)

func (f *fakeWire) Setup(p netsetup.Pod) (netsetup.Links, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.setupErr != nil {
		return netsetup.Links{}, f.setupErr
	}
	f.wired[p.HostVeth] = p.IP
	return netsetup.Links{HostMAC: hostMAC, PodMAC: podMAC, Default: true}, nil
}

func (f *fakeWire) Check(p netsetup.Pod) (netsetup.Links, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ip, ok := f.wired[p.HostVeth]; !ok || ip != p.IP {
		return netsetup.Links{}, fmt.Errorf("%w: host veth %s", netsetup.ErrHostMismatch, p.HostVeth)
	}
	return netsetup.Links{HostMAC: hostMAC, PodMAC: podMAC, Default: true}, nil
}

func (f *fakeWire) Unroute(atts []netsetup.Attachment) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unrouteErr != nil {
		return f.unrouteErr
	}
	for _, a := range atts {
		f.unrouted = append(f.unrouted, a.HostVeth)
		if ip, ok := f.wired[a.HostVeth]; ok && ip == a.IP {
			f.wired[a.HostVeth] = netip.Addr{} // still there, routed nowhere
		}
	}
	return nil
}

func (f *fakeWire) DeleteVeths(names ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.torn = append(f.torn, names...)
	if f.vethErr != nil {
		return f.vethErr
	}
	for _, n := range names {
		delete(f.wired, n)
	}
	return nil
}

// PodRoutes lists the wired veths' routes (all of them carry our prefix).
func (f *fakeWire) PodRoutes(string) ([]netsetup.PodRoute, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []netsetup.PodRoute
	for veth, ip := range f.wired {
		if ip.IsValid() {
			out = append(out, netsetup.PodRoute{IP: ip, Veth: veth})
		}
	}
	return out, nil
}

func newTestPlugin(t *testing.T, pool string) (*Plugin, *fakeWire, *allocfake.Store) {
	t.Helper()
	cfg, err := netconf.Parse([]byte(`{"cniVersion":"1.0.0","name":"pods","pool":{"source":"static","ranges":["` + pool + `"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := allocfake.NewStore()
	w := newFakeWire()
	mgr := &alloc.Manager{Store: s, Pool: cfg.Pool, BootID: "b", Cooldown: cfg.Cooldown, LockTimeout: time.Second}
	return newPluginWith(cfg, mgr, w, staticProvider{cfg.Pool}), w, s
}

func att(cid string) attachment {
	return attachment{Key: alloc.Key{Network: "pods", ContainerID: cid, IfName: "eth0"}, Netns: "/run/netns/" + cid,
		PodNamespace: "default", PodName: "web-" + cid, PodUID: "uid-" + cid}
}

func TestAddResultShape(t *testing.T) {
	p, w, _ := newTestPlugin(t, "10.99.0.0/24")
	res, err := p.add(context.Background(), att("c1"))
	if err != nil {
		t.Fatal(err)
	}
	veth := netsetup.HostVethName("eni", "c1", "eth0")
	if len(res.Interfaces) != 2 || res.Interfaces[0].Name != veth || res.Interfaces[1].Sandbox != "/run/netns/c1" ||
		res.Interfaces[1].Mac != podMAC.String() || res.Interfaces[0].Mac != hostMAC.String() {
		t.Errorf("interfaces: %+v %+v", res.Interfaces[0], res.Interfaces[1])
	}
	if len(res.IPs) != 1 || res.IPs[0].Address.String() != "10.99.0.1/32" || res.IPs[0].Gateway.String() != "169.254.1.1" || *res.IPs[0].Interface != 1 {
		t.Errorf("ips: %+v", res.IPs[0])
	}
	if len(res.Routes) != 1 || res.Routes[0].Dst.String() != "0.0.0.0/0" || res.Routes[0].GW.String() != "169.254.1.1" {
		t.Errorf("routes: %+v", res.Routes)
	}
	if w.wired[veth].String() != "10.99.0.1" {
		t.Errorf("not wired: %v", w.wired)
	}
	for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		r, err := res.GetAsVersion(v)
		if err != nil || r.Version() != v {
			t.Errorf("convert to %s: %v", v, err)
		}
	}
}

func TestAddIdempotentAndRepairs(t *testing.T) {
	p, w, _ := newTestPlugin(t, "10.99.0.0/24")
	ctx := context.Background()
	first, _ := p.add(ctx, att("c1"))
	again, err := p.add(ctx, att("c1"))
	if err != nil || again.IPs[0].Address.String() != first.IPs[0].Address.String() {
		t.Fatalf("repeat ADD: %v %v", again, err)
	}
	if len(w.torn) != 0 {
		t.Errorf("healthy wiring torn down on repeat: %v", w.torn)
	}
	clear(w.wired) // the kernel lost it, e.g. ADD died half-way
	repaired, err := p.add(ctx, att("c1"))
	if err != nil || repaired.IPs[0].Address.String() != first.IPs[0].Address.String() || len(w.wired) != 1 {
		t.Fatalf("repair: %v %v wired=%v", repaired, err, w.wired)
	}
}

func TestAddWiringFailureReleases(t *testing.T) {
	p, w, s := newTestPlugin(t, "10.99.0.1-10.99.0.1")
	w.setupErr = errors.New("netlink says no")
	_, err := p.add(context.Background(), att("c1"))
	if err == nil || !strings.Contains(err.Error(), "netlink says no") || !strings.Contains(err.Error(), "10.99.0.1") {
		t.Fatalf("err = %v", err)
	}
	st, _ := s.Load()
	if len(st.Allocations) != 0 || len(st.Cooling) != 0 {
		t.Errorf("failed ADD left %+v / cooling %+v", st.Allocations, st.Cooling)
	}
	w.setupErr = nil
	if _, err := p.add(context.Background(), att("c2")); err != nil {
		t.Errorf("the only address must be free again: %v", err)
	}
}

func TestAddExhaustedCode(t *testing.T) {
	p, _, _ := newTestPlugin(t, "10.99.0.1-10.99.0.1")
	p.add(context.Background(), att("c1"))
	_, err := p.add(context.Background(), att("c2"))
	ce := toCNIError(err)
	if ce.Code != types.ErrTryAgainLater || !strings.Contains(ce.Msg, "1 allocated") || !strings.Contains(ce.Msg, "c2/eth0") {
		t.Errorf("got %d %q", ce.Code, ce.Msg)
	}
}

func TestDel(t *testing.T) {
	p, w, s := newTestPlugin(t, "10.99.0.0/24")
	ctx := context.Background()
	p.add(ctx, att("c1"))
	if err := p.del(ctx, att("c1").Key, ""); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Load()
	if len(st.Allocations) != 0 || len(st.Cooling) != 1 || len(w.wired) != 0 {
		t.Errorf("after DEL: %+v cooling %+v wired %v", st.Allocations, st.Cooling, w.wired)
	}
	if err := p.del(ctx, att("c1").Key, ""); err != nil {
		t.Errorf("second DEL: %v", err)
	}
	if err := p.del(ctx, att("never").Key, ""); err != nil {
		t.Errorf("DEL of unknown: %v", err)
	}
	if last := w.torn[len(w.torn)-1]; last != netsetup.HostVethName("eni", "never", "eth0") {
		t.Errorf("unknown attachment: tore down %q, want the derived name", last)
	}
}

func TestDelTeardownFailureKeepsAllocation(t *testing.T) {
	p, w, s := newTestPlugin(t, "10.99.0.0/24")
	ctx := context.Background()
	p.add(ctx, att("c1"))
	w.unrouteErr = errors.New("netlink busy")
	if err := p.del(ctx, att("c1").Key, ""); err == nil {
		t.Fatal("DEL reported success although removing the routes failed")
	}
	st, _ := s.Load()
	if len(st.Allocations) != 1 || len(w.torn) != 0 {
		t.Error("address freed (or veth deleted) while still routed to the old veth")
	}
}

func TestDelVethFailureAfterUnroute(t *testing.T) {
	p, w, s := newTestPlugin(t, "10.99.0.0/24")
	ctx := context.Background()
	p.add(ctx, att("c1"))
	w.vethErr = errors.New("device busy")
	err := p.del(ctx, att("c1").Key, "")
	if err == nil || !strings.Contains(err.Error(), "device busy") {
		t.Fatalf("DEL must report the failed veth deletion so the runtime retries: %v", err)
	}
	st, _ := s.Load()
	if len(st.Allocations) != 0 || len(st.Cooling) != 1 {
		t.Error("an unrouted address is safe to release into cooldown")
	}
	w.vethErr = nil
	if err := p.del(ctx, att("c1").Key, ""); err != nil || w.torn[len(w.torn)-1] != netsetup.HostVethName("eni", "c1", "eth0") {
		t.Errorf("retried DEL must delete the veth by its derived name: %v %v", err, w.torn)
	}
}

func TestCheck(t *testing.T) {
	p, w, _ := newTestPlugin(t, "10.99.0.0/24")
	ctx := context.Background()
	res, _ := p.add(ctx, att("c1"))
	if err := p.check(ctx, att("c1"), res); err != nil {
		t.Fatal(err)
	}
	other := &current.Result{Interfaces: res.Interfaces, IPs: []*current.IPConfig{{Address: net.IPNet{IP: net.ParseIP("10.99.0.9"), Mask: net.CIDRMask(32, 32)}}}}
	if err := p.check(ctx, att("c1"), other); !errors.Is(err, errPrevResult) || toCNIError(err).Code != codeCheckPrevResult {
		t.Errorf("foreign prevResult: %v", err)
	}
	if err := p.check(ctx, att("c9"), res); toCNIError(err).Code != types.ErrUnknownContainer {
		t.Errorf("unknown attachment: %v", err)
	}
	clear(w.wired)
	if err := p.check(ctx, att("c1"), res); !errors.Is(err, netsetup.ErrMismatch) || toCNIError(err).Code != codeCheckHost {
		t.Errorf("missing wiring: %v (code %d)", err, toCNIError(err).Code)
	}
}

func TestStatus(t *testing.T) {
	p, _, s := newTestPlugin(t, "10.99.0.0/24")
	if _, err := p.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.add(context.Background(), att("c1"))
	c, err := p.Status(context.Background())
	if err != nil || c.Allocated != 1 || c.Free != 253 {
		t.Errorf("status %+v %v", c, err)
	}
	s.SaveFn = nil
	bad := &corruptStore{Store: s}
	p.Mgr.Store = bad
	if _, err := p.Status(context.Background()); toCNIError(err).Code != types.ErrPluginNotAvailable {
		t.Errorf("unreadable store: %v", err)
	}
}

type corruptStore struct{ *allocfake.Store }

func (corruptStore) Load() (*alloc.State, error) { return nil, alloc.ErrCorrupt }

func TestToCNIErrorCodes(t *testing.T) {
	tests := []struct {
		err  error
		code uint
	}{
		{netconf.ErrDecode, types.ErrDecodingFailure},
		{netconf.ErrInvalidConfig, types.ErrInvalidNetworkConfig},
		{errInvalidArgs, types.ErrInvalidEnvironmentVariables},
		{errInvalidNetns, types.ErrInvalidNetNS},
		{netsetup.ErrNetNS, types.ErrInvalidNetNS},
		{alloc.ErrLockTimeout, types.ErrTryAgainLater},
		{alloc.ErrPoolExhausted, types.ErrTryAgainLater},
		{netsetup.ErrNoLink, types.ErrTryAgainLater},
		{alloc.ErrCorrupt, types.ErrIOFailure},
		{alloc.ErrUnsupportedVersion, types.ErrIOFailure},
		{errNotReady, types.ErrPluginNotAvailable},
		{errors.New("surprise"), types.ErrInternal},
	}
	for _, tt := range tests {
		wrapped := errors.Join(errors.New("context"), tt.err)
		if got := toCNIError(wrapped).Code; got != tt.code {
			t.Errorf("%v -> %d, want %d", tt.err, got, tt.code)
		}
	}
}

// TestRepeatedAddFailureKeepsAllocation: a runtime repeating ADD for a pod
// that is wired must not lose the pod's address when the repeat fails.
func TestRepeatedAddFailureKeepsAllocation(t *testing.T) {
	p, w, s := newTestPlugin(t, "10.99.0.1-10.99.0.2")
	ctx := context.Background()
	first, err := p.add(ctx, att("c1"))
	if err != nil {
		t.Fatal(err)
	}
	clear(w.wired)                             // the repeat finds the wiring broken and rewires...
	w.setupErr = errors.New("netlink says no") // ...which fails
	if _, err := p.add(ctx, att("c1")); err == nil {
		t.Fatal("failed repeat reported success")
	}
	st, _ := s.Load()
	if len(st.Allocations) != 1 || st.Allocations[0].IP.String() != first.IPs[0].Address.IP.String() {
		t.Fatalf("the pod's allocation was dropped: %+v", st.Allocations)
	}
	w.setupErr = nil
	other, err := p.add(ctx, att("c2"))
	if err != nil || other.IPs[0].Address.IP.Equal(first.IPs[0].Address.IP) {
		t.Fatalf("another pod got the same address: %v %v", other, err)
	}
}
