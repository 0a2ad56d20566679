package ec2fake

import (
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

func postForm(t *testing.T, u string, form url.Values) (int, string) {
	t.Helper()
	resp, err := loopbackHTTPClient().PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestWireFormat pins the raw documents, independent of the SDK.
func TestWireFormat(t *testing.T) {
	srv := startServer(t, Config{})
	p := srv.PrimaryENI()
	code, body := postForm(t, srv.EC2URL(), url.Values{
		"Action": {"AssignPrivateIpAddresses"}, "Version": {"2016-11-15"},
		"NetworkInterfaceId": {p.ID}, "PrivateIpAddress.1": {"10.0.5.5"},
	})
	want := `<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<AssignPrivateIpAddressesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>`
	if code != 200 || !strings.HasPrefix(body, want) ||
		!strings.Contains(body, `<networkInterfaceId>`+p.ID+`</networkInterfaceId>`+
			`<assignedPrivateIpAddressesSet><item><privateIpAddress>10.0.5.5</privateIpAddress></item></assignedPrivateIpAddressesSet>`) {
		t.Fatalf("success reply %d:\n%s", code, body)
	}
	code, body = postForm(t, srv.EC2URL(), url.Values{"Action": {"RunInstances"}, "Version": {"2016-11-15"}})
	if code != 400 || !strings.Contains(body, `<Response><Errors><Error><Code>InvalidAction</Code><Message>`) ||
		!strings.Contains(body, `</Message></Error></Errors><RequestID>`) {
		t.Fatalf("error reply %d:\n%s", code, body)
	}
	if code, body = postForm(t, srv.EC2URL(), url.Values{"Version": {"2016-11-15"}}); code != 400 || !strings.Contains(body, "MissingAction") {
		t.Fatalf("missing action: %d %s", code, body)
	}
	if code, body = postForm(t, srv.EC2URL(), url.Values{"Action": {"DescribeSubnets"}}); code != 400 || !strings.Contains(body, "MissingParameter") {
		t.Fatalf("missing version: %d %s", code, body)
	}
	if c := srv.Calls(); c["AssignPrivateIpAddresses"] != 1 || c["RunInstances"] != 1 || c["DescribeSubnets"] != 1 {
		t.Fatalf("calls %v", c)
	}
}

// TestSDKFromEnvironment points the SDK at the fake the way the plugin will
// be pointed at it: only through environment variables.
func TestSDKFromEnvironment(t *testing.T) {
	srv := startServer(t, Config{AvailabilityZone: "us-west-2c"})
	dir := t.TempDir()
	// Keep the developer's ~/.aws out of the test.
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_PROFILE", "")
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	ctx := ctxT(t)
	cfg, err := config.LoadDefaultConfig(ctx, config.WithHTTPClient(loopbackBuildableClient()))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Region != "us-west-2" {
		t.Fatalf("region %q", cfg.Region)
	}
	region, err := imds.NewFromConfig(cfg).GetRegion(ctx, nil)
	if err != nil || region.Region != "us-west-2" {
		t.Fatalf("IMDS region %+v %v", region, err)
	}
	out, err := ec2.NewFromConfig(cfg).DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{})
	if err != nil || len(out.NetworkInterfaces) != 1 {
		t.Fatalf("describe %+v %v", out, err)
	}
}

func TestSplitListeners(t *testing.T) {
	srv, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.StartSplit(); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.IMDSURL() == srv.EC2URL() || srv.URL() != "" {
		t.Fatalf("split URLs %q %q %q", srv.IMDSURL(), srv.EC2URL(), srv.URL())
	}
	if got := mustMeta(t, newIMDS(srv), "instance-id"); got != srv.Info().InstanceID {
		t.Fatalf("instance-id %q", got)
	}
	if _, err := newEC2(srv, 1).DescribeSubnets(ctxT(t), &ec2.DescribeSubnetsInput{}); err != nil {
		t.Fatal(err)
	}
	// Each listener serves only its own API.
	resp, err := loopbackHTTPClient().Get(srv.EC2URL() + "/latest/meta-data/instance-id")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("IMDS path on the EC2 listener: %d, want an EC2 400", resp.StatusCode)
	}
	if code, _ := postForm(t, srv.IMDSURL(), url.Values{"Action": {"DescribeSubnets"}, "Version": {"2016-11-15"}}); code != http.StatusNotFound {
		t.Fatalf("EC2 call on the IMDS listener: %d, want 404", code)
	}
	srv.Close()
	srv.Close() // idempotent
}

func TestStartRefusesNonLoopback(t *testing.T) {
	srv, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0"} {
		if err := srv.StartAt(addr, ""); err == nil {
			srv.Close()
			t.Fatalf("StartAt(%q) succeeded", addr)
		}
	}
}

func TestNewValidatesConfig(t *testing.T) {
	bad := []Config{
		{InstanceType: "x9.huge"},
		{VPCCIDRs: []string{"10.0.0.1/16"}},
		{Subnets: []SubnetConfig{{CIDR: "192.168.0.0/24"}}},
		{Subnets: []SubnetConfig{{CIDR: "10.0.0.0/24"}, {CIDR: "10.0.0.128/25"}}},
		{PrimaryIP: "10.0.0.1"}, // reserved by AWS
		{InstanceID: "instance-1"},
	}
	for _, c := range bad {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
	srv, err := New(Config{InstanceType: "tiny", Limits: map[string]Limits{"tiny": {MaxENIs: 1, IPv4PerENI: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.SeedENI(ENISpec{}); err == nil || !strings.Contains(err.Error(), "AttachmentLimitExceeded") {
		t.Fatalf("seeding past MaxENIs: %v", err)
	}
	if len(srv.ENIs()) != 1 {
		t.Fatalf("failed seed left %d ENIs", len(srv.ENIs()))
	}
	p := srv.PrimaryENI()
	if _, err := srv.SeedIPs(p.ID, 2); err == nil {
		t.Fatal("seeding past IPv4PerENI succeeded")
	}
	if ips, err := srv.SeedIPs(p.ID, 1); err != nil || len(ips) != 1 {
		t.Fatalf("SeedIPs: %v %v", ips, err)
	}
}

func TestEnvNamesSDKVariables(t *testing.T) {
	srv := startServer(t, Config{})
	env := strings.Join(srv.Env(), "\n")
	for _, want := range []string{"AWS_EC2_METADATA_SERVICE_ENDPOINT=" + srv.URL(), "AWS_ENDPOINT_URL_EC2=" + srv.URL()} {
		if !strings.Contains(env, want) {
			t.Errorf("Env lacks %q:\n%s", want, env)
		}
	}
}
