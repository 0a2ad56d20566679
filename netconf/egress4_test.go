package netconf

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func egressConf(families, extra string) []byte {
	ranges := `["fd00:99::/120"]`
	switch families {
	case `["ipv4"]`:
		ranges = `["10.99.0.0/24"]`
	case `["ipv4","ipv6"]`:
		ranges = `["10.99.0.0/24","fd00:99::/120"]`
	}
	return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","ipFamilies":%s,%s"pool":{"source":"static","ranges":%s}}`, families, extra, ranges))
}

// ipv4Egress is on by default for IPv6-only networks only, where the
// pod has no IPv4 address of its own, and off where asked.
func TestIPv4Egress(t *testing.T) {
	for _, tt := range []struct {
		families, extra string
		want            Egress4Mode
	}{
		{`["ipv6"]`, ``, Egress4Auto},
		{`["ipv6"]`, `"ipv4Egress":true,`, Egress4On},
		{`["ipv6"]`, `"ipv4Egress":false,`, Egress4Off},
		{`["ipv6"]`, `"defaultRoute":false,`, Egress4Off},
		{`["ipv6"]`, `"defaultRoute":true,"ipv4Egress":true,`, Egress4On},
		{`["ipv4","ipv6"]`, ``, Egress4Off},
		{`["ipv4"]`, ``, Egress4Off},
		{`["ipv4"]`, `"ipv4Egress":false,`, Egress4Off},
	} {
		c, err := Parse(egressConf(tt.families, tt.extra))
		if err != nil {
			t.Errorf("%s %s: %v", tt.families, tt.extra, err)
			continue
		}
		if c.Egress4 != tt.want {
			t.Errorf("%s %s: egress %v, want %v", tt.families, tt.extra, c.Egress4, tt.want)
		}
	}
}

func TestIPv4EgressRefused(t *testing.T) {
	for _, tt := range []struct {
		conf []byte
		want string
	}{
		{egressConf(`["ipv4","ipv6"]`, `"ipv4Egress":true,`), "for networks of IPv6 only"},
		{egressConf(`["ipv4"]`, `"ipv4Egress":true,`), "for networks of IPv6 only"},
		{egressConf(`["ipv6"]`, `"defaultRoute":false,"ipv4Egress":true,`), "defaultRoute is false"},
		{egressConf(`["ipv6"]`, `"ipv4Egress":"yes",`), "cannot decode"},
	} {
		_, err := Parse(tt.conf)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want one saying %q", tt.conf, err, tt.want)
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) && !errors.Is(err, ErrDecode) {
			t.Errorf("%s: %v is not a configuration error", tt.conf, err)
		}
	}
}
