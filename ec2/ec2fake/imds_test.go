package ec2fake

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// rawIMDS does one request by hand, to check what the SDK hides.
func rawIMDS(t *testing.T, method, url string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := loopbackHTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestIMDSTokenFlow(t *testing.T) {
	srv := startServer(t, Config{})
	base := srv.IMDSURL()
	idURL := base + "/latest/meta-data/instance-id"

	if code, _, _ := rawIMDS(t, "GET", idURL, nil); code != http.StatusUnauthorized {
		t.Fatalf("GET without token: %d, want 401", code)
	}
	if code, _, _ := rawIMDS(t, "GET", idURL, map[string]string{tokenHeader: "bogus"}); code != http.StatusUnauthorized {
		t.Fatalf("GET with unknown token: %d, want 401", code)
	}
	if code, _, _ := rawIMDS(t, "PUT", base+"/latest/api/token", nil); code != http.StatusBadRequest {
		t.Fatalf("PUT without ttl: %d, want 400", code)
	}
	if code, _, _ := rawIMDS(t, "PUT", base+"/latest/api/token", map[string]string{tokenTTLHeader: "21601"}); code != http.StatusBadRequest {
		t.Fatalf("PUT with ttl too long: %d, want 400", code)
	}
	if code, _, _ := rawIMDS(t, "GET", base+"/latest/api/token", nil); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET token: %d, want 405", code)
	}
	fwd := map[string]string{tokenTTLHeader: "60", "X-Forwarded-For": "10.1.2.3"}
	if code, _, _ := rawIMDS(t, "PUT", base+"/latest/api/token", fwd); code != http.StatusForbidden {
		t.Fatalf("proxied PUT: %d, want 403", code)
	}
	code, tok, hdr := rawIMDS(t, "PUT", base+"/latest/api/token", map[string]string{tokenTTLHeader: "60"})
	if code != http.StatusOK || tok == "" || hdr.Get(tokenTTLHeader) != "60" {
		t.Fatalf("PUT token: %d %q ttl header %q", code, tok, hdr.Get(tokenTTLHeader))
	}
	code, body, _ := rawIMDS(t, "GET", idURL, map[string]string{tokenHeader: tok})
	if code != http.StatusOK || body != "i-0123456789abcdef0" {
		t.Fatalf("GET with token: %d %q", code, body)
	}
	if srv.IMDSCalls() != 1 {
		t.Fatalf("IMDSCalls = %d, want 1 (only the authorized GET)", srv.IMDSCalls())
	}
}

func TestIMDSTokenExpiry(t *testing.T) {
	clk := newFakeClock()
	srv := startServer(t, Config{Clock: clk.Now})
	base := srv.IMDSURL()
	_, tok, _ := rawIMDS(t, "PUT", base+"/latest/api/token", map[string]string{tokenTTLHeader: "60"})
	c := newIMDS(srv)
	if got := mustMeta(t, c, "instance-type"); got != "m5.large" {
		t.Fatalf("instance-type = %q", got)
	}
	clk.Advance(61 * time.Second)
	if code, _, _ := rawIMDS(t, "GET", base+"/latest/meta-data/mac", map[string]string{tokenHeader: tok}); code != http.StatusUnauthorized {
		t.Fatalf("expired token: %d, want 401", code)
	}
	// The SDK caches its token against its own (real) clock. Once the
	// server's clock passes the token's expiry the SDK gets a 401, must fetch
	// a new token and succeed.
	clk.Advance(7 * time.Hour)
	if got := mustMeta(t, c, "instance-type"); got != "m5.large" {
		t.Fatalf("instance-type after expiry = %q", got)
	}
}

