//go:build !lean

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/gc/crifake"
	"github.com/eni-cni/eni-cni/metrics"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/plugin"
)

// parseProm reads a metrics file with Prometheus' text-format parser.
func parseProm(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(f)
	if err != nil {
		data, _ := os.ReadFile(path)
		t.Fatalf("parse %s: %v\n%s", path, err, data)
	}
	return fams
}

// value returns the value of the sample of name whose labels include all
// of want (name=value pairs), or -1.
func value(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	fam := fams[name]
	if fam == nil {
		return -1
	}
next:
	for _, m := range fam.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if got[want[i]] != want[i+1] {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// metricsConflist writes a static-pool conflist with a metrics file.
func metricsConflist(t *testing.T, extra string) (confDir, stateDir, prom string) {
	t.Helper()
	root := t.TempDir()
	confDir, stateDir, prom = filepath.Join(root, "net.d"), filepath.Join(root, "state"), filepath.Join(root, "textfile", "eni-cni.prom")
	os.Mkdir(confDir, 0o700)
	os.Mkdir(filepath.Dir(prom), 0o755)
	conf := `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni","stateDir":"` + stateDir +
		`","metricsFile":"` + prom + `"` + extra + `}]}`
	if err := os.WriteFile(filepath.Join(confDir, "10-pods.conflist"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return confDir, stateDir, prom
}

// gc writes the file: pool by state, the run's time, duration and result;
// CNI verbs counted since; a failed run shows as such.
func TestGCWritesMetricsFile(t *testing.T) {
	if ec2Build {
		t.Skip("gc runs in the full build alone; covered by the default build")
	}
	confDir, stateDir, prom := metricsConflist(t, `,"pool":{"source":"static","ranges":["10.99.0.0/29"]}`)
	conf, _, _ := netconf.Find("", confDir)
	cfg, _ := netconf.Parse(conf)
	p, err := newPlugin(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := p.Mgr.Allocate(ctx, alloc.Request{Key: alloc.Key{Network: "pods", ContainerID: "a", IfName: "eth0"}, HostVeth: "enia"}); err != nil {
		t.Fatal(err)
	}
	// CNI verbs through the CNI boundary: STATUS, and DEL of an unknown
	// attachment (nothing to tear down).
	if err := testVerbs.Status(&skel.CmdArgs{StdinData: conf}); err != nil {
		t.Fatal(err)
	}
	if err := testVerbs.Del(&skel.CmdArgs{ContainerID: "gone", IfName: "eth0", StdinData: conf}); err != nil {
		t.Fatal(err)
	}
	cri := crifake.Start(t)
	cri.SetSandboxes(crifake.PodSandbox("a", "default", "web", "u1", true, time.Now()))
	start := time.Now()
	code, out, errs := run("gc", "--conf-dir", confDir, "--cri-endpoint", cri.Endpoint(), "--json")
	var r plugin.GCReport
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || !r.OK || r.Alive != 1 || len(r.Freed) != 0 {
		t.Fatalf("gc: exit %d %v: %s %s", code, err, out, errs)
	}
	fams := parseProm(t, prom)
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"eni_cni_pool_size", []string{"network", "pods", "eni", "none"}, 6},
		{"eni_cni_pool_addresses", []string{"eni", "none", "state", "allocated"}, 1},
		{"eni_cni_pool_addresses", []string{"eni", "none", "state", "free"}, 5},
		{"eni_cni_pool_addresses", []string{"eni", "none", "state", "cooling"}, 0},
		{"eni_cni_job_last_run_success", []string{"job", "gc"}, 1},
		{"eni_cni_job_runs_total", []string{"job", "gc"}, 1},
		{"eni_cni_job_failures_total", []string{"job", "gc"}, 0},
		{"eni_cni_gc_freed_addresses_total", nil, 0},
		{"eni_cni_cni_calls_total", []string{"verb", "STATUS", "result", "ok"}, 1},
		{"eni_cni_cni_calls_total", []string{"verb", "DEL", "result", "ok"}, 1},
		{"eni_cni_cni_calls_total", []string{"verb", "ADD", "result", "ok"}, 0},
		{"eni_cni_cni_duration_seconds", []string{"verb", "DEL"}, 1},
	}
	for _, c := range checks {
		if got := value(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if last := value(fams, "eni_cni_job_last_run_timestamp_seconds", "job", "gc"); last < float64(start.Unix()) || last > float64(time.Now().Unix()+1) {
		t.Errorf("last run %v, started %v", last, start.Unix())
	}
	// A run that fails is recorded as failed, and the file still written.
	cri.SetListError(status.Error(codes.Unavailable, "restarting"))
	if code, _, _ := run("gc", "--conf-dir", confDir, "--cri-endpoint", cri.Endpoint()); code == 0 {
		t.Fatal("gc against a failing runtime succeeded")
	}
	fams = parseProm(t, prom)
	if value(fams, "eni_cni_job_last_run_success", "job", "gc") != 0 || value(fams, "eni_cni_job_failures_total", "job", "gc") != 1 ||
		value(fams, "eni_cni_job_runs_total", "job", "gc") != 2 {
		t.Error("the failed gc run is not in the metrics")
	}
	if _, err := os.Stat(filepath.Join(stateDir, metrics.RunsFileName)); err != nil {
		t.Error(err)
	}
}

// Per ENI, and EC2 calls by API, after a warm pass against the fake EC2.
func TestWarmWritesMetricsFile(t *testing.T) {
	f := startFakeWith(t, ec2fake.Config{InstanceType: "m5.large"})
	confDir, _, prom := metricsConflist(t, `,"imdsEndpoint":"`+f.URL()+`","ec2Endpoint":"`+f.URL()+`","pool":{"warmIPTarget":3}`)
	code, out, errs := run("warm", "--conf-dir", confDir, "--json")
	var r warmReport
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || !r.OK || r.Pool == nil || r.Pool.Free < 3 || len(r.Actions) == 0 {
		t.Fatalf("warm: exit %d %v: %s %s", code, err, out, errs)
	}
	fams := parseProm(t, prom)
	var eni string
	for _, m := range fams["eni_cni_pool_size"].GetMetric() {
		for _, l := range m.Label {
			if l.GetName() == "eni" {
				eni = l.GetValue()
			}
		}
	}
	if !strings.HasPrefix(eni, "eni-") || value(fams, "eni_cni_pool_addresses", "eni", eni, "state", "free") < 3 {
		t.Errorf("pool by ENI: eni %q, free %v", eni, value(fams, "eni_cni_pool_addresses", "eni", eni, "state", "free"))
	}
	if value(fams, "eni_cni_ec2_calls_total", "api", "DescribeNetworkInterfaces") < 1 || value(fams, "eni_cni_ec2_calls_total", "api", "DescribeInstanceTypes") > 0 || value(fams, "eni_cni_ec2_calls_total", "api", "AssignPrivateIpAddresses") < 1 ||
		value(fams, "eni_cni_ec2_errors_total", "api", "AssignPrivateIpAddresses") != 0 {
		t.Errorf("ec2 calls: %v", fams["eni_cni_ec2_calls_total"])
	}
	if value(fams, "eni_cni_job_last_run_success", "job", "warm") != 1 {
		t.Error("warm run not recorded")
	}
	// EC2 refusing: the error is counted by API and the run failed.
	f.InjectFault("AssignPrivateIpAddresses", ec2fake.Fault{Code: "UnauthorizedOperation"})
	conf, _, _ := netconf.Find("", confDir)
	cfg, _ := netconf.Parse(conf)
	p, _ := newPlugin(cfg)
	p.Mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		for _, a := range st.EC2.Addrs {
			st.Allocations = append(st.Allocations, alloc.Allocation{Key: alloc.Key{Network: "pods", ContainerID: "c" + a.IP.String(), IfName: "eth0"}, IP: a.IP, ENI: a.ENI, AllocatedAt: time.Now()})
		}
		return true, nil
	})
	if code, _, _ := run("warm", "--conf-dir", confDir); code == 0 {
		t.Fatal("warm succeeded though EC2 refuses")
	}
	fams = parseProm(t, prom)
	if value(fams, "eni_cni_ec2_errors_total", "api", "AssignPrivateIpAddresses") != 1 || value(fams, "eni_cni_job_last_run_success", "job", "warm") != 0 {
		t.Errorf("refused warm: errors %v", fams["eni_cni_ec2_errors_total"])
	}
	if value(fams, "eni_cni_pool_demand") != 0 || fams["eni_cni_warm_last_pass_timestamp_seconds"] != nil {
		t.Errorf("no ADD waits: demand %v, last pass %v", value(fams, "eni_cni_pool_demand"), fams["eni_cni_warm_last_pass_timestamp_seconds"])
	}
	// Two ADDs waiting on the dry pool while IAM still refuses: the file
	// shows the demand and why the pass they waited for failed.
	p.Mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		for _, id := range []string{"waiting1", "waiting2"} {
			st.Demands = append(st.Demands, alloc.Demand{Key: alloc.Key{Network: "pods", ContainerID: id, IfName: "eth0"}, Since: time.Now().UTC(), Until: time.Now().Add(time.Minute).UTC()})
		}
		return true, nil
	})
	if code, _, _ := run("warm", "--conf-dir", confDir); code == 0 {
		t.Fatal("warm succeeded though EC2 refuses")
	}
	fams = parseProm(t, prom)
	if d := value(fams, "eni_cni_pool_demand"); d != 2 {
		t.Errorf("demand %v, want 2", d)
	}
	if at := value(fams, "eni_cni_warm_last_pass_timestamp_seconds", "result", "iam-denied"); at < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last pass: %v", fams["eni_cni_warm_last_pass_timestamp_seconds"])
	}
}

