package alloc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
)

func newFamilyManager(t *testing.T, fams []Family, specs ...string) (*Manager, *allocfake.Store, *clock) {
	t.Helper()
	rs, err := ParseRangesOf(specs, fams)
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	s := allocfake.NewStore()
	return &Manager{Store: s, Pool: rs, Families: fams, BootID: "boot-1", Cooldown: 30 * time.Second, Now: c.Now}, s, c
}

var dual = []Family{IPv4, IPv6}

func TestDualStackTakesOneOfEachInOneSave(t *testing.T) {
	m, s, _ := newFamilyManager(t, dual, "10.0.0.1-10.0.0.2", "fd00::/126")
	ctx := context.Background()
	a, _, err := m.Allocate(ctx, req("c1"))
	if err != nil {
		t.Fatal(err)
	}
	if a.IP != netip.MustParseAddr("10.0.0.1") || a.IP6 != netip.MustParseAddr("fd00::1") {
		t.Fatalf("allocated %s and %s, want 10.0.0.1 and fd00::1", a.IP, a.IP6)
	}
	if s.Saves != 1 {
		t.Errorf("%d saves, want one for both addresses", s.Saves)
	}
	if !bytes.Contains(s.Bytes(), []byte(`"version":3`)) || !bytes.Contains(s.Bytes(), []byte(`"ip6":"fd00::1"`)) {
		t.Errorf("state file:\n%s", s.Bytes())
	}
	again, existed, err := m.Allocate(ctx, req("c1"))
	if err != nil || !existed || again.IP != a.IP || again.IP6 != a.IP6 {
		t.Errorf("repeated ADD: %+v existed=%v err=%v", again, existed, err)
	}
}

// A family with no free address fails the ADD and records nothing: the
// other family's address is not taken (both or none).
func TestDualStackBothOrNone(t *testing.T) {
	m, s, _ := newFamilyManager(t, dual, "10.0.0.1-10.0.0.5", "fd00::1-fd00::1")
	ctx := context.Background()
	if _, _, err := m.Allocate(ctx, req("c1")); err != nil {
		t.Fatal(err)
	}
	saves := s.Saves
	_, _, err := m.Allocate(ctx, req("c2"))
	var ex *ExhaustedError
	if !errors.As(err, &ex) || !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "no free ipv6 address") {
		t.Fatalf("err = %v, want no free ipv6 address", err)
	}
	st, c, _ := m.Snapshot(ctx)
	if s.Saves != saves || len(st.Allocations) != 1 {
		t.Errorf("failed ADD saved (%d saves) or recorded: %+v", s.Saves-saves, st.Allocations)
	}
	v4, _ := c.Families.Of(IPv4)
	v6, _ := c.Families.Of(IPv6)
	if v4 != (Counts{Total: 5, Free: 4, Allocated: 1}) || v6 != (Counts{Total: 1, Allocated: 1}) {
		t.Errorf("counts ipv4 %+v ipv6 %+v", v4, v6)
	}
	if c.Total != 6 || c.Free != 4 || c.Allocated != 2 {
		t.Errorf("summed counts %+v", c)
	}
}

func TestDualStackReleaseCoolsBoth(t *testing.T) {
	m, _, clk := newFamilyManager(t, dual, "10.0.0.1-10.0.0.2", "fd00::1-fd00::2")
	ctx := context.Background()
	a, _, _ := m.Allocate(ctx, req("c1"))
	if _, found, err := m.Release(ctx, key("c1"), a.IP); err != nil || !found {
		t.Fatalf("release: found=%v %v", found, err)
	}
	st, c, _ := m.Snapshot(ctx)
	if len(st.Cooling) != 2 || c.Cooling != 2 {
		t.Fatalf("cooling %+v (counts %+v), want both addresses", st.Cooling, c)
	}
	b, _, _ := m.Allocate(ctx, req("c2"))
	if b.IP == a.IP || b.IP6 == a.IP6 {
		t.Errorf("cooling address reused: %+v after %+v", b, a)
	}
	clk.Advance(31 * time.Second)
	_, _, _ = m.Release(ctx, key("c2"), b.IP)
	cc, _, err := m.Allocate(ctx, req("c3"))
	if err != nil || cc.IP != a.IP || cc.IP6 != a.IP6 {
		t.Errorf("after the cooldown got %+v (%v), want %s and %s back", cc, err, a.IP, a.IP6)
	}
}

