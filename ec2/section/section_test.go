package section

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestTableNumbersAsTheVPCCNI(t *testing.T) {
	for _, tc := range []struct {
		card, dev, want int
	}{{0, 0, 0}, {0, 1, 2}, {0, 4, 5}, {1, 0, 10100}, {1, 3, 10103}, {2, 1, 10201}} {
		if got := (ENI{NetworkCard: tc.card, DeviceNumber: tc.dev}).Table(); got != tc.want {
			t.Errorf("card %d device %d: table %d, want %d", tc.card, tc.dev, got, tc.want)
		}
	}
}

func instance(id string, enis ...ENIInfo) *Instance {
	return &Instance{ID: id, Type: "t3.medium", AZ: "us-east-1a", ENIs: enis}
}

func TestReconcile(t *testing.T) {
	now := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	primary := ENIInfo{ID: "eni-p", MAC: "02:00:00:00:00:01", PrimaryIP: ip("10.0.0.10"), SubnetCIDR: netip.MustParsePrefix("10.0.0.0/20"),
		Secondary: []netip.Addr{ip("10.0.0.11"), ip("10.0.0.12")}}
	s := &EC2{}
	d := Reconcile(s, instance("i-1", primary), now)
	if !d.Empty() || d.Found != 2 || s.InstanceID != "i-1" || s.Region != "us-east-1" {
		t.Fatalf("first: %+v, section %+v", d, s)
	}
	if a := s.Addrs[0]; a.Origin != OriginFound || a.IP != ip("10.0.0.11") {
		t.Errorf("found address %+v", a)
	}

	// A new ENI appears, an address disappears (old enough), one is tombstoned.
	second := ENIInfo{ID: "eni-s", MAC: "02:00:00:00:00:02", DeviceNumber: 1, PrimaryIP: ip("10.0.0.20"), Secondary: []netip.Addr{ip("10.0.0.21")}}
	s.Bury(ip("10.0.0.13"), now)
	primary.Secondary = []netip.Addr{ip("10.0.0.11"), ip("10.0.0.13")}
	later := now.Add(2 * IMDSGrace)
	d = Reconcile(s, instance("i-1", primary, second), later)
	if len(d.NewENIs) != 1 || d.NewENIs[0] != "eni-s" || len(d.GoneAddrs) != 1 || d.GoneAddrs[0] != ip("10.0.0.12") {
		t.Errorf("drift %+v", d)
	}
	if e, _ := s.ENI("eni-s"); !e.Unverified {
		t.Error("a new ENI seen only in IMDS must wait for its tags")
	}
	if s.IsUsable(ip("10.0.0.21"), nil) {
		t.Error("an address of an unverified ENI is usable")
	}
	for _, a := range s.Addrs {
		if a.IP == ip("10.0.0.13") {
			t.Error("a tombstoned address came back")
		}
	}
	if _, ok := s.ENI("eni-s"); !ok || d.Key() == "" || !strings.Contains(d.String(), "eni-s") {
		t.Errorf("key %q string %q", d.Key(), d)
	}
	if d2 := Reconcile(s, instance("i-1", primary, second), later); d2.Key() != d.Key() {
		t.Error("the same disagreement got another key")
	}

	// An ENI disappears from IMDS: reported, not removed on IMDS's word.
	d = Reconcile(s, instance("i-1", primary), later)
	if len(d.GoneENIs) != 1 || d.GoneENIs[0] != "eni-s" {
		t.Errorf("drift %+v", d)
	}
	if _, ok := s.ENI("eni-s"); !ok {
		t.Error("an ENI was dropped on IMDS's word alone")
	}
}

func TestIdentify(t *testing.T) {
	s := &EC2{InstanceID: "i-builder", ENIs: []ENI{{ID: "eni-1"}}, Addrs: []Addr{{IP: ip("10.0.0.5"), ENI: "eni-1", Origin: OriginAssigned}},
		Pending: []PendingENI{{Token: "t", ID: "eni-2"}}, VerifiedBoot: "b", Dirty: true}
	if got := s.Identify("i-builder"); got != "" || len(s.Addrs) != 1 {
		t.Fatalf("same instance: dropped %q", got)
	}
	if got := s.Identify("i-node"); got != "i-builder" {
		t.Fatalf("dropped %q", got)
	}
	if s.InstanceID != "i-node" || len(s.ENIs)+len(s.Addrs)+len(s.Pending) != 0 || s.Dirty || s.VerifiedBoot != "" {
		t.Errorf("after a mismatch: %+v", s)
	}
	fresh := &EC2{}
	if got := fresh.Identify("i-node"); got != "" {
		t.Errorf("a fresh section dropped %q", got)
	}
}

