package section

import (
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRegion(t *testing.T) {
	for _, tc := range []struct {
		inst Instance
		want string
	}{
		{Instance{AZ: "us-east-1a"}, "us-east-1"},
		{Instance{AZ: "us-west-2-lax-1a", RegionName: "us-west-2"}, "us-west-2"},
		{Instance{}, ""},
	} {
		if got := tc.inst.Region(); got != tc.want {
			t.Errorf("%+v: region %q, want %q", tc.inst, got, tc.want)
		}
	}
}

func TestAtHardLimit(t *testing.T) {
	full := func(n, used int) *EC2 {
		s := &EC2{Limits: &Limits{MaxENIs: 3, IPv4PerENI: 6}}
		for i := range n {
			s.ENIs = append(s.ENIs, ENI{ID: "eni-" + string(rune('a'+i)), DeviceNumber: i, Secondary: used})
		}
		return s
	}
	if !full(3, 5).AtHardLimit(0) {
		t.Error("3 full ENIs of 3: not at the limit")
	}
	if full(2, 5).AtHardLimit(0) {
		t.Error("2 full ENIs of 3: at the limit")
	}
	if !full(2, 5).AtHardLimit(2) {
		t.Error("2 full ENIs with maxENIs 2: not at the limit")
	}
	if full(3, 4).AtHardLimit(0) {
		t.Error("3 ENIs with a free slot each: at the limit")
	}
	pd := full(3, 0)
	for i := range pd.ENIs {
		pd.ENIs[i].Prefixes = make([]netip.Prefix, 5)
	}
	if !pd.AtHardLimit(0) {
		t.Error("3 ENIs full of prefixes: not at the limit")
	}
	if (&EC2{ENIs: full(3, 5).ENIs}).AtHardLimit(0) {
		t.Error("unknown limits: at the limit")
	}
	if got := PodAddresses(Limits{MaxENIs: 4, IPv4PerENI: 15}, false, 0); got != 56 {
		t.Errorf("m5.xlarge pod addresses %d, want 56", got)
	}
}

// TestAtHardLimitAsWarmSees: the hard limit is what warm cannot get past:
// ENIs on other network cards (someone else's, see canCreate) do not use
// up the card-0 ENIs warm may still create, and an unmanaged ENI's free
// slots are no room warm may fill.
func TestAtHardLimitAsWarmSees(t *testing.T) {
	l := &Limits{MaxENIs: 3, IPv4PerENI: 6}
	s := &EC2{Limits: l, ENIs: []ENI{
		{ID: "eni-a", DeviceNumber: 0, Secondary: 5},
		{ID: "eni-b", DeviceNumber: 1, Secondary: 5},
		{ID: "eni-efa", NetworkCard: 1, DeviceNumber: 0, Secondary: 5, Unmanaged: true},
	}}
	if s.AtHardLimit(0) {
		t.Error("2 of 3 card-0 ENIs and one on card 1: at the hard limit, but warm can create a third")
	}
	s.ENIs = append(s.ENIs, ENI{ID: "eni-c", DeviceNumber: 2, Secondary: 5})
	s.ENIs[2].Secondary = 1
	if !s.AtHardLimit(0) {
		t.Error("3 full card-0 ENIs, an unmanaged one with room: not at the hard limit, but warm can add nothing")
	}
}

// A store's outcome message is bounded when read: a hostile or hand-edited
// state.json cannot put megabytes into every waiting ADD's error.
func TestOutcomeMessageBoundedWhenRead(t *testing.T) {
	o := &PassOutcome{Result: PassFailed, Message: strings.Repeat("é", 1<<20)}
	d := o.Describe()
	if len(d) > MaxOutcomeMessage+64 || !utf8.ValidString(d) {
		t.Fatalf("described outcome is %d bytes (valid UTF-8: %v)", len(d), utf8.ValidString(d))
	}
}
