package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/cmdline"
	"github.com/eni-cni/eni-cni/install"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
)

// renderArgs parses install flags and renders the conflist they ask for.
func renderArgs(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	c, err := parseInstall(append(args, "--portmap=no"), io.Discard)
	if err != nil {
		return nil, err
	}
	return c.gen.render(c.set, false)
}

func TestRenderEC2Conflist(t *testing.T) {
	data, err := renderArgs(t, "--pool", "ec2", "--warm-ip-target", "3", "--minimum-ip-target", "10", "--max-enis", "2",
		"--prefix-delegation", "--subnet-id", "subnet-0abc", "--security-group-ids", "sg-1,sg-2", "--tags", "cluster=prod,team=net",
		"--mtu", "9001", "--snat", "--state-dir", "/var/lib/eni-cni", "--log-file", "/var/log/eni-cni.log", "--network", "k8s-pods",
		"--exclude-ips", "10.0.0.5,10.0.1.0/28")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	want := map[string]any{
		"cniVersion": "1.0.0", "name": "k8s-pods",
		"plugins": []any{map[string]any{
			"type": "eni-cni", "stateDir": "/var/lib/eni-cni", "mtu": 9001.0, "snat": true, "logFile": "/var/log/eni-cni.log",
			"pool": map[string]any{"source": "ec2", "warmIPTarget": 3.0, "minimumIPTarget": 10.0, "maxENIs": 2.0,
				"prefixDelegation": true, "subnetID": "subnet-0abc", "securityGroupIDs": []any{"sg-1", "sg-2"},
				"tags": map[string]any{"cluster": "prod", "team": "net"}, "excludeIPs": []any{"10.0.0.5", "10.0.1.0/28"}},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("conflist:\n%s\nwant %v", data, want)
	}
	// What the plugin reads from it.
	conf, err := netconf.PluginConfFrom(data)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := netconf.Parse(conf)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Provider != netconf.EC2 || cfg.Warm.WarmIPTarget != 3 || cfg.Warm.MaxENIs != 2 || !cfg.Warm.PrefixDelegation || !cfg.SNAT || cfg.Network != "k8s-pods" || len(cfg.Warm.ExcludeIPs) != 2 {
		t.Errorf("parsed %+v", cfg)
	}
}

func TestRenderWritesOnlyWhatWasGiven(t *testing.T) {
	data, err := renderArgs(t, "--pool", "ec2")
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"cniVersion\": \"1.0.0\",\n  \"name\": \"pods\",\n  \"plugins\": [\n    {\n      \"type\": \"eni-cni\",\n      \"pool\": {\n        \"source\": \"ec2\"\n      }\n    }\n  ]\n}\n"
	if string(data) != want {
		t.Errorf("got\n%s\nwant\n%s", data, want)
	}
	// Zero is a value, not "unset".
	data, err = renderArgs(t, "--warm-ip-target", "0", "--snat=false")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"warmIPTarget": 0`) || !strings.Contains(string(data), `"snat": false`) || !strings.Contains(string(data), `"source": "ec2"`) {
		t.Errorf("explicit zero values lost (or the ec2 pool not implied):\n%s", data)
	}
}

func TestRenderStaticConflistWithPortmap(t *testing.T) {
	c, err := parseInstall([]string{"--ranges", "10.244.1.0/24,10.244.2.10-10.244.2.20", "--mtu", "1500", "--cni-version", "1.1.0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	data, err := c.gen.render(c.set, true)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		CNIVersion string
		Plugins    []map[string]any
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	pool := got.Plugins[0]["pool"].(map[string]any)
	if got.CNIVersion != "1.1.0" || pool["source"] != "static" || len(pool["ranges"].([]any)) != 2 || got.Plugins[1]["type"] != "portmap" {
		t.Errorf("conflist:\n%s", data)
	}
}

func TestRenderIPv6AndDualStackConflists(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []alloc.Family
	}{
		{[]string{"--ranges", "fd00:10:244:1::/64", "--ip-families", "ipv6"}, []alloc.Family{alloc.IPv6}},
		{[]string{"--ranges", "10.244.1.0/24,fd00:10:244:1::10-fd00:10:244:1::30", "--ip-families", "ipv4,ipv6"}, []alloc.Family{alloc.IPv4, alloc.IPv6}},
		{[]string{"--ranges", "10.244.1.0/24,fd00:10:244:1::/64", "--ip-families", "IPv6", "--ip-families", "ipv4"}, []alloc.Family{alloc.IPv6, alloc.IPv4}},
	} {
		data, err := renderArgs(t, tc.args...)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		conf, err := netconf.PluginConfFrom(data)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := netconf.Parse(conf)
		if err != nil {
			t.Fatalf("%v: the plugin refuses what install wrote: %v\n%s", tc.args, err, data)
		}
		if !reflect.DeepEqual(cfg.Families, tc.want) || cfg.Provider != netconf.Static {
			t.Errorf("%v: families %v (pool %q), want %v\n%s", tc.args, cfg.Families, cfg.Provider, tc.want, data)
		}
	}
	// A family given is written as given, even the default.
	data, err := renderArgs(t, "--ranges", "10.244.1.0/24", "--ip-families", "ipv4")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"ipFamilies": [`) {
		t.Errorf("a given --ip-families ipv4 is not written:\n%s", data)
	}
}

func TestRenderRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mtu", "1500"}, "say which pool"},
		{[]string{"--pool", "static"}, "--pool static needs --ranges"},
		{[]string{"--pool", "ec2", "--ranges", "10.0.0.0/24"}, "--ranges is for --pool static"},
		{[]string{"--ranges", "10.0.0.0/24", "--warm-ip-target", "3"}, "--warm-ip-target is a setting of the ec2 pool"},
		{[]string{"--ranges", "10.0.0.0/24", "--snat"}, "--snat is a setting of the ec2 pool"},
		{[]string{"--pool", "gcp"}, `--pool "gcp"`},
		{[]string{"--ranges", "10.0.0.0/33"}, "pool.ranges"},
		{[]string{"--pool", "ec2", "--subnet-id", "vpc-1"}, "not a subnet ID"},
		{[]string{"--pool", "ec2", "--security-group-ids", "default"}, "not a security group ID"},
		{[]string{"--pool", "ec2", "--exclude-ips", "10.0.0.300"}, "--exclude-ips"},
		{[]string{"--pool", "ec2", "--mtu", "100"}, "mtu 100"},
		{[]string{"--pool", "ec2", "--state-dir", "var/lib/x"}, "not an absolute path"},
		{[]string{"--pool", "ec2", "--log-level", "loud"}, "logLevel"},
		{[]string{"--pool", "ec2", "--cni-version", "2.0.0"}, "cniVersion"},
		{[]string{"--ranges", "fd00::/64"}, "--ranges fd00::/64 is IPv6 but --ip-families is ipv4"},
		{[]string{"--ranges", "10.0.0.0/24", "--ip-families", "ipv6"}, "--ranges 10.0.0.0/24 is IPv4 but --ip-families is ipv6"},
		{[]string{"--ranges", "10.0.0.0/24", "--ip-families", "ipv4,ipv6"}, "--ip-families has ipv6 but --ranges has no IPv6 range"},
		{[]string{"--ranges", "fd00::10-fd00::1", "--ip-families", "ipv6"}, "pool.ranges"},
		{[]string{"--ranges", "fd00::/129", "--ip-families", "ipv6"}, "pool.ranges"},
	} {
		_, err := renderArgs(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want one saying %q", tc.args, err, tc.want)
		}
	}
	for _, args := range [][]string{
		{"--warm-ip-target", "-1"}, {"--tags", "novalue"}, {"--snat=maybe"},
		{"--ip-families", "ipv5"}, {"--ip-families", "ipv6,ipv6"}, {"--ip-families", ","},
		{"--pool", "ec2", "--conflist", "x.conflist"}, {"--example-conflist", "--pool", "ec2"}, {"extra"},
	} {
		if _, err := parseInstall(args, io.Discard); !errors.Is(err, cmdline.ErrUsage) {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}

// installInto runs `eni-cni install` into a fresh tree, as its tests
// would, with this test binary standing in for the binary to install.
func installInto(t *testing.T, root string, args ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "eni-cni")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := cmdInstall(append([]string{"--root", root, "--binary", bin}, args...), &out, io.Discard)
	return out.String(), err
}

