package provider

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/netconf"
)

func TestPoolReady(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	w := section.WarmConfig{WarmIPTarget: 5}
	limits := &section.Limits{MaxENIs: 1, IPv4PerENI: 4}
	filled := func(g *section.PassOutcome) *section.EC2 {
		return &section.EC2{InstanceID: "i-1", VerifiedBoot: "b", FilledBoot: "b", Growth: g}
	}
	outcome := func(result string, streak int, boot string) *section.PassOutcome {
		return &section.PassOutcome{At: now, Result: result, Streak: streak, Boot: boot, Message: "because"}
	}
	full := &section.EC2{InstanceID: "i-1", VerifiedBoot: "b", FilledBoot: "b", Limits: limits,
		ENIs:   []section.ENI{{ID: "eni-1", Secondary: 3}},
		Growth: outcome(section.PassSubnetFull, 0, "b")}
	for _, tc := range []struct {
		name string
		sec  *section.EC2
		c    alloc.Counts
		w    section.WarmConfig
		want string // "" ready, else a part of the reason
	}{
		{"no section", nil, alloc.Counts{}, w, "no warm pass has described"},
		{"IMDS failed before any pass", &section.EC2{Growth: outcome(section.PassFailed, 0, "b")}, alloc.Counts{}, w, "failed: because"},
		{"checked in the last boot (a reboot)", &section.EC2{InstanceID: "i-1", VerifiedBoot: "a", FilledBoot: "a"}, alloc.Counts{Total: 9, Free: 9}, w, "not been checked"},
		{"checked, not filled", &section.EC2{InstanceID: "i-1", VerifiedBoot: "b"}, alloc.Counts{Total: 2, Free: 2}, w, "not been filled since boot (2 free of 2 addresses; warmIPTarget 5)"},
		{"filled in the last boot only", &section.EC2{InstanceID: "i-1", VerifiedBoot: "b", FilledBoot: "a"}, alloc.Counts{Total: 3, Free: 3}, w, "not been filled since boot"},
		{"not filled, the last pass throttled", &section.EC2{InstanceID: "i-1", VerifiedBoot: "b", Growth: outcome(section.PassThrottled, 1, "b")}, alloc.Counts{}, w, "throttled by EC2"},
		{"checked, targets met (a launch template)", &section.EC2{InstanceID: "i-1", VerifiedBoot: "b"}, alloc.Counts{Total: 5, Free: 5}, w, ""},
		{"minimumIPTarget not met", &section.EC2{InstanceID: "i-1", VerifiedBoot: "b"}, alloc.Counts{Total: 5, Free: 5}, section.WarmConfig{WarmIPTarget: 5, MinimumIPTarget: 8}, "minimumIPTarget 8"},
		{"warmIPTarget 0", &section.EC2{InstanceID: "i-1", VerifiedBoot: "b"}, alloc.Counts{}, section.WarmConfig{}, ""},
		{"filled", filled(outcome(section.PassDone, 0, "b")), alloc.Counts{Total: 5, Free: 5}, w, ""},
		{"filled, drained, can grow", filled(outcome(section.PassDone, 0, "b")), alloc.Counts{Total: 5, Allocated: 5}, w, ""},
		{"filled, drained, subnet full", filled(outcome(section.PassSubnetFull, 0, "b")), alloc.Counts{Total: 5, Allocated: 5}, w, "cannot grow: the warm pass of"},
		{"filled, drained, IAM denied", filled(outcome(section.PassDenied, 0, "b")), alloc.Counts{Total: 5, Allocated: 5}, w, "denied by IAM"},
		{"filled, drained, failed (IMDS)", filled(outcome(section.PassFailed, 0, "b")), alloc.Counts{Total: 5, Allocated: 5}, w, "cannot grow"},
		{"filled, drained, throttled twice", filled(outcome(section.PassThrottled, 2, "b")), alloc.Counts{Total: 5, Allocated: 5}, w, ""},
		{"filled, drained, throttled three times", filled(outcome(section.PassThrottled, 3, "b")), alloc.Counts{Total: 5, Allocated: 5}, w, "throttled by EC2"},
		{"filled, drained, subnet full in the last boot", filled(outcome(section.PassSubnetFull, 0, "a")), alloc.Counts{Total: 5, Allocated: 5}, w, ""},
		{"filled, subnet full, one free", filled(outcome(section.PassSubnetFull, 0, "b")), alloc.Counts{Total: 5, Allocated: 4, Free: 1}, w, ""},
		{"filled, subnet full, one cooling", filled(outcome(section.PassSubnetFull, 0, "b")), alloc.Counts{Total: 5, Allocated: 4, Cooling: 1}, w, ""},
		{"full node (its pods hold every address)", full, alloc.Counts{Total: 3, Allocated: 3}, w, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := PoolReady(&alloc.State{EC2: tc.sec}, tc.c, tc.w, "b")
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("not ready: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrPoolNotReady) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want not ready saying %q", err, tc.want)
			}
		})
	}
}

