package integration

import (
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/install/systemdfake"
)

// The install tests run `eni-cni install` and `uninstall` (and the
// scripts/install.sh wrapper) into temporary roots. Whatever touches a
// network runs in a node namespace of its own; a root is never this
// machine's "/".

// installScript is scripts/install.sh of this checkout.
func installScript(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../scripts/install.sh")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hostPaths are where a real install would write on this machine; the
// tests check none of them appears or changes.
var hostPaths = []string{
	"/opt/cni/bin/eni-cni", "/etc/cni/net.d/10-eni-cni.conflist", "/etc/cron.d/eni-cni",
	"/etc/systemd/system/eni-cni-gc.timer", "/etc/systemd/system/eni-cni-warm.timer",
	"/etc/systemd/system/eni-cni-gc.service", "/etc/systemd/system/eni-cni-warm.service", "/etc/systemd/system/eni-cni-warm-lean.service",
	"/etc/systemd/system/timers.target.wants/eni-cni-gc.timer", "/etc/systemd/system/timers.target.wants/eni-cni-warm.timer",
	"/var/lib/eni-cni/state.json", "/var/lib/eni-cni/state.lock",
}

func snapshotHost(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range hostPaths {
		fi, err := os.Lstat(p)
		if err != nil {
			out[p] = "absent"
			continue
		}
		out[p] = fi.Mode().String() + " " + fi.ModTime().String()
	}
	return out
}

// runInstall execs the binary (or the script) in the host namespace with
// PATH led by fake systemctl and crontab that record any call, and
// ENI_CNI_CACHE_DIR pointing at a directory that must never appear.
func runInstall(t *testing.T, argv ...string) (output, string) {
	t.Helper()
	fakes := t.TempDir()
	calls := filepath.Join(fakes, "calls")
	for _, tool := range []string{"systemctl", "crontab"} {
		script := "#!/bin/sh\necho " + tool + " \"$@\" >>" + calls + "\n"
		if err := os.WriteFile(filepath.Join(fakes, tool), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(t.TempDir(), "cache-must-not-exist")
	cmd := exec.CommandContext(t.Context(), argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + fakes + ":" + os.Getenv("PATH"), "ENI_CNI_CACHE_DIR=" + cache}
	var o output
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	o.stdout, o.stderr = []byte(stdout.String()), []byte(stderr.String())
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		o.exit = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", argv, err)
	}
	if b, err := os.ReadFile(calls); err == nil {
		t.Errorf("%v ran %s on this machine", argv[1:], b)
	}
	if _, err := os.Stat(cache); err == nil {
		t.Errorf("%v unpacked the full build into the host's cache dir", argv[1:])
	}
	return o, stdout.String()
}

// files lists the regular files and symlinks below root.
func files(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestInstallIntoRootLeavesHostAlone installs into a tree that looks like a
// running systemd node (run/systemd/system and a fake systemd listening on
// run/systemd/private) through scripts/install.sh, without --activate: the
// units are written and enabled in the tree, nothing talks to any systemd,
// no systemctl or crontab runs, no state file, nothing under
// var/lib/eni-cni, nothing on this machine.
func TestInstallIntoRootLeavesHostAlone(t *testing.T) {
	root := t.TempDir()
	sd, err := systemdfake.Start(root)
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	host := snapshotHost(t)
	o, out := runInstall(t, "bash", installScript(t), pluginBin, "--root", root, "--pool", "static", "--ranges", "10.99.7.0/24", "--mtu", "1500")
	if o.exit != 0 {
		t.Fatalf("install: %s", o)
	}
	want := []string{
		"etc/cni/net.d/10-eni-cni.conflist",
		"etc/systemd/system/eni-cni-gc.service", "etc/systemd/system/eni-cni-gc.timer",
		"etc/systemd/system/eni-cni-warm-lean.service", "etc/systemd/system/eni-cni-warm.service", "etc/systemd/system/eni-cni-warm.timer",
		"etc/systemd/system/timers.target.wants/eni-cni-gc.timer", "etc/systemd/system/timers.target.wants/eni-cni-warm.timer",
		"opt/cni/bin/eni-cni", "run/systemd/private",
	}
	if got := files(t, root); !slices.Equal(got, want) {
		t.Errorf("files in the root:\n%v\nwant\n%v\noutput:\n%s", got, want, out)
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/eni-cni")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("var/lib/eni-cni exists in the root (%v)", err)
	}
	if n := sd.Conns(); n != 0 {
		t.Errorf("install --root connected to systemd %d times: %v", n, sd.Calls())
	}
	installed, err := os.ReadFile(filepath.Join(root, "opt/cni/bin/eni-cni"))
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.ReadFile(pluginBin)
	if len(installed) != len(self) || string(installed) != string(self) {
		t.Errorf("installed binary (%d bytes) is not the one run (%d bytes): the lean binary must install itself, not its full build", len(installed), len(self))
	}
	var list struct {
		Plugins []map[string]any `json:"plugins"`
	}
	b, _ := os.ReadFile(filepath.Join(root, "etc/cni/net.d/10-eni-cni.conflist"))
	if err := json.Unmarshal(b, &list); err != nil || list.Plugins[0]["type"] != "eni-cni" {
		t.Errorf("conflist: %v\n%s", err, b)
	}
	if after := snapshotHost(t); !maps.Equal(host, after) {
		t.Errorf("this machine changed:\nbefore %v\nafter  %v", host, after)
	}
}

func TestInstallDryRunWritesNothing(t *testing.T) {
	root := t.TempDir()
	o, out := runInstall(t, pluginBin, "install", "--root", root, "--pool", "ec2", "--warm-ip-target", "2", "--dry-run")
	if o.exit != 0 {
		t.Fatalf("install --dry-run: %s", o)
	}
	if got := files(t, root); len(got) != 0 {
		t.Errorf("dry run wrote %v", got)
	}
	for _, want := range []string{"dry run: nothing is changed", "would write " + root + "/opt/cni/bin/eni-cni", "would write " + root + "/etc/cni/net.d/10-eni-cni.conflist", "would write " + root + "/etc/cron.d/eni-cni"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	// Uninstall's dry run of a full tree removes nothing either.
	if o, _ := runInstall(t, pluginBin, "install", "--root", root, "--pool", "ec2"); o.exit != 0 {
		t.Fatalf("install: %s", o)
	}
	before := files(t, root)
	o, out = runInstall(t, pluginBin, "uninstall", "--root", root, "--purge", "--dry-run")
	if o.exit != 0 || !strings.Contains(out, "would remove "+root+"/opt/cni/bin/eni-cni") {
		t.Fatalf("uninstall --dry-run: %s", o)
	}
	if got := files(t, root); !slices.Equal(got, before) {
		t.Errorf("uninstall dry run changed %v to %v", before, got)
	}
}

func TestInstallTwiceUninstallTwice(t *testing.T) {
	root := t.TempDir()
	args := []string{pluginBin, "install", "--root", root, "--pool", "ec2", "--snat", "--max-enis", "2"}
	if o, _ := runInstall(t, args...); o.exit != 0 {
		t.Fatalf("install: %s", o)
	}
	first := files(t, root)
	o, out := runInstall(t, args...)
	if o.exit != 0 || strings.Contains(out, "write ") {
		t.Fatalf("second install: %s", o)
	}
	if got := files(t, root); !slices.Equal(got, first) {
		t.Errorf("second install: %v, first %v", got, first)
	}
	for i := range 2 {
		o, out := runInstall(t, "bash", installScript(t), pluginBin, "--uninstall", "--root", root)
		if o.exit != 0 {
			t.Fatalf("uninstall %d: %s", i+1, o)
		}
		if got := files(t, root); len(got) != 0 {
			t.Errorf("uninstall %d left %v\n%s", i+1, got, out)
		}
		if i == 1 && strings.Contains(out, "remove ") {
			t.Errorf("second uninstall still removed something:\n%s", out)
		}
	}
}

// TestInstallActivateStartsTimers is the DaemonSet's case: the root is a
// running node's (here a tree with a fake systemd on its private socket):
// the timers are enabled, systemd reloads and starts them and a first warm
// pass, and the state directory exists, empty.
func TestInstallActivateStartsTimers(t *testing.T) {
	root := t.TempDir()
	sd, err := systemdfake.Start(root)
	if err != nil {
		t.Fatal(err)
	}
	defer sd.Close()
	n := newNode(t)
	o, err := runIn(t.Context(), n.path(), nil, nil, pluginBin, "install", "--root", root, "--activate", "--pool", "ec2")
	if err != nil || o.exit != 0 {
		t.Fatalf("install --activate: %v %s", err, o)
	}
	var got []string
	for _, c := range sd.Calls() {
		got = append(got, c.String())
	}
	want := []string{"Reload()", "StartUnit(eni-cni-gc.timer, replace)", "StartUnit(eni-cni-warm.timer, replace)", "StartUnit(eni-cni-warm-lean.service, replace)"}
	if !slices.Equal(got, want) {
		t.Errorf("systemd calls %v, want %v", got, want)
	}
	fi, err := os.Stat(filepath.Join(root, "var/lib/eni-cni"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir: %v %v", fi, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "var/lib/eni-cni")); len(entries) != 0 {
		t.Errorf("state dir holds %v", entries)
	}
	if !strings.Contains(string(o.stdout), "doctor: run") {
		t.Errorf("output does not say doctor was left to the node:\n%s", o.stdout)
	}
	// Uninstall stops them and reloads.
	o, err = runIn(t.Context(), n.path(), nil, nil, pluginBin, "uninstall", "--root", root, "--activate", "--no-ec2")
	if err != nil || o.exit != 0 {
		t.Fatalf("uninstall --activate: %v %s", err, o)
	}
	got = nil
	for _, c := range sd.Calls()[len(want):] {
		got = append(got, c.String())
	}
	want = []string{"StopUnit(eni-cni-gc.timer, replace)", "StopUnit(eni-cni-warm.timer, replace)", "StopUnit(eni-cni-gc.service, replace)", "StopUnit(eni-cni-warm.service, replace)", "StopUnit(eni-cni-warm-lean.service, replace)", "Reload()"}
	if !slices.Equal(got, want) {
		t.Errorf("uninstall: systemd calls %v, want %v", got, want)
	}
	if left := files(t, root); !slices.Equal(left, []string{"run/systemd/private"}) {
		t.Errorf("uninstall left %v", left)
	}
}

// TestUninstallRemovesNodeNetworking: pods on a static pool in a node
// namespace; uninstall refuses while they hold addresses, and with --force
// removes their veths, routes and rules; the state stays until --purge.
func TestUninstallRemovesNodeNetworking(t *testing.T) {
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.8.0/29"}, nil)
	root := filepath.Dir(nw.stateDir) // the conflist's stateDir /state is nw's state dir
	o, err := runIn(t.Context(), n.path(), nil, nil, pluginBin, "install", "--root", root, "--activate", "--timers", "cron",
		"--network", nw.name, "--ranges", "10.99.8.0/29", "--state-dir", "/state")
	if err != nil || o.exit != 0 {
		t.Fatalf("install: %v %s", err, o)
	}
	pods := newPods(t, 2)
	for _, p := range pods {
		nw.add(t, p)
	}
	uninstall := func(args ...string) output {
		t.Helper()
		o, err := runIn(t.Context(), n.path(), nil, nil, append([]string{pluginBin, "uninstall", "--root", root, "--activate"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	o = uninstall()
	if o.exit == 0 || !strings.Contains(string(o.stderr), "pods still hold addresses from eni-cni: 2 (") || !strings.Contains(string(o.stderr), "eni-it/pod-00") {
		t.Fatalf("uninstall with pods: want a refusal naming them, got %s", o)
	}
	if len(n.vethNames(t)) != 2 || !slices.Contains(files(t, root), "opt/cni/bin/eni-cni") {
		t.Fatalf("a refused uninstall changed something: veths %v, files %v", n.vethNames(t), files(t, root))
	}
	o = uninstall("--force")
	if o.exit != 0 {
		t.Fatalf("uninstall --force: %s", o)
	}
	n.assertNoAttachments(t)
	for _, want := range []string{"delete 2 host veths", "delete 2 policy rules", "kept " + root + "/state"} {
		if !strings.Contains(string(o.stdout), want) {
			t.Errorf("uninstall output lacks %q:\n%s", want, o.stdout)
		}
	}
	if got := files(t, root); !slices.Contains(got, "state/state.json") || slices.Contains(got, "opt/cni/bin/eni-cni") || slices.Contains(got, "etc/cron.d/eni-cni") {
		t.Errorf("after uninstall: %v", got)
	}
	// The state still names the pods; --force again, with --purge (and
	// --state-dir: the conflist that named it is gone).
	o = uninstall("--force", "--purge", "--state-dir", "/state")
	if o.exit != 0 {
		t.Fatalf("uninstall --purge: %s", o)
	}
	if got := files(t, root); !slices.Equal(got, []string{filepath.Base(nw.confFile)}) {
		t.Errorf("after --purge: %v, want only the test's own config", got)
	}
	if o = uninstall(); o.exit != 0 {
		t.Errorf("uninstall of nothing: %s", o)
	}
}

// TestUninstallEC2Node: a simulated EC2 node with a second ENI, pods on
// both, SNAT on. Uninstall --force removes the pods' wiring, flushes the
// ENI's route table, removes the SNAT chain and the NodePort marking warm
// set up, and lists the ENI warm created, read back from EC2 by its tag.
func TestUninstallEC2Node(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatal("iptables not installed (scripts/install-test-deps.sh)")
	}
	en := newEC2Node(t, ec2fake.Config{})
	en.primaryLink(t)
	nw := newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": 7}, map[string]any{"snat": true})
	if o, _ := en.warmAttaching(t, nw); o.exit != 0 {
		t.Fatalf("warm: %s", o)
	}
	enis := en.attached()
	if len(enis) != 2 {
		t.Fatalf("want a second ENI, have %+v", enis)
	}
	sec := enis[1]
	table := sec.DeviceIndex + 1
	for _, p := range newPods(t, 6) {
		nw.add(t, p)
	}
	if len(en.tableRoutes(t, table)) == 0 || !natHas(t, en.node, "ENI-CNI-SNAT") {
		t.Fatalf("setup: table %d %v, SNAT chain present %v", table, en.tableRoutes(t, table), natHas(t, en.node, "ENI-CNI-SNAT"))
	}
	// Install the network's own config as the node's conflist.
	root := filepath.Dir(nw.stateDir)
	conf := nw.conf
	conf["stateDir"] = "/state"
	plugin := map[string]any{}
	for k, v := range conf {
		if k != "cniVersion" && k != "name" {
			plugin[k] = v
		}
	}
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": nw.name, "plugins": []any{plugin}})
	given := filepath.Join(t.TempDir(), "given.conflist")
	if err := os.WriteFile(given, b, 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := runIn(t.Context(), en.path(), nil, nil, pluginBin, "install", "--root", root, "--conflist", given, "--timers", "none")
	if err != nil || o.exit != 0 {
		t.Fatalf("install: %v %s", err, o)
	}
	o, err = runIn(t.Context(), en.path(), ec2Creds, nil, pluginBin, "uninstall", "--root", root, "--activate", "--force")
	if err != nil || o.exit != 0 {
		t.Fatalf("uninstall: %v %s", err, o)
	}
	t.Logf("uninstall:\n%s", o.stdout)
	en.assertNoPods(t)
	if r := en.tableRoutes(t, table); len(r) != 0 {
		t.Errorf("table %d still has %v", table, r)
	}
	if natHas(t, en.node, "ENI-CNI-SNAT") {
		t.Error("the SNAT chain or its jump is still there")
	}
	for _, want := range []string{"flush route table " + strconv.Itoa(table), "remove iptables nat chain ENI-CNI-SNAT", "remove the NodePort marking", sec.ID + "  in-use", "deleteOnTermination=true"} {
		if !strings.Contains(string(o.stdout), want) {
			t.Errorf("uninstall output lacks %q:\n%s", want, o.stdout)
		}
	}
	if strings.Contains(string(o.stdout), en.fake.PrimaryENI().ID) {
		t.Errorf("the primary ENI, which eni-cni did not create, is listed:\n%s", o.stdout)
	}
	if len(en.attached()) != 2 {
		t.Errorf("uninstall changed what EC2 has attached: %+v", en.attached())
	}
}

// natHas reports whether the node's nat table mentions s.
func natHas(t *testing.T, n *node, s string) bool {
	t.Helper()
	o, err := runIn(t.Context(), n.path(), nil, nil, "iptables", "-t", "nat", "-S")
	if err != nil || o.exit != 0 {
		t.Fatalf("iptables -t nat -S: %v %s", err, o)
	}
	return strings.Contains(string(o.stdout), s)
}

// TestIdleExitsOnSIGTERM: the DaemonSet's main container must end on the
// kubelet's SIGTERM by itself (as a container's PID 1 the kernel ignores a
// signal it has no handler for, and the pod would wait out its grace).
func TestIdleExitsOnSIGTERM(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), pluginBin, "idle")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("idle exited by itself: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("idle after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(execTimeout):
		cmd.Process.Kill()
		t.Fatal("idle ignored SIGTERM")
	}
	if o, _ := runInstall(t, pluginBin, "idle", "extra"); o.exit != 2 {
		t.Errorf("idle with an argument: %s, want a usage error", o)
	}
}