func TestInstallCommandKeepsOrRequiresAConflist(t *testing.T) {
	root := t.TempDir()
	if _, err := installInto(t, root); !errors.Is(err, install.ErrNoConflist) || !strings.Contains(err.Error(), "--pool ec2") {
		t.Fatalf("install with nothing to go on: %v", err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("a refused install wrote %v", entries)
	}
	// An eni-cni conflist the operator wrote under another name is kept,
	// and no second one is added.
	dir := filepath.Join(root, "etc/cni/net.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mine := `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni","pool":{"source":"static","ranges":["10.1.0.0/24"]}}]}`
	if err := os.WriteFile(filepath.Join(dir, "50-mine.conflist"), []byte(mine), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := installInto(t, root)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 || !strings.Contains(out, "kept "+dir+"/50-mine.conflist") {
		t.Errorf("conf dir %v, output:\n%s", entries, out)
	}
	// A kept conflist the plugin would refuse stops the install.
	if err := os.WriteFile(filepath.Join(dir, "50-mine.conflist"), []byte(strings.Replace(mine, "10.1.0.0/24", "10.1.0.0/99", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := installInto(t, root); err == nil || !strings.Contains(err.Error(), "50-mine.conflist") {
		t.Errorf("install over a broken conflist: %v", err)
	}
}

func TestInstallCommandExampleAndGivenConflist(t *testing.T) {
	root := t.TempDir()
	if out, err := installInto(t, root, "--example-conflist"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, _ := os.ReadFile(filepath.Join(root, "etc/cni/net.d/10-eni-cni.conflist"))
	if !strings.Contains(string(b), "10.99.0.0/24") {
		t.Errorf("example conflist:\n%s", b)
	}
	given := filepath.Join(t.TempDir(), "my.conflist")
	if err := os.WriteFile(given, []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni","pool":{"source":"ec2"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := installInto(t, root, "--conflist", given); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, _ = os.ReadFile(filepath.Join(root, "etc/cni/net.d/10-eni-cni.conflist"))
	if !strings.Contains(string(b), `"source":"ec2"`) {
		t.Errorf("given conflist not installed:\n%s", b)
	}
	if err := os.WriteFile(given, []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := installInto(t, root, "--conflist", given); !errors.Is(err, netconf.ErrNotOurs) {
		t.Errorf("a conflist without eni-cni: %v", err)
	}
}

func TestUninstallCommandRefusesWhilePodsHoldAddresses(t *testing.T) {
	root := t.TempDir()
	if out, err := installInto(t, root, "--ranges", "10.1.0.0/24", "--state-dir", "/var/lib/eni-cni"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	state := filepath.Join(root, "var/lib/eni-cni/state.json")
	if err := os.MkdirAll(filepath.Dir(state), 0o700); err != nil {
		t.Fatal(err)
	}
	stJSON := `{"version":1,"bootID":"b","allocations":[{"network":"pods","containerID":"abc","ifname":"eth0","ip":"10.1.0.5","podNamespace":"default","podName":"web-1","hostVeth":"eni0123456789ab"}],"cooling":[]}`
	if err := os.WriteFile(state, []byte(stJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	// The guard is called directly: through the command with --activate
	// a broken guard would go on to clean this machine's own network.
	c := &uninstallCmd{}
	st, note := readStateFile(state)
	err := c.guard(st, note)
	if err == nil || !strings.Contains(err.Error(), "pods still hold addresses from eni-cni: 1 (default/web-1") || !strings.Contains(err.Error(), "default/web-1") {
		t.Fatalf("uninstall with a pod: %v", err)
	}
	c.force = true
	if err := c.guard(st, note); err != nil {
		t.Errorf("--force: %v", err)
	}
	c.force = false
	// A corrupt state cannot say there are no pods either.
	if err := os.WriteFile(state, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, note = readStateFile(state); st != nil || !strings.Contains(note, "corrupt") {
		t.Fatalf("corrupt state read as %v, %q", st, note)
	}
	if err := c.guard(st, note); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("uninstall over a corrupt state: %v", err)
	}
	// No state file: nothing to protect.
	if st, note = readStateFile(filepath.Join(root, "nope.json")); st != nil || note != "" || c.guard(st, note) != nil {
		t.Errorf("missing state: %v %q", st, note)
	}
	var out bytes.Buffer
	// Offline (an image tree) there are no pods to protect.
	out.Reset()
	if err := cmdUninstall([]string{"--root", root}, &out, io.Discard); err != nil {
		t.Fatalf("offline uninstall: %v\n%s", err, out.String())
	}
	if _, err := os.Stat(filepath.Join(root, "opt/cni/bin/eni-cni")); err == nil {
		t.Error("the binary is still there")
	}
}

// TestUninstallRemovesNoDirectoryNamedByTheEnvironment: the cache of the
// full build is stateDir/.bin and nothing else (package delegate never takes it from
// the environment), so an ENI_CNI_CACHE_DIR left in root's environment
// (an older release's setting, a typo, a hostile profile) must not make
// uninstall remove that directory tree. The plan is only built, not run.
func TestUninstallRemovesNoDirectoryNamedByTheEnvironment(t *testing.T) {
	victim := t.TempDir()
	t.Setenv("ENI_CNI_CACHE_DIR", victim)
	c := &uninstallCmd{}
	c.l = install.DefaultLayout()
	c.stateDir = t.TempDir()
	u, err := c.plan(io.Discard)
	if err != nil {
		t.Skipf("plan on this host: %v", err)
	}
	for _, d := range u.CacheDirs {
		if d != path.Join(c.stateDir, ".bin") {
			t.Errorf("uninstall would remove %s, not a cache of eni-cni", d)
		}
	}
}

// TestReadStateFileCreatesNothing: uninstall --dry-run (and an image
// tree's uninstall) reads the state but must not leave a lock file.
func TestReadStateFileCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	if err := os.WriteFile(state, []byte(`{"version":1,"bootID":"b","allocations":[],"cooling":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, note := readStateFile(state); st == nil || note != "" {
		t.Fatalf("read: %v %q", st, note)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("reading the state left %d entries in its directory (%v)", len(entries), entries)
	}
}