// An IPv6-only network keeps its one address in IP; a /64 is walked from
// the last address given, not from its first one.
func TestIPv6OnlyLargeRange(t *testing.T) {
	m, s, _ := newFamilyManager(t, []Family{IPv6}, "fd00:1::/64")
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		a, _, err := m.Allocate(ctx, req(fmt.Sprint("c", i)))
		if err != nil {
			t.Fatal(err)
		}
		if want := netip.MustParseAddr(fmt.Sprint("fd00:1::", i)); a.IP != want || a.IP6.IsValid() {
			t.Fatalf("allocation %d: %s / %s, want %s in IP", i, a.IP, a.IP6, want)
		}
	}
	st, c, _ := m.Snapshot(ctx)
	if st.LastIP6 != netip.MustParseAddr("fd00:1::3") || st.LastIP.IsValid() {
		t.Errorf("lastIP %s lastIP6 %s", st.LastIP, st.LastIP6)
	}
	if v6, ok := c.Families.Of(IPv6); !ok || v6.Total != math.MaxInt || v6.Allocated != 3 {
		t.Errorf("counts %+v", c)
	}
	if !bytes.Contains(s.Bytes(), []byte(`"version":3`)) {
		t.Errorf("an IPv6 state written as %s", s.Bytes()[:20])
	}
}

