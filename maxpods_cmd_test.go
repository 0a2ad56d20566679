//go:build !lean

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/pool"
)

func startFakeWith(t *testing.T, cfg ec2fake.Config) *ec2fake.Server {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	f, err := ec2fake.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// max-pods against the published eni-max-pods.txt numbers, with the limits
// served by the fake EC2 through the real SDK (DescribeInstanceTypes).
func TestMaxPodsCommandPublishedNumbers(t *testing.T) {
	f := startFakeWith(t, ec2fake.Config{InstanceType: "m5.large"})
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv(ec2.EnvEC2Endpoint, f.URL())
	t.Setenv(ec2.EnvIMDSEndpoint, f.URL())
	empty := t.TempDir() // no config: defaults
	tests := []struct {
		typ              string
		allowed, maxPods int
	}{
		{"t3.micro", 4, 4}, {"t3.medium", 17, 17}, {"m5.large", 29, 29}, {"m5.xlarge", 58, 58},
		{"m5.4xlarge", 234, 110}, {"c5.18xlarge", 737, 250}, {"m5.24xlarge", 737, 250}, {"p5.48xlarge", 100, 100},
	}
	for _, tt := range tests {
		code, out, errs := run("max-pods", "--conf-dir", empty, "--instance-type", tt.typ, "--show-max-allowed")
		if code != 0 || strings.TrimSpace(out) != strconv.Itoa(tt.allowed) {
			t.Errorf("%s --show-max-allowed: exit %d, %q %s; want %d", tt.typ, code, out, errs, tt.allowed)
		}
		code, out, errs = run("max-pods", "--conf-dir", empty, "--instance-type", tt.typ)
		if code != 0 || strings.TrimSpace(out) != strconv.Itoa(tt.maxPods) {
			t.Errorf("%s: exit %d, %q %s; want %d", tt.typ, code, out, errs, tt.maxPods)
		}
	}
	code, _, errs := run("max-pods", "--conf-dir", empty, "--instance-type", "m5.nonesuch")
	if code != 1 || !strings.Contains(errs, "InvalidInstanceType") {
		t.Errorf("unknown type: exit %d, %s", code, errs)
	}
}

// Off the node: --instance-type, --region and credentials in the
// environment need no IMDS (here one that refuses every connection).
func TestMaxPodsOffTheNode(t *testing.T) {
	f := startFakeWith(t, ec2fake.Config{InstanceType: "m5.large"})
	t.Setenv(ec2.EnvEC2Endpoint, f.URL())
	t.Setenv(ec2.EnvIMDSEndpoint, "http://127.0.0.1:1")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	empty := t.TempDir()
	code, out, errs := run("max-pods", "--conf-dir", empty, "--instance-type", "m5.xlarge", "--region", "us-east-1")
	if code != 0 || strings.TrimSpace(out) != "58" {
		t.Fatalf("--region: exit %d, %q %s; want 58", code, out, errs)
	}
	// Without a region it must ask IMDS, which refuses: a clear error.
	code, _, errs = run("max-pods", "--conf-dir", empty, "--instance-type", "m5.xlarge")
	if code == 0 || !strings.Contains(errs, "region") {
		t.Errorf("no region, no IMDS: exit %d, %s", code, errs)
	}
}

// This node (no --instance-type): the type and region from IMDS, limits
// from EC2; the config's prefix delegation and maxENIs count.
func TestMaxPodsThisNodeWithConfig(t *testing.T) {
	f := startFakeWith(t, ec2fake.Config{InstanceType: "m5.xlarge"})
	root := t.TempDir()
	conf := filepath.Join(root, "10.conflist")
	os.WriteFile(conf, []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni","stateDir":"`+
		filepath.Join(root, "state")+`","imdsEndpoint":"`+f.URL()+`","ec2Endpoint":"`+f.URL()+
		`","pool":{"prefixDelegation":true,"maxENIs":1}}]}`), 0o600)
	code, out, errs := run("max-pods", "--config", conf, "--json")
	var r maxPodsReport
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s %s", code, err, out, errs)
	}
	// 1 ENI × 14 slots × 16 + 2 = 226, capped at 110 on 4 vCPUs.
	if r.InstanceType != "m5.xlarge" || r.PodAddresses != 224 || r.MaxAllowed != 226 || r.MaxPods != 110 || r.LimitsFrom != "ec2" || r.VCPUs != 4 {
		t.Errorf("report %+v", r)
	}
	if _, err := os.Stat(filepath.Join(root, "state")); !os.IsNotExist(err) {
		t.Error("max-pods created the state directory")
	}
}

// With the limits cached in the store (warm fetched them), max-pods needs
// neither IMDS nor EC2.
func TestMaxPodsFromStore(t *testing.T) {
	st := allocfake.NewStore()
	s := alloc.NewState("b")
	s.EC2 = &pool.EC2{InstanceID: "i-1", InstanceType: "c5.18xlarge", Limits: &pool.Limits{MaxENIs: 15, IPv4PerENI: 50, VCPUs: 72}}
	st.Save(s)
	d := maxPodsDeps{store: st, newAPI: func(string) ec2.TypesAPI { t.Fatal("EC2 called"); return nil }}
	r, err := maxPodsFor(context.Background(), d, pool.WarmConfig{}, "")
	if err != nil || r.MaxPods != 250 || r.MaxAllowed != 737 || r.LimitsFrom != "store" {
		t.Errorf("%+v %v", r, err)
	}
}

func TestMaxPodsNotOnEC2(t *testing.T) {
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv(ec2.EnvIMDSEndpoint, "http://127.0.0.1:1")
	code, _, errs := run("max-pods", "--conf-dir", t.TempDir())
	if code != 1 || !strings.Contains(errs, "not an EC2 instance") {
		t.Errorf("exit %d, %s", code, errs)
	}
}