// TestUninstallKeepsAForeignConflist: a file under eni-cni's conflist
// name (or the --conf-name given) that configures another plugin is the
// operator's network, not ours: uninstall keeps it and says so.
func TestUninstallKeepsAForeignConflist(t *testing.T) {
	root := t.TempDir()
	if out, err := installInto(t, root, "--ranges", "10.1.0.0/24"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	foreign := []byte(`{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"}]}`)
	conf := filepath.Join(root, "etc/cni/net.d/10-eni-cni.conflist")
	if err := os.WriteFile(conf, foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(root, "etc/cni/net.d/05-calico.conflist")
	if err := os.WriteFile(other, foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := cmdUninstall([]string{"--root", root}, &out, io.Discard); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if err := cmdUninstall([]string{"--root", root, "--conf-name", "05-calico.conflist"}, &out, io.Discard); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, p := range []string{conf, other} {
		if data, err := os.ReadFile(p); err != nil || !bytes.Equal(data, foreign) {
			t.Errorf("uninstall removed or changed %s, another plugin's conflist (%v)\n%s", p, err, out.String())
		}
	}
	if _, err := os.Stat(filepath.Join(root, "opt/cni/bin/eni-cni")); err == nil {
		t.Errorf("the plugin itself was kept\n%s", out.String())
	}
}

// TestUninstallFlushesNoTableOnAForeignRule: with no state and no ranges
// (an ec2 node without a state file) the rules at our priorities are not
// known to be ours; their route tables (the AWS VPC CNI's, numbered alike)
// must not be flushed because of them. Known addresses' tables are.
func TestUninstallFlushesNoTableOnAForeignRule(t *testing.T) {
	rules := []netsetup.PodRule{
		{IP: netip.MustParseAddr("10.0.0.5"), From: true, Table: 2},
		{IP: netip.MustParseAddr("10.0.0.6"), From: true, Table: 3},
	}
	mine, tables := ourRulesAndTables(rules, nil, nil)
	if len(mine) != 2 || len(tables) != 0 {
		t.Errorf("unknown owner: rules %v, tables to flush %v", mine, tables)
	}
	known := func(ip netip.Addr) bool { return ip == netip.MustParseAddr("10.0.0.6") }
	mine, tables = ourRulesAndTables(rules, known, []int{4})
	if len(mine) != 1 || !reflect.DeepEqual(tables, []int{4, 3}) {
		t.Errorf("known address: rules %v, tables to flush %v", mine, tables)
	}
}

func cmdInstall(args []string, stdout, stderr io.Writer) error {
	return Install(args, os.DirFS("../../scripts/systemd"), stdout, stderr)
}

func cmdUninstall(args []string, stdout, stderr io.Writer) error {
	return Uninstall(args, stdout, stderr)
}