func TestIMDSPaths(t *testing.T) {
	srv := startServer(t, Config{
		InstanceType:     "t3.medium",
		InstanceID:       "i-0aaaabbbbccccdddd",
		AvailabilityZone: "eu-west-1b",
		VPCCIDRs:         []string{"10.0.0.0/16", "100.64.0.0/16"},
		Subnets:          []SubnetConfig{{ID: "subnet-0123456789abcdef0", CIDR: "10.0.16.0/20"}},
		SecurityGroupIDs: []string{"sg-0aaaaaaaaaaaaaaaa", "sg-0bbbbbbbbbbbbbbbb"},
		PrimaryIP:        "10.0.16.10",
	})
	c := newIMDS(srv)
	p := srv.PrimaryENI()
	mac := p.MAC
	if !strings.HasPrefix(mac, "02:") || len(mac) != 17 {
		t.Fatalf("primary MAC %q is not a locally administered 02:xx MAC", mac)
	}
	want := map[string]string{
		"instance-id":                 "i-0aaaabbbbccccdddd",
		"instance-type":               "t3.medium",
		"mac":                         mac,
		"local-ipv4":                  "10.0.16.10",
		"placement/availability-zone": "eu-west-1b",
		"placement/region":            "eu-west-1",
		"placement/":                  "availability-zone\nregion",
		"network/interfaces/macs":     mac + "/",
		"network/interfaces/macs/":    mac + "/",
		"network/interfaces/macs/" + mac + "/": "device-number\ninterface-id\nlocal-hostname\nlocal-ipv4s\n" +
			"mac\nowner-id\nsecurity-group-ids\nsubnet-id\nsubnet-ipv4-cidr-block\nvpc-id\nvpc-ipv4-cidr-block\nvpc-ipv4-cidr-blocks",
		"network/interfaces/macs/" + mac + "/device-number":          "0",
		"network/interfaces/macs/" + mac + "/interface-id":           p.ID,
		"network/interfaces/macs/" + mac + "/subnet-id":              "subnet-0123456789abcdef0",
		"network/interfaces/macs/" + mac + "/subnet-ipv4-cidr-block": "10.0.16.0/20",
		"network/interfaces/macs/" + mac + "/vpc-ipv4-cidr-block":    "10.0.0.0/16",
		"network/interfaces/macs/" + mac + "/vpc-ipv4-cidr-blocks":   "10.0.0.0/16\n100.64.0.0/16",
		"network/interfaces/macs/" + mac + "/local-ipv4s":            "10.0.16.10",
		"network/interfaces/macs/" + mac + "/local-ipv4s/":           "10.0.16.10",
		"network/interfaces/macs/" + mac + "/security-group-ids":     "sg-0aaaaaaaaaaaaaaaa\nsg-0bbbbbbbbbbbbbbbb",
		"network/interfaces/macs/" + mac + "/local-hostname":         "ip-10-0-16-10.eu-west-1.compute.internal",
	}
	for path, w := range want {
		if got := mustMeta(t, c, path); got != w {
			t.Errorf("%s = %q, want %q", path, got, w)
		}
	}
	for _, path := range []string{
		"network/interfaces/macs/" + mac + "/ipv4-prefix",
		"network/interfaces/macs/02:00:00:00:00:01/local-ipv4s",
		"network/interfaces/macs/02:00:00:00:00:01/",
		"no-such-thing",
	} {
		_, err := getMeta(ctxT(t), c, path)
		if httpStatus(err) != http.StatusNotFound {
			t.Errorf("%s: want 404, got %v", path, err)
		}
	}
	doc, err := c.GetInstanceIdentityDocument(ctxT(t), nil)
	if err != nil || doc.Region != "eu-west-1" || doc.InstanceID != "i-0aaaabbbbccccdddd" || doc.PrivateIP != "10.0.16.10" {
		t.Fatalf("identity document %+v, %v", doc, err)
	}
}