// With metrics off (no metricsFile, no node_exporter directory), CNI calls
// write no counters.
func TestMetricsOffWritesNothing(t *testing.T) {
	if _, err := os.Stat(netconf.DefaultTextfileDir); err == nil {
		t.Skip(netconf.DefaultTextfileDir + " exists on this machine")
	}
	stateDir := t.TempDir()
	conf := []byte(`{"cniVersion":"1.0.0","name":"pods","stateDir":"` + stateDir + `","pool":{"source":"static","ranges":["10.99.0.0/30"]}}`)
	if err := testVerbs.Status(&skel.CmdArgs{StdinData: conf}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(stateDir, metrics.CountersFileName)); !os.IsNotExist(err) {
		t.Error("counters written with metrics off")
	}
	off := []byte(`{"cniVersion":"1.0.0","name":"pods","stateDir":"` + stateDir + `","metricsFile":"off","pool":{"source":"static","ranges":["10.99.0.0/30"]}}`)
	c, err := netconf.Parse(off)
	if err != nil || c.MetricsPath() != "" {
		t.Errorf("metricsFile off: %q %v", c.MetricsPath(), err)
	}
	if _, err := netconf.Parse([]byte(`{"name":"n","metricsFile":"rel.prom"}`)); err == nil {
		t.Error("relative metricsFile accepted")
	}
}
