package netconf

import "testing"

// TestReadyWhenFilled: on by default for the ec2 pool, off when the
// conflist says so (in "pool" or at the top level, "pool" winning).
func TestReadyWhenFilled(t *testing.T) {
	for _, tc := range []struct {
		conf string
		want bool
	}{
		{`{"name":"pods","pool":{"source":"ec2"}}`, true},
		{`{"name":"pods","pool":{"source":"ec2","readyWhenFilled":false}}`, false},
		{`{"name":"pods","readyWhenFilled":false}`, false},
		{`{"name":"pods","readyWhenFilled":false,"pool":{"readyWhenFilled":true}}`, true},
	} {
		c, err := Parse([]byte(tc.conf))
		if err != nil {
			t.Fatalf("%s: %v", tc.conf, err)
		}
		if c.Warm.ReadyWhenFilled != tc.want {
			t.Errorf("%s: readyWhenFilled %v, want %v", tc.conf, c.Warm.ReadyWhenFilled, tc.want)
		}
	}
}