// An IPv4 state is written as version 2, which the release before IPv6
// reads; only a state holding an IPv6 address is version 3, and a
// version-2 file with one is corrupt.
func TestVersionFollowsContent(t *testing.T) {
	st := NewState("b")
	st.Allocations = append(st.Allocations, Allocation{Key: key("c1"), IP: netip.MustParseAddr("10.0.0.1")})
	b, _ := EncodeState(st)
	if !bytes.HasPrefix(b, []byte(`{"version":2,`)) || bytes.Contains(b, []byte("ip6")) {
		t.Errorf("IPv4 state encoded as %s", b)
	}
	st.Cooling = append(st.Cooling, Cooling{IP: netip.MustParseAddr("fd00::9")})
	b, _ = EncodeState(st)
	if !bytes.HasPrefix(b, []byte(`{"version":3,`)) {
		t.Errorf("state with IPv6 cooling encoded as %s", b)
	}
	if _, err := DecodeState(b); err != nil {
		t.Errorf("decode version 3: %v", err)
	}
	v2 := bytes.Replace(b, []byte(`"version":3`), []byte(`"version":2`), 1)
	if _, err := DecodeState(v2); !errors.Is(err, ErrCorrupt) {
		t.Errorf("version 2 with IPv6: %v, want corrupt", err)
	}
	for _, bad := range []string{
		`{"version":3,"bootID":"b","allocations":[{"network":"n","containerID":"c","ifname":"eth0","ip":"fd00::1","ip6":"fd00::2","hostVeth":"v"}],"cooling":[]}`,
		`{"version":3,"bootID":"b","allocations":[{"network":"n","containerID":"c","ifname":"eth0","ip":"10.0.0.1","ip6":"10.0.0.2","hostVeth":"v"}],"cooling":[]}`,
		`{"version":3,"bootID":"b","allocations":[{"network":"n","containerID":"c","ifname":"eth0","ip":"fe80::1","hostVeth":"v"}],"cooling":[]}`,
		`{"version":3,"bootID":"b","allocations":[{"network":"n","containerID":"c","ifname":"eth0","ip":"10.0.0.1","ip6":"fd00::1","hostVeth":"v"},{"network":"n","containerID":"d","ifname":"eth0","ip":"fd00::1","hostVeth":"w"}],"cooling":[]}`,
		`{"version":4,"bootID":"b","allocations":[],"cooling":[]}`,
	} {
		if _, err := DecodeState([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestParseRangesOfFamilies(t *testing.T) {
	rs, err := ParseRangesOf([]string{"fd00::/120", "10.0.0.0/30", "fd01::5-fd01::6"}, dual)
	if err != nil {
		t.Fatal(err)
	}
	want := Ranges{
		{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::ff")},
		{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")},
		{netip.MustParseAddr("fd01::5"), netip.MustParseAddr("fd01::6")},
	}
	if fmt.Sprint(rs) != fmt.Sprint(want) {
		t.Errorf("ranges %v, want %v", rs, want)
	}
	if rs.FamilySize(IPv6) != 257 || rs.FamilySize(IPv4) != 2 || rs.Size(nil) != 259 {
		t.Errorf("sizes %d %d %d", rs.FamilySize(IPv6), rs.FamilySize(IPv4), rs.Size(nil))
	}
	for _, tt := range []struct {
		specs []string
		fams  []Family
		want  string
	}{
		{[]string{"10.0.0.0/24"}, []Family{IPv6}, "an IPv4 range on a network of IPv6 only"},
		{[]string{"fd00::/64"}, []Family{IPv4}, "only IPv4"},
		{[]string{"10.0.0.1-fd00::1"}, dual, "different families"},
		{[]string{"fe80::/64"}, dual, "reaches into fe80::/10"},
		{[]string{"::ffff:10.0.0.0/120"}, dual, "reaches into ::/8"},
		{[]string{"ff02::/64"}, dual, "reaches into ff00::/8"},
		{[]string{"fd00::1/64"}, dual, "host bits set"},
		{[]string{"fd00::/64", "fd00::10-fd00::20"}, dual, "overlaps"},
		{[]string{"fd00::1%eth0-fd00::2"}, dual, "zone"},
	} {
		if _, err := ParseRangesOf(tt.specs, tt.fams); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseRangesOf(%q, %v) = %v, want error containing %q", tt.specs, tt.fams, err, tt.want)
		}
	}
	if n := (Ranges{{netip.MustParseAddr("::1:0:0:0:0"), netip.MustParseAddr("ffff::")}}).Size(nil); n != math.MaxInt {
		t.Errorf("huge range size %d, want MaxInt", n)
	}
}

// The walk from the last address wraps to the first free one.
func TestIPv6PickWraps(t *testing.T) {
	m, _, clk := newFamilyManager(t, []Family{IPv6}, "fd00::1-fd00::3")
	ctx := context.Background()
	for i := range 3 {
		if _, _, err := m.Allocate(ctx, req(fmt.Sprint("c", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := m.Allocate(ctx, req("c9")); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("full pool: %v", err)
	}
	_, _, _ = m.Release(ctx, key("c1"), netip.Addr{})
	clk.Advance(time.Minute)
	a, _, err := m.Allocate(ctx, req("c9"))
	if err != nil || a.IP != netip.MustParseAddr("fd00::2") {
		t.Errorf("got %s (%v), want the freed fd00::2", a.IP, err)
	}
}

// A dual-stack pool whose IPv4 ranges come before a /64 wraps around its
// IPv4 ranges without walking the IPv6 one, and says when IPv4 runs out.
func TestDualStackIPv4WrapsBeforeLargeIPv6(t *testing.T) {
	m, _, clk := newFamilyManager(t, dual, "10.0.0.1-10.0.0.2", "fd00:1::/64")
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		for i := range 2 {
			if _, _, err := m.Allocate(ctx, req(fmt.Sprint("c", i))); err != nil {
				done <- err
				return
			}
		}
		_, _, _ = m.Release(ctx, key("c0"), netip.Addr{})
		clk.Advance(time.Minute)
		a, _, err := m.Allocate(ctx, req("c2"))
		if err == nil && a.IP != netip.MustParseAddr("10.0.0.1") {
			err = fmt.Errorf("wrapped to %s, want 10.0.0.1", a.IP)
		}
		if err == nil {
			_, _, err = m.Allocate(ctx, req("c3"))
			if !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "ipv4") {
				err = fmt.Errorf("full IPv4: %v", err)
			} else {
				err = nil
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("allocation walked the IPv6 range")
	}
}
