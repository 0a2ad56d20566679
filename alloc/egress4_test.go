package alloc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/eni-cni/eni-cni/alloc"
)

func egressReq(cid string) Request {
	r := req(cid)
	r.Egress4 = true
	return r
}

// The egress address is taken in the pod address's save (one save: a
// kill leaves both or none), recorded beside it, left out of Addrs and
// the counts, and the file is version 3.
func TestEgress4TakenWithTheIPv6Address(t *testing.T) {
	m, s, _ := newFamilyManager(t, []Family{IPv6}, "fd00::/120")
	ctx := context.Background()
	a, _, err := m.Allocate(ctx, egressReq("c1"))
	if err != nil {
		t.Fatal(err)
	}
	if a.IP != netip.MustParseAddr("fd00::1") || a.Egress4 != netip.MustParseAddr("169.254.172.1") {
		t.Fatalf("allocated %s and egress %s", a.IP, a.Egress4)
	}
	if s.Saves != 1 {
		t.Errorf("%d saves, want one for both addresses", s.Saves)
	}
	if len(a.Addrs()) != 1 || len(a.Wired()) != 2 || a.Wired()[1] != a.Egress4 {
		t.Errorf("Addrs %v Wired %v", a.Addrs(), a.Wired())
	}
	if !bytes.Contains(s.Bytes(), []byte(`"egress4":"169.254.172.1"`)) || !bytes.Contains(s.Bytes(), []byte(`"version":3`)) {
		t.Errorf("state file:\n%s", s.Bytes())
	}
	_, c, _ := m.Snapshot(ctx)
	if c.Allocated != 1 || c.Outside != 0 {
		t.Errorf("counts %+v: the egress address is not a pool address", c)
	}
	again, existed, err := m.Allocate(ctx, egressReq("c1"))
	if err != nil || !existed || again != a {
		t.Errorf("repeated ADD: %+v existed=%v err=%v", again, existed, err)
	}
	b, _, _ := m.Allocate(ctx, req("c2"))
	if b.Egress4.IsValid() {
		t.Errorf("an ADD without egress got %s", b.Egress4)
	}
}

// Released together into cooldown, and round-robin: a freed egress
// address comes back last.
func TestEgress4ReleasedAndCooledWithThePod(t *testing.T) {
	m, _, clk := newFamilyManager(t, []Family{IPv6}, "fd00::/120")
	ctx := context.Background()
	a, _, _ := m.Allocate(ctx, egressReq("c1"))
	if _, found, err := m.Release(ctx, key("c1"), a.IP); err != nil || !found {
		t.Fatalf("release: %v %v", found, err)
	}
	st, _, _ := m.Snapshot(ctx)
	if len(st.Cooling) != 2 || st.Cooling[1].IP != a.Egress4 {
		t.Fatalf("cooling %+v, want both addresses", st.Cooling)
	}
	clk.Advance(time.Minute)
	b, _, _ := m.Allocate(ctx, egressReq("c2"))
	if b.Egress4 != netip.MustParseAddr("169.254.172.2") {
		t.Errorf("egress %s after a release of %s, want the next one", b.Egress4, a.Egress4)
	}
}

// A full egress range fails the ADD and takes nothing, not even the IPv6
// address; the walk wraps around past the range's broadcast address.
func TestEgress4Exhausted(t *testing.T) {
	m, s, _ := newFamilyManager(t, []Family{IPv6}, "fd00::/64")
	ctx := context.Background()
	const n = 1022
	for i := range n {
		if _, _, err := m.Allocate(ctx, egressReq(fmt.Sprint("c", i))); err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
	}
	saves := s.Saves
	_, _, err := m.Allocate(ctx, egressReq("full"))
	if !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "no free ipv4 egress address (1022 allocated") {
		t.Fatalf("err = %v", err)
	}
	if s.Saves != saves {
		t.Errorf("a failed ADD saved")
	}
	st, _, _ := m.Snapshot(ctx)
	if last := st.Allocations[n-1].Egress4; last != netip.MustParseAddr("169.254.175.254") {
		t.Errorf("last egress %s", last)
	}
	if _, _, err := m.Release(ctx, key("c5"), netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Undo(ctx, key("c6"), netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	a, _, err := m.Allocate(ctx, egressReq("again"))
	if err != nil || a.Egress4 != st.Allocations[6].Egress4 {
		t.Errorf("after undo of c6: %+v %v, want its egress %s back (the cooling one skipped)", a, err, st.Allocations[6].Egress4)
	}
}

// A state file with an egress address that is not in the range, or
// beside an IPv4 pod address, or in a version-2 file, is corrupt.
func TestEgress4Validated(t *testing.T) {
	for _, tt := range []string{
		`{"version":3,"bootID":"b","allocations":[{"network":"n","containerID":"c","ifname":"eth0","ip":"fd00::1","egress4":"10.0.0.1","hostVeth":"x"}],"cooling":[]}`,
		`{"version":3,"bootID":"b","allocations":[{"network":"n","containerID":"c","ifname":"eth0","ip":"fd00::1","egress4":"169.254.172.0","hostVeth":"x"}],"cooling":[]}`,
		`{"version":3,"bootID":"b","allocations":[{"network":"n","containerID":"c","ifname":"eth0","ip":"10.0.0.1","egress4":"169.254.172.1","hostVeth":"x"}],"cooling":[]}`,
		`{"version":2,"bootID":"b","allocations":[{"network":"n","containerID":"c","ifname":"eth0","ip":"10.0.0.1","egress4":"169.254.172.1","hostVeth":"x"}],"cooling":[]}`,
		`{"version":3,"bootID":"b","allocations":[{"network":"n","containerID":"c","ifname":"eth0","ip":"fd00::1","egress4":"169.254.172.1","hostVeth":"x"},{"network":"n","containerID":"d","ifname":"eth0","ip":"fd00::2","egress4":"169.254.172.1","hostVeth":"y"}],"cooling":[]}`,
	} {
		if _, err := DecodeState([]byte(tt)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err %v, want corrupt", tt, err)
		}
	}
	ok := `{"version":3,"bootID":"b","allocations":[{"network":"n","containerID":"c","ifname":"eth0","ip":"fd00::1","egress4":"169.254.175.254","hostVeth":"x"}],"cooling":[]}`
	if _, err := DecodeState([]byte(ok)); err != nil {
		t.Errorf("valid state refused: %v", err)
	}
}
