package alloc_test

import (
	"net/netip"
	"strings"
	"testing"

	. "github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
)

func TestParseRanges(t *testing.T) {
	tests := []struct {
		specs       []string
		size        int
		first, last string
	}{
		{[]string{"10.99.0.0/24"}, 254, "10.99.0.1", "10.99.0.254"},
		{[]string{"10.98.0.10-10.98.0.20"}, 11, "10.98.0.10", "10.98.0.20"},
		{[]string{"10.0.0.0/30"}, 2, "10.0.0.1", "10.0.0.2"},
		{[]string{"10.0.0.0/31"}, 2, "10.0.0.0", "10.0.0.1"},
		{[]string{"10.0.0.7/32"}, 1, "10.0.0.7", "10.0.0.7"},
		{[]string{"10.0.0.5-10.0.0.5"}, 1, "10.0.0.5", "10.0.0.5"},
		{[]string{"10.99.0.0/24", " 10.98.0.10 - 10.98.0.20 "}, 265, "10.99.0.1", "10.98.0.20"},
		{[]string{"10.0.0.0/16"}, 65534, "10.0.0.1", "10.0.255.254"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.specs, ","), func(t *testing.T) {
			rs, err := ParseRanges(tt.specs)
			if err != nil {
				t.Fatal(err)
			}
			if got := rs.Size(nil); got != tt.size {
				t.Errorf("Size = %d, want %d", got, tt.size)
			}
			var got []netip.Addr
			for a := range rs.Addrs(nil) {
				got = append(got, a)
			}
			if len(got) != tt.size {
				t.Fatalf("Addrs yielded %d, want %d", len(got), tt.size)
			}
			if got[0].String() != tt.first || got[len(got)-1].String() != tt.last {
				t.Errorf("first/last = %s/%s, want %s/%s", got[0], got[len(got)-1], tt.first, tt.last)
			}
			seen := map[netip.Addr]bool{}
			for _, a := range got {
				if seen[a] || !rs.Contains(nil, a) {
					t.Fatalf("%s yielded twice or not contained", a)
				}
				seen[a] = true
			}
		})
	}
}

func TestParseRangesErrors(t *testing.T) {
	tests := []struct {
		specs []string
		want  string
	}{
		{nil, "no ranges"},
		{[]string{"10.0.0.300/24"}, `"10.0.0.300/24"`},
		{[]string{"10.0.0.1/24"}, "host bits set"},
		{[]string{"fd00::/64"}, "only IPv4"},
		{[]string{"10.0.0.20-10.0.0.10"}, "before start"},
		{[]string{"10.0.0.1-fd00::1"}, "only IPv4"},
		{[]string{"garbage"}, "neither a CIDR"},
		{[]string{"10.0.0.0/24", "10.0.0.100-10.0.0.110"}, "overlaps"},
		{[]string{""}, `range ""`},
		{[]string{"127.0.0.0/24"}, "reaches into 127.0.0.0/8"},
		{[]string{"169.254.1.0/24"}, "reaches into 169.254.0.0/16"},
		{[]string{"200.0.0.1-230.0.0.1"}, "reaches into 224.0.0.0/3"},
		{[]string{"255.255.255.255/32"}, "reaches into 224.0.0.0/3"},
		{[]string{"0.0.0.0/24"}, "reaches into 0.0.0.0/8"},
	}
	for _, tt := range tests {
		_, err := ParseRanges(tt.specs)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseRanges(%q) = %v, want error containing %q", tt.specs, err, tt.want)
		}
	}
}

func TestStoredPoolUsesOnlyUsable(t *testing.T) {
	st := NewState("")
	st.EC2 = &section.EC2{
		ENIs: []section.ENI{{ID: "eni-a"}, {ID: "eni-b", DeviceNumber: 1}, {ID: "eni-c", DeviceNumber: 2, Unmanaged: true}, {ID: "eni-d", DeviceNumber: 3, Unverified: true}},
		Addrs: []section.Addr{
			{IP: netip.MustParseAddr("10.0.1.5"), ENI: "eni-a", Origin: section.OriginAssigned},
			{IP: netip.MustParseAddr("10.0.1.6"), ENI: "eni-a", Origin: section.OriginAssigned, Unusable: true},
			{IP: netip.MustParseAddr("10.0.1.7"), ENI: "eni-a", Origin: section.OriginAssigned, Lost: true},
			{IP: netip.MustParseAddr("10.0.1.8"), ENI: "eni-a", Origin: section.OriginFound},
			{IP: netip.MustParseAddr("10.0.2.7"), ENI: "eni-b", Origin: section.OriginFound},
			{IP: netip.MustParseAddr("10.0.3.7"), ENI: "eni-c", Origin: section.OriginFound},
			{IP: netip.MustParseAddr("10.0.4.7"), ENI: "eni-d", Origin: section.OriginFound},
		},
	}
	p := StoredPool{Exclude: []netip.Prefix{netip.MustParsePrefix("10.0.1.8/32")}}
	var got []string
	for ip, eni := range p.Addrs(st) {
		got = append(got, ip.String()+"@"+eni)
	}
	if strings.Join(got, ",") != "10.0.1.5@eni-a,10.0.2.7@eni-b" {
		t.Errorf("usable: %v; want neither unusable, lost, excluded nor on unmanaged or unverified ENIs", got)
	}
	if p.Size(st) != 2 || p.Contains(st, netip.MustParseAddr("10.0.1.6")) || !p.Contains(st, netip.MustParseAddr("10.0.2.7")) {
		t.Errorf("size %d", p.Size(st))
	}
	if (StoredPool{}).Size(NewState("")) != 0 {
		t.Error("a state without an ec2 section has addresses")
	}
}
