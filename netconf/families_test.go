package netconf

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/eni-cni/eni-cni/alloc"
)

func familiesConf(families, ranges string) []byte {
	fam := ""
	if families != "" {
		fam = `"ipFamilies":` + families + `,`
	}
	return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni",%s"pool":{"source":"static","ranges":%s}}`, fam, ranges))
}

func TestIPFamilies(t *testing.T) {
	for _, tt := range []struct {
		families, ranges string
		want             []alloc.Family
	}{
		{"", `["10.99.0.0/24"]`, nil},
		{`["ipv4"]`, `["10.99.0.0/24"]`, nil},
		{`["ipv6"]`, `["fd00:99::/120"]`, []alloc.Family{alloc.IPv6}},
		{`["ipv4","ipv6"]`, `["10.99.0.0/24","fd00:99::/120"]`, []alloc.Family{alloc.IPv4, alloc.IPv6}},
		{`["ipv6","ipv4"]`, `["fd00:99::/120","10.99.0.0/24"]`, []alloc.Family{alloc.IPv6, alloc.IPv4}},
	} {
		c, err := Parse(familiesConf(tt.families, tt.ranges))
		if err != nil {
			t.Errorf("%s %s: %v", tt.families, tt.ranges, err)
			continue
		}
		if fmt.Sprint(c.Families) != fmt.Sprint(tt.want) {
			t.Errorf("%s: families %v, want %v", tt.families, c.Families, tt.want)
		}
	}
}

// Each bad combination is refused as a configuration error that says
// what is wrong.
func TestIPFamiliesRefused(t *testing.T) {
	for _, tt := range []struct {
		conf []byte
		want string
	}{
		{familiesConf(`[]`, `["10.99.0.0/24"]`), "must list one or two families"},
		{familiesConf(`["ipv4","ipv6","ipv4"]`, `["10.99.0.0/24"]`), "must list one or two families"},
		{familiesConf(`["ipv4","ipv4"]`, `["10.99.0.0/24"]`), "lists ipv4 twice"},
		{familiesConf(`["IPv6"]`, `["fd00::/120"]`), `unknown address family "IPv6"`},
		{familiesConf(`["inet6"]`, `["fd00::/120"]`), `unknown address family "inet6"`},
		{familiesConf(`["ipv6"]`, `["10.99.0.0/24"]`), "an IPv4 range on a network of IPv6 only"},
		{familiesConf(`["ipv4"]`, `["fd00::/120"]`), "only IPv4"},
		{familiesConf("", `["10.99.0.0/24","fd00::/120"]`), "only IPv4"},
		{familiesConf(`["ipv4","ipv6"]`, `["10.99.0.0/24"]`), "ipFamilies has ipv6 but pool.ranges has no ipv6 range"},
		{familiesConf(`["ipv4","ipv6"]`, `["fd00::/120"]`), "ipFamilies has ipv4 but pool.ranges has no ipv4 range"},
		{familiesConf(`["ipv4","ipv6"]`, `["10.99.0.0/24","fe80::/120"]`), "reaches into fe80::/10"},
		{[]byte(`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","ipFamilies":["ipv4","ipv6"],"pool":{"source":"ec2","subnets":{"us-east-1a":{"subnetID":"subnet-0123456789abcdef0"}}}}`), `never get the primary ENI's addresses`},
		{[]byte(`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","ipFamilies":["ipv6","ipv4"],"pool":{"source":"ec2","subnetDiscovery":true}}`), `never get the primary ENI's addresses`},
		{[]byte(`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","ipFamilies":["ipv6"],"pool":{"source":"ec2","subnetDiscovery":true}}`), `IPv6 addresses come from the primary ENI's /80 prefix`},
	} {
		_, err := Parse(tt.conf)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an invalid configuration containing %q", tt.conf, err, tt.want)
		}
	}
	if _, err := Parse(familiesConf(`"ipv6"`, `["fd00::/120"]`)); !errors.Is(err, ErrDecode) {
		t.Errorf("ipFamilies as a string: %v, want a decoding error", err)
	}
}

// ["ipv6"] on an ec2 pool: pods get addresses of the primary ENI's /80.
func TestIPFamiliesIPv6OnEC2(t *testing.T) {
	c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","ipFamilies":["ipv6"],"pool":{"source":"ec2"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Warm.IPv6 || len(c.Families) != 1 || c.Families[0] != alloc.IPv6 || !c.Pool.(alloc.StoredPool).IPv6 {
		t.Errorf("warm IPv6 %v, families %v, pool %+v", c.Warm.IPv6, c.Families, c.Pool)
	}
}

// ["ipv4","ipv6"] on an ec2 pool, in either order: the IPv4 pool as
// without IPv6 plus the /80, the families in the configured order.
func TestIPFamiliesDualStackOnEC2(t *testing.T) {
	for _, fams := range []string{`["ipv4","ipv6"]`, `["ipv6","ipv4"]`} {
		c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","ipFamilies":` + fams + `,"pool":{"source":"ec2","warmIPTarget":3}}`))
		if err != nil {
			t.Fatalf("%s: %v", fams, err)
		}
		want := []alloc.Family{alloc.IPv4, alloc.IPv6}
		if fams[2:6] == "ipv6" {
			want = []alloc.Family{alloc.IPv6, alloc.IPv4}
		}
		if !c.Warm.IPv6 || !c.Warm.DualStack || c.Warm.IPv6Only() || c.Warm.WarmIPTarget != 3 || !slices.Equal(c.Families, want) || !c.Pool.(alloc.StoredPool).IPv6 {
			t.Errorf("%s: warm %+v, families %v, pool %+v", fams, c.Warm, c.Families, c.Pool)
		}
	}
}

// ["ipv4"] on an ec2 pool is the default, spelled out.
func TestIPFamiliesIPv4OnEC2(t *testing.T) {
	c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","ipFamilies":["ipv4"]}`))
	if err != nil || c.Families != nil {
		t.Errorf("families %v, err %v", c, err)
	}
}
