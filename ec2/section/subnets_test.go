package section

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

// With custom subnets the primary ENI counts for no pod, as the VPC CNI's
// max-pods-calculator.sh --cni-custom-networking-enabled has it.
func TestMaxPodsCustomSubnets(t *testing.T) {
	custom := WarmConfig{SubnetDiscovery: true}
	tests := []struct {
		name            string
		l               Limits
		w               WarmConfig
		addrs, allowed  int
		maxPodsExpected int
	}{
		{"m5.large", Limits{MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2}, custom, 18, 20, 20},
		{"m5.xlarge", Limits{MaxENIs: 4, IPv4PerENI: 15, VCPUs: 4}, WarmConfig{Subnets: map[string]ZoneSubnet{"us-east-1a": {SubnetID: "subnet-1"}}}, 42, 44, 44},
		{"m5.large pd", Limits{MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2}, WarmConfig{SubnetDiscovery: true, PrefixDelegation: true}, 288, 290, 110},
		{"m5.large maxENIs 1", Limits{MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2}, WarmConfig{SubnetDiscovery: true, MaxENIs: 1}, 0, 2, 2},
		{"m5.large not custom", Limits{MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2}, WarmConfig{}, 27, 29, 29},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PodAddressesOf(tt.l, tt.w); got != tt.addrs {
				t.Errorf("PodAddressesOf = %d, want %d", got, tt.addrs)
			}
			if got := MaxAllowedPodsOf(tt.l, tt.w); got != tt.allowed {
				t.Errorf("MaxAllowedPodsOf = %d, want %d", got, tt.allowed)
			}
			if got := MaxPodsOf(tt.l, tt.w); got != tt.maxPodsExpected {
				t.Errorf("MaxPodsOf = %d, want %d", got, tt.maxPodsExpected)
			}
		})
	}
}

// With custom subnets pods get only addresses of ENIs eni-cni created:
// neither the primary ENI's nor those of an ENI someone else attached.
func TestUsableCreatedOnly(t *testing.T) {
	a := netip.MustParseAddr
	s := &EC2{
		Limits: &Limits{MaxENIs: 3, IPv4PerENI: 3},
		ENIs: []ENI{
			{ID: "eni-primary", Secondary: 1},
			{ID: "eni-found", DeviceNumber: 1, Secondary: 1},
			{ID: "eni-created", DeviceNumber: 2, Created: true, Secondary: 1},
		},
		Addrs: []Addr{
			{IP: a("10.0.0.5"), ENI: "eni-primary", Origin: OriginAssigned},
			{IP: a("10.0.0.6"), ENI: "eni-found", Origin: OriginFound},
			{IP: a("100.64.0.7"), ENI: "eni-created", Origin: OriginAssigned},
		},
	}
	var all, custom []netip.Addr
	for ip := range s.UsableFor(nil, false) {
		all = append(all, ip)
	}
	for ip := range s.UsableFor(nil, true) {
		custom = append(custom, ip)
	}
	if len(all) != 3 || !slices.Equal(custom, []netip.Addr{a("100.64.0.7")}) {
		t.Fatalf("usable %v, with custom subnets %v", all, custom)
	}
	if s.IsUsableFor(a("10.0.0.5"), nil, true) || !s.IsUsableFor(a("10.0.0.5"), nil, false) || !s.IsUsableFor(a("100.64.0.7"), nil, true) {
		t.Error("IsUsableFor disagrees with UsableFor")
	}
	// Every ENI attached; only the created one is warm's to fill, and it
	// is not full: no hard limit. Full, it is, though the primary and the
	// found ENI have free slots.
	if s.AtHardLimitFor(0, true) {
		t.Error("at the hard limit with room on the created ENI")
	}
	s.ENIs[2].Secondary = 2
	if !s.AtHardLimitFor(0, true) || s.AtHardLimit(0) {
		t.Errorf("hard limit: custom %t, not custom %t; want true, false", s.AtHardLimitFor(0, true), s.AtHardLimit(0))
	}
}

func TestFullSubnets(t *testing.T) {
	now := time.Now()
	s := &EC2{}
	s.MarkSubnetFull("subnet-a", now)
	s.MarkSubnetFull("subnet-b", now.Add(time.Minute))
	if !s.SubnetFull("subnet-a", now.Add(FullSubnetTTL-time.Second)) || s.SubnetFull("subnet-a", now.Add(FullSubnetTTL)) || s.SubnetFull("subnet-c", now) {
		t.Error("SubnetFull does not follow FullSubnetTTL")
	}
	// Marked again: one record, the later time; expired ones are dropped.
	s.MarkSubnetFull("subnet-b", now.Add(2*time.Minute))
	s.MarkSubnetFull("subnet-c", now.Add(FullSubnetTTL+time.Second))
	if len(s.FullSubnets) != 2 || s.FullSubnets[0].ID != "subnet-b" || !s.SubnetFull("subnet-b", now.Add(FullSubnetTTL+time.Minute)) {
		t.Errorf("full subnets %+v", s.FullSubnets)
	}
	if c := s.Clone(); len(c.FullSubnets) != 2 || &c.FullSubnets[0] == &s.FullSubnets[0] {
		t.Error("Clone shares or drops FullSubnets")
	}
}