func TestIMDSSeveralENIs(t *testing.T) {
	srv := startServer(t, Config{InstanceType: "m5.xlarge"})
	c := newIMDS(srv)
	primary := srv.PrimaryENI()
	if _, err := srv.SeedIPs(primary.ID, 2); err != nil {
		t.Fatal(err)
	}
	withIPs, err := srv.SeedENI(ENISpec{SecondaryIPCount: 3, Tags: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	withPfx, err := srv.SeedENI(ENISpec{PrefixCount: 2, DeviceIndex: 3})
	if err != nil {
		t.Fatal(err)
	}
	noV4, err := srv.SeedENI(ENISpec{NoIPv4: true})
	if err != nil {
		t.Fatal(err)
	}
	macs := strings.Split(mustMeta(t, c, "network/interfaces/macs/"), "\n")
	if len(macs) != 4 {
		t.Fatalf("macs listing %q, want 4 entries", macs)
	}
	for _, e := range []ENI{primary, withIPs, withPfx, noV4} {
		found := false
		for _, m := range macs {
			found = found || m == e.MAC+"/"
		}
		if !found {
			t.Errorf("mac %s/ missing from listing %q", e.MAC, macs)
		}
	}
	base := "network/interfaces/macs/"
	if got := mustMeta(t, c, base+withPfx.MAC+"/device-number"); got != "3" {
		t.Errorf("device-number = %q, want 3", got)
	}
	if got := mustMeta(t, c, base+noV4.MAC+"/device-number"); got != "2" {
		t.Errorf("auto device-number = %q, want 2", got)
	}
	wantIPs := strings.Join(append([]string{withIPs.PrimaryIP}, withIPs.SecondaryIPs...), "\n")
	if got := mustMeta(t, c, base+withIPs.MAC+"/local-ipv4s"); got != wantIPs {
		t.Errorf("local-ipv4s = %q, want %q (primary first)", got, wantIPs)
	}
	if got := mustMeta(t, c, base+withPfx.MAC+"/ipv4-prefix"); got != strings.Join(withPfx.Prefixes, "\n") || len(withPfx.Prefixes) != 2 {
		t.Errorf("ipv4-prefix = %q, want %q", got, withPfx.Prefixes)
	}
	if got := mustMeta(t, c, base+primary.MAC+"/local-ipv4s"); len(strings.Split(got, "\n")) != 3 {
		t.Errorf("primary local-ipv4s = %q, want 3 addresses", got)
	}
	if _, err := getMeta(ctxT(t), c, base+noV4.MAC+"/local-ipv4s"); httpStatus(err) != http.StatusNotFound {
		t.Errorf("local-ipv4s of ENI without IPv4: want 404, got %v", err)
	}
	if _, err := getMeta(ctxT(t), c, base+withIPs.MAC+"/ipv4-prefix"); httpStatus(err) != http.StatusNotFound {
		t.Errorf("ipv4-prefix without prefixes: want 404, got %v", err)
	}
}

func TestIMDSLagsBehindEC2(t *testing.T) {
	clk := newFakeClock()
	srv := startServer(t, Config{InstanceType: "m5.large", IMDSLag: 2 * time.Second, Clock: clk.Now})
	c, api := newIMDS(srv), newEC2(srv, 1)
	p := srv.PrimaryENI()
	ipsPath := "network/interfaces/macs/" + p.MAC + "/local-ipv4s"

	out, err := api.AssignPrivateIpAddresses(ctxT(t), &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, SecondaryPrivateIpAddressCount: aws.Int32(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.AssignedPrivateIpAddresses) != 2 {
		t.Fatalf("assigned %d addresses, want 2", len(out.AssignedPrivateIpAddresses))
	}
	if got := mustMeta(t, c, ipsPath); got != p.PrimaryIP {
		t.Fatalf("IMDS before the lag shows %q, want only the primary", got)
	}
	clk.Advance(1999 * time.Millisecond)
	if got := mustMeta(t, c, ipsPath); got != p.PrimaryIP {
		t.Fatalf("IMDS just before the lag shows %q", got)
	}
	clk.Advance(time.Millisecond)
	want := p.PrimaryIP + "\n" + *out.AssignedPrivateIpAddresses[0].PrivateIpAddress + "\n" +
		*out.AssignedPrivateIpAddresses[1].PrivateIpAddress
	if got := mustMeta(t, c, ipsPath); got != want {
		t.Fatalf("IMDS after the lag shows %q, want %q", got, want)
	}

	// Removal is stale too: the address stays in IMDS during the lag.
	_, err = api.UnassignPrivateIpAddresses(ctxT(t), &ec2.UnassignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, PrivateIpAddresses: []string{*out.AssignedPrivateIpAddresses[0].PrivateIpAddress},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustMeta(t, c, ipsPath); got != want {
		t.Fatalf("IMDS right after unassign shows %q, want the stale %q", got, want)
	}

	// A new attachment shows up in the macs listing only after the lag.
	cr, err := api.CreateNetworkInterface(ctxT(t), &ec2.CreateNetworkInterfaceInput{SubnetId: &p.SubnetID})
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.AttachNetworkInterface(ctxT(t), &ec2.AttachNetworkInterfaceInput{
		DeviceIndex: aws.Int32(1), InstanceId: aws.String(srv.Info().InstanceID),
		NetworkInterfaceId: cr.NetworkInterface.NetworkInterfaceId,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustMeta(t, c, "network/interfaces/macs/"); got != p.MAC+"/" {
		t.Fatalf("macs listing before the lag = %q", got)
	}
	clk.Advance(2 * time.Second)
	if got := mustMeta(t, c, "network/interfaces/macs/"); !strings.Contains(got, *cr.NetworkInterface.MacAddress+"/") {
		t.Fatalf("macs listing after the lag = %q, want the new MAC", got)
	}
	if got := mustMeta(t, c, ipsPath); got != p.PrimaryIP+"\n"+*out.AssignedPrivateIpAddresses[1].PrivateIpAddress {
		t.Fatalf("local-ipv4s after unassign lag = %q", got)
	}
}

func TestIMDSRealClockLagAndSync(t *testing.T) {
	srv := startServer(t, Config{IMDSLag: time.Hour})
	c, api := newIMDS(srv), newEC2(srv, 1)
	p := srv.PrimaryENI()
	if _, err := api.AssignPrivateIpAddresses(ctxT(t), &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, Ipv4PrefixCount: aws.Int32(1),
	}); err != nil {
		t.Fatal(err)
	}
	path := "network/interfaces/macs/" + p.MAC + "/ipv4-prefix"
	if _, err := getMeta(ctxT(t), c, path); httpStatus(err) != http.StatusNotFound {
		t.Fatalf("prefix visible before the lag: %v", err)
	}
	srv.SyncIMDS()
	if got := mustMeta(t, c, path); got != srv.PrimaryENI().Prefixes[0] {
		t.Fatalf("ipv4-prefix after SyncIMDS = %q", got)
	}
}

func TestIMDSFaultInjection(t *testing.T) {
	srv := startServer(t, Config{})
	c := newIMDS(srv)
	srv.FailIMDS(2, http.StatusInternalServerError)
	// The SDK's IMDS client retries 5xx; with 3 attempts it gets through.
	if got := mustMeta(t, c, "instance-type"); got != "m5.large" {
		t.Fatalf("instance-type = %q", got)
	}
	if srv.IMDSCalls() != 3 {
		t.Fatalf("IMDSCalls = %d, want 3", srv.IMDSCalls())
	}
	srv.FailIMDS(5, http.StatusServiceUnavailable)
	if _, err := getMeta(ctxT(t), c, "instance-type"); httpStatus(err) != http.StatusServiceUnavailable {
		t.Fatalf("want a 503 after retries, got %v", err)
	}
	srv.ClearFaults()
	srv.ResetCalls()
	mustMeta(t, c, "mac")
	if srv.IMDSCalls() != 1 {
		t.Fatalf("IMDSCalls after reset = %d", srv.IMDSCalls())
	}
}