func TestDropSettledLost(t *testing.T) {
	s := &EC2{Addrs: []Addr{{IP: ip("10.0.0.5"), Lost: true}, {IP: ip("10.0.0.6"), Lost: true}, {IP: ip("10.0.0.7")}}}
	got := s.DropSettledLost(func(a netip.Addr) bool { return a == ip("10.0.0.5") })
	if len(got) != 1 || got[0] != ip("10.0.0.6") || len(s.Addrs) != 2 {
		t.Errorf("dropped %v, left %+v", got, s.Addrs)
	}
}

func TestValidate(t *testing.T) {
	good := Addr{IP: ip("10.0.0.5"), ENI: "eni-1", Origin: OriginFound}
	for name, s := range map[string]*EC2{
		"bad origin":    {Addrs: []Addr{{IP: ip("10.0.0.5"), Origin: "stolen"}}},
		"duplicate":     {Addrs: []Addr{good, good}},
		"no address":    {Addrs: []Addr{{Origin: OriginFound}}},
		"ENI twice":     {ENIs: []ENI{{ID: "eni-1"}, {ID: "eni-1"}}},
		"bad tombstone": {Tombstones: []Tombstone{{}}},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := (&EC2{Addrs: []Addr{good}}).Validate(); err != nil {
		t.Error(err)
	}
	if err := (*EC2)(nil).Validate(); err != nil {
		t.Error(err)
	}
}

// TestPauseFollowsPace: the pause after a throttled pass scales with the
// pace the pass recorded, within 1/32 to 2 times: a node with less of its
// target comes back sooner than one with more, a node whose ADDs waited
// long sooner still, and a hand-edited pace can neither stretch the pause
// past a minute nor shrink it below about a second.
func TestPauseFollowsPace(t *testing.T) {
	at := time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC)
	pause := func(pace float64) time.Duration {
		return (&PassOutcome{At: at, Result: PassThrottled, Streak: 8, Pace: pace}).Pause("i-0123")
	}
	unpaced := pause(0)
	if unpaced < ThrottledCap/2 || unpaced > ThrottledCap {
		t.Fatalf("pause %v without a pace, want %v to %v", unpaced, ThrottledCap/2, ThrottledCap)
	}
	if got := pause(1); got != unpaced {
		t.Errorf("pause %v at pace 1, want %v", got, unpaced)
	}
	if lo, hi := pause(0.3), pause(2); lo >= unpaced || hi <= unpaced || hi > 2*ThrottledCap {
		t.Errorf("pauses %v (pace 0.3), %v (unpaced), %v (pace 2): want rising, at most %v", lo, unpaced, hi, 2*ThrottledCap)
	}
	if got := pause(100); got != pause(2) {
		t.Errorf("pause %v at pace 100, want the cap's %v", got, pause(2))
	}
	if got := pause(0.001); got != pause(MinPausePace) || got < ThrottledCap/64 {
		t.Errorf("pause %v at pace 0.001, want the floor's %v, at least %v", got, pause(MinPausePace), ThrottledCap/64)
	}
	for streak := 1; streak < 8; streak++ {
		o := PassOutcome{At: at, Result: PassThrottled, Streak: streak, Pace: MinPausePace}
		if got := o.Pause("i-0123"); got < minPause/2 {
			t.Errorf("pause %v after %d throttled passes at the smallest pace, want at least %v", got, streak, minPause/2)
		}
	}
	if aged, starved := pause(1.0/16), pause(0.25); aged >= starved {
		t.Errorf("pause %v at pace 1/16, %v at ¼: want an aged node back sooner", aged, starved)
	}
	if (&PassOutcome{At: at, Result: PassDone, Pace: 2}).Pause("i-0123") != 0 {
		t.Error("a pass that was not throttled pauses")
	}
}

// TestMarkFilled: FilledAt is the first time the pool reached its targets
// in a boot; later fills in the same boot keep it, a new boot's first
// fill moves it.
func TestMarkFilled(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var s EC2
	s.MarkFilled("boot-1", t0)
	s.MarkFilled("boot-1", t0.Add(time.Hour))
	if s.FilledBoot != "boot-1" || !s.FilledAt.Equal(t0) {
		t.Errorf("filled %q at %v, want boot-1 at %v", s.FilledBoot, s.FilledAt, t0)
	}
	s.MarkFilled("boot-2", t0.Add(2*time.Hour))
	if s.FilledBoot != "boot-2" || !s.FilledAt.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("filled %q at %v after a new boot, want boot-2 at %v", s.FilledBoot, s.FilledAt, t0.Add(2*time.Hour))
	}
}
