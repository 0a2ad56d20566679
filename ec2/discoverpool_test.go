//go:build !lean

package ec2

import (
	"context"
	"fmt"
	"testing"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/netconf"
)

// A state file lost on a node of IPv6 whose primary ENI holds the /80:
// repair's discovery reads the /80 from IMDS into the empty store, so the
// pods it records get their ENI (CHECK looks their routing up by it; an
// allocation without one fails CHECK for the pod's life) before any warm
// pass. A network of IPv4 reads no IPv6 path.
func TestDiscoverPoolReadsThePrefix(t *testing.T) {
	for _, families := range []string{`["ipv6"]`, `["ipv4","ipv6"]`, `["ipv4"]`} {
		e := newEnv6(t, subnet6)
		e.warm(t)
		had := e.fake.PrimaryENI().IPv6Prefixes
		cfg, err := netconf.Parse([]byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","ipFamilies":%s,"imdsEndpoint":%q}`, families, e.fake.URL())))
		if err != nil {
			t.Fatal(err)
		}
		st := alloc.NewState("b")
		if _, err := DiscoverPool(cfg)(context.Background(), st); err != nil {
			t.Fatalf("%s: %v", families, err)
		}
		primary, _ := st.EC2.PrimaryENI()
		want := 1
		if !cfg.Warm.IPv6 {
			want = 0
		}
		if len(primary.IPv6Prefixes) != want || (want == 1 && primary.IPv6Prefixes[0].Prefix.String() != had[0]) {
			t.Errorf("%s: the store's primary ENI has %+v, want %d of EC2's %v", families, primary.IPv6Prefixes, want, had)
			continue
		}
		if want == 1 {
			ip := primary.IPv6Prefixes[0].Prefix.Addr().Next()
			if eni, _ := st.EC2.ENIOf6(ip); eni != primary.ID {
				t.Errorf("%s: ENI of %s is %q, want %s", families, ip, eni, primary.ID)
			}
		}
	}
}
