package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/testutils"
)

func TestRunServesAndDescribes(t *testing.T) {
	dir := t.TempDir()
	describe, envFile := filepath.Join(dir, "ec2.json"), filepath.Join(dir, "ec2.env")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--instance-type", "t3.medium", "--secondary-ips", "2", "--extra-enis", "1",
			"--ec2-listen", "127.0.0.1:0", "--describe", describe, "--env-file", envFile}, pw, io.Discard)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	var urls []string
	for len(urls) < 2 && lines.Scan() {
		urls = append(urls, lines.Text())
	}
	if len(urls) != 2 || urls[0] == urls[1] || !strings.HasPrefix(urls[1], "http://127.0.0.1:") {
		t.Fatalf("printed URLs %q", urls)
	}
	go io.Copy(io.Discard, pr)

	d := readDescription(t, describe)
	if len(d.ENIs) != 2 || len(d.ENIs[0].SecondaryIPs) != 2 || d.Info.InstanceType != "t3.medium" {
		t.Fatalf("description %+v", d)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{}).DialContext}}
	resp, err := client.PostForm(urls[1], url.Values{
		"Action": {"AssignPrivateIpAddresses"}, "Version": {"2016-11-15"},
		"NetworkInterfaceId": {d.ENIs[0].ID}, "SecondaryPrivateIpAddressCount": {"1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d = readDescription(t, describe); len(d.ENIs[0].SecondaryIPs) != 3 || d.Calls["AssignPrivateIpAddresses"] != 1 {
		t.Fatalf("description not refreshed after the call: %+v", d.ENIs[0])
	}
	env, err := os.ReadFile(envFile)
	if err != nil || !strings.Contains(string(env), "export AWS_ENDPOINT_URL_EC2="+urls[1]+"\n") {
		t.Fatalf("env file %q %v", env, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func readDescription(t *testing.T, path string) description {
	t.Helper()
	var d description
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &d)
	}
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return d
}

func TestRunRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--listen", "0.0.0.0:0"},
		{"--instance-type", "x9.huge"},
		{"--no-such-flag"},
		{"--secondary-ips", "100"},
		{"stray"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("run %v succeeded", args)
		}
	}
}

