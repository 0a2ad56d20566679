package netconf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
)

func TestParseConfigDefaults(t *testing.T) {
	c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"pods","type":"eni-cni","pool":{"source":"static","ranges":["10.99.0.0/24"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != DefaultStateDir || c.MTU != 9001 || c.Cooldown != 30*time.Second || c.GCGrace != 600*time.Second ||
		c.VethPrefix != "eni" || c.LockTimeout != DefaultLockTimeout || c.Pool.Size(nil) != 254 || c.Network != "pods" {
		t.Errorf("defaults wrong: %+v", c)
	}
}

func TestParseConfigKeys(t *testing.T) {
	c, err := Parse([]byte(`{"cniVersion":"0.4.0","name":"n","type":"eni-cni","stateDir":"/tmp/x","mtu":1500,
		"cooldownSeconds":5,"gcGraceSeconds":60.5,"lockTimeoutSeconds":0.5,"hostVethPrefix":"pod",
		"logFile":"/tmp/l","logLevel":"debug","pool":{"source":"static","ranges":["10.98.0.10-10.98.0.20"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != "/tmp/x" || c.MTU != 1500 || c.Cooldown != 5*time.Second || c.GCGrace != 60500*time.Millisecond ||
		c.LockTimeout != 500*time.Millisecond || c.VethPrefix != "pod" || c.LogLevel != "debug" || c.Pool.Size(nil) != 11 {
		t.Errorf("keys not honoured: %+v", c)
	}
}

func TestFindConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := Find("", dir); err == nil || !strings.Contains(err.Error(), "no config") {
		t.Fatalf("empty dir: %v", err)
	}
	write("05-other.conflist", `{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"bridge"}]}`)
	write("07-broken.conflist", `{`)
	write("10-pods.conflist", `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni","pool":{"source":"static","ranges":["10.0.0.0/30"]}},{"type":"portmap"}]}`)
	write("20-later.conflist", `{"cniVersion":"1.0.0","name":"later","plugins":[{"type":"eni-cni"}]}`)
	write("notes.txt", `{"type":"eni-cni"}`)
	data, path, err := Find("", dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "10-pods.conflist" {
		t.Errorf("picked %s", path)
	}
	c, err := Parse(data)
	if err != nil || c.Network != "pods" || c.CNIVersion != "1.0.0" || c.Pool.Size(nil) != 2 {
		t.Errorf("extracted %s: %v %+v", data, err, c)
	}
	if _, _, err := Find(filepath.Join(dir, "05-other.conflist"), dir); !errors.Is(err, ErrNotOurs) {
		t.Errorf("explicit file without eni-cni: %v", err)
	}
	if _, _, err := Find(filepath.Join(dir, "missing"), dir); err == nil {
		t.Error("missing file accepted")
	}
}

func TestShippedConflistParses(t *testing.T) {
	data, _, err := Find("../testdata/10-pods.conflist", "")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := Parse(data); err != nil || c.Network != "pods" || c.Pool.Size(nil) != 265 {
		t.Fatalf("%v %+v", err, c)
	}
}

func TestParseConfigEC2(t *testing.T) {
	c, err := Parse([]byte(`{"cniVersion":"1.0.0","name":"pods"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Provider != "ec2" || c.Warm.WarmIPTarget != 5 || c.Warm.MinimumIPTarget != 0 || c.Warm.PrefixDelegation {
		t.Errorf("ec2 defaults: %+v", c.Warm)
	}
	c, err = Parse([]byte(`{"name":"pods","warmIPTarget":2,"maxENIs":9,"imdsEndpoint":"http://127.0.0.1:9","snat":true,
		"pool":{"source":"ec2","warmIPTarget":7,"minimumIPTarget":10,"prefixDelegation":true,"subnetID":"subnet-1",
		"securityGroupIDs":["sg-1","sg-2"],"tags":{"team":"net"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	w := c.Warm
	if w.WarmIPTarget != 7 || w.MinimumIPTarget != 10 || w.MaxENIs != 9 || !w.PrefixDelegation || w.SubnetID != "subnet-1" ||
		len(w.SecurityGroupIDs) != 2 || w.Tags["team"] != "net" || c.IMDSEndpoint != "http://127.0.0.1:9" || !c.SNAT {
		t.Errorf("ec2 keys: %+v %+v", w, c)
	}
	c, err = Parse([]byte(`{"name":"pods","excludeIPs":["10.0.9.9"],"pool":{"excludeIPs":["10.0.0.5"," 10.0.1.0/28","10.0.2.7/24"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.Warm.ExcludeIPs); got != "[10.0.0.5/32 10.0.1.0/28 10.0.2.0/24]" {
		t.Errorf("excludeIPs %s (pool wins over the top level)", got)
	}
	if sp, ok := c.Pool.(alloc.StoredPool); !ok || len(sp.Exclude) != 3 {
		t.Errorf("the pool does not exclude them: %#v", c.Pool)
	}
}

func TestParseConfigAddWait(t *testing.T) {
	for _, tc := range []struct {
		conf string
		want time.Duration
	}{
		{`{"name":"pods"}`, 110 * time.Second},
		{`{"name":"pods","pool":{"addWaitSeconds":40}}`, 40 * time.Second},
		{`{"name":"pods","addWaitSeconds":12.5}`, 12500 * time.Millisecond},
		{`{"name":"pods","addWaitSeconds":30,"pool":{"addWaitSeconds":0}}`, 0},
	} {
		c, err := Parse([]byte(tc.conf))
		if err != nil {
			t.Fatalf("%s: %v", tc.conf, err)
		}
		if c.AddWait != tc.want {
			t.Errorf("%s: addWait %s, want %s", tc.conf, c.AddWait, tc.want)
		}
	}
	for _, bad := range []string{`{"name":"pods","pool":{"addWaitSeconds":-1}}`, `{"name":"pods","addWaitSeconds":181}`, `{"name":"pods","addWaitSeconds":"5"}`} {
		_, err := Parse([]byte(bad))
		if err == nil || !strings.Contains(err.Error(), "addWaitSeconds") && !errors.Is(err, ErrDecode) {
			t.Errorf("%s: %v, want an error naming addWaitSeconds", bad, err)
		}
	}
}
