package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