// TestPoolReadyHostileStore: what a hand-edited or hostile store puts in
// an outcome does not make the reason unbounded.
func TestPoolReadyHostileStore(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	sec := &section.EC2{InstanceID: "i-1", VerifiedBoot: "b", Growth: &section.PassOutcome{Result: huge, Message: huge, Boot: "b"}}
	err := PoolReady(&alloc.State{EC2: sec}, alloc.Counts{}, section.WarmConfig{WarmIPTarget: 1}, "b")
	if !errors.Is(err, ErrPoolNotReady) || len(err.Error()) > 2*section.MaxOutcomeMessage+300 {
		t.Errorf("reason of %d bytes: %.200v", len(err.Error()), err)
	}
}

// fakeFull serves IMDS reads as refresh says; it never runs a command.
type fakeFull struct {
	refreshes *int
	refresh   func(mgr *alloc.Manager) error
}

func (f fakeFull) RefreshIMDS(ctx context.Context, _ *netconf.Config, mgr *alloc.Manager) (Refreshed, error) {
	*f.refreshes++
	return Refreshed{}, f.refresh(mgr)
}

func (f fakeFull) CheckIMDS(context.Context, *netconf.Config) error { return nil }

func (f fakeFull) WarmCommand(*netconf.Config, string) (*exec.Cmd, func(), error) {
	return nil, nil, errors.New("no commands in tests")
}

// countingWarm counts the passes started.
type countingWarm struct{ n *int }

func (c countingWarm) StartWarm(context.Context, *netconf.Config, bool) (string, error) {
	*c.n++
	return "test", nil
}

type statusEnv struct {
	s                 EC2
	now               time.Time
	refreshes, starts int
}