func TestParseLatencyAndLinks(t *testing.T) {
	o, err := parseFlags([]string{"--latency", "realistic", "--link-delay", "200ms"}, io.Discard)
	if err != nil || o.cfg.Latency == nil || o.cfg.Latency.LinkDelay != 200*time.Millisecond || o.cfg.Latency.Min("AttachNetworkInterface") == 0 {
		t.Fatalf("realistic profile: %+v %v", o, err)
	}
	if o, err := parseFlags(nil, io.Discard); err != nil || o.cfg.Latency != nil {
		t.Fatalf("default: %+v %v", o, err)
	}
	for _, bad := range [][]string{{"--latency", "slow"}, {"--links", "eni"}, {"--links-peer-netns", "/run/netns/x"}, {"--links", "waytoolongprefix", "--links-peer-netns", "/x"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

func TestParseSubnetIPv6(t *testing.T) {
	o, err := parseFlags([]string{"--vpc-cidr", "10.0.0.0/16", "--subnet-cidr", "10.0.0.0/20,10.0.16.0/20,10.0.32.0/20",
		"--subnet-ipv6-cidr", "2600:1f18:abcd:1200::/64,,2600:1f18:abcd:1202::/64"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sc := range o.cfg.Subnets {
		got = append(got, sc.IPv6CIDR)
	}
	if want := []string{"2600:1f18:abcd:1200::/64", "", "2600:1f18:abcd:1202::/64"}; !slices.Equal(got, want) {
		t.Errorf("IPv6 blocks %q, want %q", got, want)
	}
	if _, err := parseFlags([]string{"--subnet-cidr", "10.0.0.0/20", "--subnet-ipv6-cidr", "2600::/64,2601::/64"}, io.Discard); err == nil {
		t.Error("two IPv6 blocks for one subnet: accepted")
	}
}

func TestParseInstances(t *testing.T) {
	o, err := parseFlags([]string{"--instance-type", "t3.medium",
		"--instance", "id=i-0000000000000a001,ip=10.0.0.10,netns=/run/netns/n1,env-file=/tmp/n1.env",
		"--instance", "type=m5.large,netns=/run/netns/n2,listen=127.0.0.1:8080",
		"--router-netns", "/run/netns/vpc", "--internet-netns", "/run/netns/inet"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.instances) != 2 || o.cfg.InstanceID != "i-0000000000000a001" || o.cfg.PrimaryIP != "10.0.0.10" || o.cfg.InstanceType != "t3.medium" {
		t.Fatalf("first instance not the world's: %+v", o)
	}
	if n := o.instances[1]; n.cfg.Type != "m5.large" || n.netns != "/run/netns/n2" || n.listen != "127.0.0.1:8080" {
		t.Errorf("second instance %+v", n)
	}
	for _, bad := range [][]string{
		{"--instance", "colour=blue"},
		{"--instance", "id"},
		{"--router-netns", "/r", "--instance", "id=i-0000000000000a001"},       // no netns for the links
		{"--internet-netns", "/i"},                                             // no router
		{"--router-netns", "/r", "--links", "eni", "--links-peer-netns", "/x"}, // two hypervisors
		{"--instance", "subnet=subnet-0123"},                                   // the first instance's subnet is the first
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// TestRunServesInstances: without a fabric, each --instance gets its own
// listener (its IMDS and the EC2 API) and env file.
func TestRunServesInstances(t *testing.T) {
	dir := t.TempDir()
	describe, env2 := filepath.Join(dir, "ec2.json"), filepath.Join(dir, "n2.env")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	pr, pw := io.Pipe()
	go func() {
		done <- run(ctx, []string{"--describe", describe, "--instance", "id=i-0000000000000a001",
			"--instance", "id=i-0000000000000a002,type=t3.nano,env-file=" + env2}, pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	sc.Scan()
	go io.Copy(io.Discard, pr)
	defer func() {
		cancel()
		<-done
	}()
	d := readDescription(t, describe)
	if len(d.Instances) != 2 || d.Instances[1].ID != "i-0000000000000a002" || d.Instances[1].Type != "t3.nano" || d.Instances[0].URL == d.Instances[1].URL {
		t.Fatalf("instances %+v", d.Instances)
	}
	if d.Info.InstanceID != "i-0000000000000a001" || len(d.ENIs) != 2 || d.Fabric != nil {
		t.Errorf("description %+v", d)
	}
	b, err := os.ReadFile(env2)
	if err != nil || !strings.Contains(string(b), "AWS_EC2_METADATA_SERVICE_ENDPOINT="+d.Instances[1].URL+"\n") ||
		!strings.Contains(string(b), "AWS_ENDPOINT_URL_EC2="+d.Instances[1].URL+"\n") {
		t.Errorf("env file %q %v", b, err)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{}).DialContext}}
	req, _ := http.NewRequest(http.MethodPut, d.Instances[1].URL+"/latest/api/token", nil)
	req.Header.Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "60")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	req, _ = http.NewRequest(http.MethodGet, d.Instances[1].URL+"/latest/meta-data/instance-id", nil)
	req.Header.Set("X-Aws-Ec2-Metadata-Token", string(tok))
	if resp, err = client.Do(req); err != nil {
		t.Fatal(err)
	}
	id, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(id) != "i-0000000000000a002" {
		t.Errorf("the second instance's IMDS says %q", id)
	}
}

// TestRunWorldOnFabric: two nodes on the VPC fabric from the command line
// (root): each node's primary link is up with its address, the nodes reach
// each other and the internet through the router, and the description
// carries the instances and the drop counters, which a spoofed source
// moves.
func TestRunWorldOnFabric(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	nss := map[string]string{}
	for _, n := range []string{"router", "internet", "n1", "n2"} {
		x, err := testutils.NewNS()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { x.Close(); _ = testutils.UnmountNS(x) })
		nss[n] = x.Path()
	}
	dir := t.TempDir()
	describe := filepath.Join(dir, "world.json")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	pr, pw := io.Pipe()
	go func() {
		done <- run(ctx, []string{"--vpc-cidr", "10.94.0.0/16", "--subnet-cidr", "10.94.0.0/20", "--describe", describe,
			"--instance", "id=i-0000000000000a001,ip=10.94.0.10,netns=" + nss["n1"],
			"--instance", "id=i-0000000000000a002,ip=10.94.0.11,type=m5.large,netns=" + nss["n2"] + ",env-file=" + filepath.Join(dir, "n2.env"),
			"--router-netns", nss["router"], "--internet-netns", nss["internet"]}, pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		t.Fatalf("run printed nothing: %v", <-done)
	}
	go io.Copy(io.Discard, pr)
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	ping := func(nsPath string, args ...string) error {
		out, err := exec.Command("nsenter", append([]string{"--net=" + nsPath, "--", "ping", "-c1", "-W2"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	for _, c := range [][]string{{nss["n1"], "10.94.0.11"}, {nss["n2"], "10.94.0.10"}, {nss["n1"], "198.51.100.10"}, {nss["n2"], "-M", "do", "-s", "8972", "10.94.0.10"}} {
		if err := ping(c[0], c[1:]...); err != nil {
			t.Errorf("ping %v from %s: %v", c[1:], c[0], err)
		}
	}
	d := readDescription(t, describe)
	if len(d.Instances) != 2 || d.Instances[1].PrimaryIP != "10.94.0.11" || d.Fabric == nil || d.Fabric.InternetHost != "198.51.100.10" || len(d.Fabric.Counters.Ports) != 2 {
		t.Fatalf("description: instances %+v fabric %+v", d.Instances, d.Fabric)
	}
	// node1 sends with node2's address: dropped at node1's ENI, counted.
	if out, err := exec.Command("ip", "-n", filepath.Base(nss["n1"]), "addr", "add", "10.94.0.11/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if err := ping(nss["n1"], "-I", "10.94.0.11", "198.51.100.10"); err == nil {
		t.Error("a spoofed ping got through")
	}
	deadline := time.Now().Add(5 * time.Second)
	for d = readDescription(t, describe); d.Fabric.Dropped != 1 && time.Now().Before(deadline); d = readDescription(t, describe) {
		time.Sleep(200 * time.Millisecond)
	}
	if d.Fabric.Dropped != 1 || d.Fabric.Counters.Ports[0].Dropped != 1 || d.Fabric.Error != "" {
		t.Errorf("after a spoofed ping: fabric %+v", d.Fabric)
	}
}
