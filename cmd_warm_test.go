//go:build !lean

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gofrs/flock"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

func TestWarmSkipsWhileAnotherPassRuns(t *testing.T) {
	if leanBuild {
		t.Skip("the lean build execs the full build in place of the test process; covered by the default build")
	}
	f := startFakeWith(t, ec2fake.Config{InstanceType: "t3.medium"})
	dir := t.TempDir()
	conf := filepath.Join(dir, "c.conflist")
	os.WriteFile(conf, []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni","stateDir":"`+dir+
		`/state","imdsEndpoint":"`+f.URL()+`","ec2Endpoint":"`+f.URL()+`","pool":{"source":"ec2"}}]}`), 0o600)
	os.MkdirAll(filepath.Join(dir, "state"), 0o700)
	other := flock.New(filepath.Join(dir, "state", "warm.lock"))
	if ok, err := other.TryLock(); !ok || err != nil {
		t.Fatal(ok, err)
	}
	defer other.Unlock()
	code, out, errs := run("warm", "--config", conf)
	if code != 0 || !strings.Contains(out, "another pass is running") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if f.IMDSCalls() != 0 || len(f.Calls()) != 0 {
		t.Errorf("a skipped pass called IMDS/EC2: %d, %v", f.IMDSCalls(), f.Calls())
	}
}