// newStatusEnv is an ec2 provider over a store in a temporary directory
// whose IMDS reads run refresh.
func newStatusEnv(t *testing.T, conf string, refresh func(mgr *alloc.Manager) error) *statusEnv {
	t.Helper()
	dir := t.TempDir()
	cfg, err := netconf.Parse([]byte(`{"cniVersion":"1.1.0","name":"pods","stateDir":"` + dir + `","pool":{"source":"ec2"` + conf + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	store, err := alloc.NewDiskStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := &statusEnv{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	mgr := &alloc.Manager{Store: store, Pool: cfg.Pool, BootID: "b", Cooldown: 30 * time.Second, LockTimeout: time.Second,
		Now: func() time.Time { return e.now }}
	e.s = EC2{Cfg: cfg, Mgr: mgr, Full: fakeFull{&e.refreshes, refresh}, Warm: countingWarm{&e.starts}, Now: mgr.Now}
	return e
}

func (e *statusEnv) status(t *testing.T) error {
	t.Helper()
	st, _, err := e.s.Mgr.Peek()
	if err != nil {
		t.Fatal(err)
	}
	return e.s.Ready(context.Background(), st, true)
}

// launchTemplate records what an IMDS look of this boot finds on a node
// whose launch template assigned n addresses.
func launchTemplate(n int) func(mgr *alloc.Manager) error {
	return func(mgr *alloc.Manager) error {
		return mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
			st.EC2 = &section.EC2{InstanceID: "i-1", VerifiedBoot: mgr.BootID, ENIs: []section.ENI{{ID: "eni-1", Secondary: n}}}
			ip := netip.MustParseAddr("10.0.0.10")
			for range n {
				st.EC2.Addrs = append(st.EC2.Addrs, section.Addr{IP: ip, ENI: "eni-1", Origin: section.OriginFound})
				ip = ip.Next()
			}
			return true, nil
		})
	}
}

// TestStatusStartsWarm: a STATUS that finds the pool not ready makes
// progress by itself: it looks at IMDS while the store is unchecked in
// this boot, then starts a warm pass, at most once per statusStartEvery;
// not while ADDs wait (they start passes), nor while throttled passes
// pause.
func TestStatusStartsWarm(t *testing.T) {
	e := newStatusEnv(t, "", launchTemplate(2))
	err := e.status(t)
	if !errors.Is(err, ErrPoolNotReady) || !strings.Contains(err.Error(), "started a warm pass (test)") {
		t.Fatalf("first STATUS: %v", err)
	}
	if e.refreshes != 1 || e.starts != 1 {
		t.Errorf("IMDS looks %d, passes started %d; want 1 and 1", e.refreshes, e.starts)
	}
	e.now = e.now.Add(5 * time.Second)
	if err := e.status(t); !errors.Is(err, ErrPoolNotReady) || !strings.Contains(err.Error(), "was started for it at") {
		t.Errorf("STATUS 5 s later: %v", err)
	}
	if e.starts != 1 {
		t.Errorf("STATUS 5 s later started another pass")
	}
	e.now = e.now.Add(6 * time.Second)
	if err := e.status(t); !errors.Is(err, ErrPoolNotReady) {
		t.Errorf("STATUS 11 s later: %v", err)
	}
	if e.refreshes != 1 || e.starts != 2 {
		t.Errorf("11 s later: IMDS looks %d, passes started %d; want 1 (checked in this boot) and 2", e.refreshes, e.starts)
	}

	// ADDs waiting: they start the passes.
	e.now = e.now.Add(time.Minute)
	k := alloc.Key{Network: "pods", ContainerID: "c", IfName: "eth0"}
	e.s.Mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		st.Demands = append(st.Demands, alloc.Demand{Key: k, Since: e.now, Until: e.now.Add(20 * time.Second)})
		return true, nil
	})
	if err := e.status(t); !strings.Contains(fmtErr(err), "1 ADDs wait") || e.starts != 2 {
		t.Errorf("with an ADD waiting: %v, %d starts", err, e.starts)
	}
	// Throttled passes: their pause.
	e.now = e.now.Add(time.Minute)
	e.s.Mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		st.EC2.Growth = &section.PassOutcome{At: e.now.Add(-time.Second), Result: section.PassThrottled, Streak: 5, Boot: "b"}
		return true, nil
	})
	if err := e.status(t); !strings.Contains(fmtErr(err), "waits out EC2's throttling") || e.starts != 2 {
		t.Errorf("in a throttling pause: %v, %d starts", err, e.starts)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestStatusReadyFromLaunchTemplate: on a node whose launch template
// assigned the addresses, the first STATUS reads IMDS and finds the node
// ready, starting no pass.
func TestStatusReadyFromLaunchTemplate(t *testing.T) {
	e := newStatusEnv(t, "", launchTemplate(6))
	if err := e.status(t); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	if e.refreshes != 1 || e.starts != 0 {
		t.Errorf("IMDS looks %d, passes started %d; want 1 and 0", e.refreshes, e.starts)
	}
}

// TestStatusReadyWhenFilledOff: readyWhenFilled false is the STATUS of
// before: an empty pool with IMDS answering is ready, and nothing starts.
func TestStatusReadyWhenFilledOff(t *testing.T) {
	e := newStatusEnv(t, `,"readyWhenFilled":false`, launchTemplate(0))
	if err := e.status(t); err != nil || e.starts != 0 || e.refreshes != 0 {
		t.Errorf("STATUS: %v, %d starts, %d IMDS looks", err, e.starts, e.refreshes)
	}
}

// TestStatusReadOnly: `eni-cni status` (act false) says why the pool is
// not ready and does nothing about it: no IMDS look, no pass, no file.
func TestStatusReadOnly(t *testing.T) {
	e := newStatusEnv(t, "", launchTemplate(6))
	st, _, err := e.s.Mgr.Peek()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.s.Ready(context.Background(), st, false); !errors.Is(err, ErrPoolNotReady) {
		t.Errorf("read-only STATUS: %v, want not ready", err)
	}
	if e.refreshes != 0 || e.starts != 0 {
		t.Errorf("IMDS looks %d, passes started %d; want none", e.refreshes, e.starts)
	}
	if _, err := os.Stat(filepath.Join(e.s.Cfg.StateDir, statusStampName)); !os.IsNotExist(err) {
		t.Errorf("read-only STATUS left %s: %v", statusStampName, err)
	}
}
