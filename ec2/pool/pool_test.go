package pool

import (
	"net/netip"
	"testing"
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
