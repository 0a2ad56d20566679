package pool

import "testing"

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
