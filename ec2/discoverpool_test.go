//go:build !lean

package ec2

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
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

// An IMDS of IMDSv1 alone in front of the fake: the token call is refused
// and tokenless reads are answered (the proxy holds a token of its own).
func imdsV1Only(t *testing.T, url string) string {
	t.Helper()
	tok, err := http.NewRequest(http.MethodPut, url+"/latest/api/token", nil)
	if err != nil {
		t.Fatal(err)
	}
	tok.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "600")
	resp, err := http.DefaultClient.Do(tok)
	if err != nil {
		t.Fatal(err)
	}
	token, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	target, _ := neturl.Parse(url)
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			http.Error(w, "IMDSv1 only", http.StatusForbidden)
			return
		}
		r.Header.Set("X-aws-ec2-metadata-token", string(token))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Repair's discovery honours imdsV1Fallback as warm's does: on an
// instance of IMDSv1 alone a lost ec2 pool was never read back.
func TestDiscoverPoolIMDSv1Fallback(t *testing.T) {
	e := newEnv6(t, subnet6)
	url := imdsV1Only(t, e.fake.URL())
	for _, fallback := range []bool{false, true} {
		cfg, err := netconf.Parse([]byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","imdsEndpoint":%q,"imdsV1Fallback":%t}`, url, fallback)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = DiscoverPool(cfg)(context.Background(), alloc.NewState("b"))
		if (err == nil) != fallback {
			t.Errorf("imdsV1Fallback %t: %v", fallback, err)
		}
	}
}
