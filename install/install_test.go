package install

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/eni-cni/eni-cni/install/systemdfake"
)

// units is a stand-in for the shipped units: the same names and the
// binary path the real ones use.
var units = fstest.MapFS{
	"eni-cni-gc.service":        {Data: []byte("[Service]\nExecStart=/opt/cni/bin/eni-cni gc\n")},
	"eni-cni-warm.service":      {Data: []byte("[Unit]\nOnFailure=eni-cni-warm-lean.service\n[Service]\nExecStart=/var/lib/eni-cni/.bin/timer-warm warm\n")},
	"eni-cni-warm-lean.service": {Data: []byte("[Unit]\nConditionPathExists=!/var/lib/eni-cni/.bin/timer-warm\n[Service]\nExecStart=/opt/cni/bin/eni-cni warm\n")},
	"eni-cni-gc.timer":          {Data: []byte("[Timer]\nOnUnitActiveSec=1min\n[Install]\nWantedBy=timers.target\n")},
	"eni-cni-warm.timer":        {Data: []byte("[Timer]\nOnUnitActiveSec=30s\n[Install]\nWantedBy=timers.target\n")},
	"eni-cni.cron":              {Data: []byte("* * * * * root if [ -x /var/lib/eni-cni/.bin/timer-warm ]; then /var/lib/eni-cni/.bin/timer-warm warm; else /opt/cni/bin/eni-cni warm; fi\n* * * * * root /opt/cni/bin/eni-cni gc\n")},
}

const conflist = `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni","pool":{"source":"static","ranges":["10.244.0.0/24"]}}]}` + "\n"

// fakeSM records what a live install asks of systemd.
type fakeSM struct{ calls []string }

func (f *fakeSM) Reload(context.Context) error { f.calls = append(f.calls, "reload"); return nil }
func (f *fakeSM) Start(_ context.Context, u string) error {
	f.calls = append(f.calls, "start "+u)
	return nil
}
func (f *fakeSM) Stop(_ context.Context, u string) error {
	f.calls = append(f.calls, "stop "+u)
	return nil
}

func newInstall(t *testing.T, root string) *Install {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "eni-cni")
	if err := os.WriteFile(bin, []byte("#!binary v1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := DefaultLayout()
	l.Root = root
	return &Install{Layout: l, Binary: bin, Conflist: []byte(conflist), Units: units}
}

func run(t *testing.T, steps []Step, err error, dry bool) string {
	t.Helper()
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	var out bytes.Buffer
	if err := Run(context.Background(), steps, dry, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	return out.String()
}

// tree lists every path below root with its mode and content, to compare
// trees before and after.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			v += " -> " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wantFile(t *testing.T, p string, perm fs.FileMode, contains ...string) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatalf("want %s: %v", p, err)
	}
	if fi.Mode().Perm() != perm {
		t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), perm)
	}
	b, _ := os.ReadFile(p)
	for _, c := range contains {
		if !strings.Contains(string(b), c) {
			t.Errorf("%s lacks %q:\n%s", p, c, b)
		}
	}
}

func wantAbsent(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists (err %v), want it absent", p, err)
		}
	}
}

func TestInstallIntoTreeWithoutSystemdUsesCron(t *testing.T) {
	root := t.TempDir()
	in := newInstall(t, root)
	sm := &fakeSM{}
	in.Systemd = sm // must not be used: the tree is not a running node
	steps, err := in.Plan()
	run(t, steps, err, false)
	wantFile(t, filepath.Join(root, "opt/cni/bin/eni-cni"), 0o755, "binary v1")
	wantFile(t, filepath.Join(root, "etc/cni/net.d/10-eni-cni.conflist"), 0o644, `"ranges":["10.244.0.0/24"]`)
	wantFile(t, filepath.Join(root, "etc/cron.d/eni-cni"), 0o644, "/opt/cni/bin/eni-cni warm", "/opt/cni/bin/eni-cni gc")
	wantAbsent(t, filepath.Join(root, "etc/systemd"), filepath.Join(root, "var/lib/eni-cni"))
	if len(sm.calls) > 0 {
		t.Errorf("an install into a tree called systemd: %v", sm.calls)
	}
}

func TestInstallIntoSystemdImageEnablesWithoutStarting(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/lib/systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/lib/systemd/systemd"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	in := newInstall(t, root)
	sm := &fakeSM{}
	in.Systemd = sm
	steps, err := in.Plan()
	out := run(t, steps, err, false)
	for _, u := range append(append([]string{}, Services...), Timers...) {
		wantFile(t, filepath.Join(root, "etc/systemd/system", u), 0o644)
	}
	for _, tm := range Timers {
		link := filepath.Join(root, "etc/systemd/system/timers.target.wants", tm)
		if target, err := os.Readlink(link); err != nil || target != "/etc/systemd/system/"+tm {
			t.Errorf("%s -> %q (%v), want the unit's node path", link, target, err)
		}
	}
	wantAbsent(t, filepath.Join(root, "etc/cron.d"), filepath.Join(root, "var/lib/eni-cni"))
	if len(sm.calls) > 0 {
		t.Errorf("an image install called systemd: %v", sm.calls)
	}
	if !strings.Contains(out, "nothing started on this machine") {
		t.Errorf("output does not say nothing was started:\n%s", out)
	}
}

func TestInstallLiveStartsTimersAndCreatesStateDir(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	in := newInstall(t, root)
	sm := &fakeSM{}
	in.Live, in.Systemd = true, sm
	ran := false
	in.After = []Step{{Desc: "first warm", Do: func(context.Context) error { ran = true; return nil }}}
	steps, err := in.Plan()
	run(t, steps, err, false)
	want := []string{"reload", "start eni-cni-gc.timer", "start eni-cni-warm.timer"}
	if !slices.Equal(sm.calls, want) {
		t.Errorf("systemd calls %v, want %v", sm.calls, want)
	}
	fi, err := os.Stat(filepath.Join(root, "var/lib/eni-cni"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir: %v, %v; want mode 0700", fi, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "var/lib/eni-cni")); len(entries) != 0 {
		t.Errorf("state dir not empty: %v", entries)
	}
	if !ran {
		t.Error("the caller's After step did not run")
	}
}

func TestInstallTwiceChangesNothing(t *testing.T) {
	root := t.TempDir()
	in := newInstall(t, root)
	steps, err := in.Plan()
	run(t, steps, err, false)
	before := tree(t, root)
	steps, err = in.Plan()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		if s.Do != nil {
			t.Errorf("second install would still %s", s.Desc)
		}
	}
	out := run(t, steps, nil, false)
	if after := tree(t, root); !maps.Equal(before, after) {
		t.Errorf("second install changed the tree:\n%v\n%v", before, after)
	}
	if !strings.Contains(out, "unchanged") {
		t.Errorf("output does not say unchanged:\n%s", out)
	}
}

func TestInstallReplacesChangedFilesAtomically(t *testing.T) {
	root := t.TempDir()
	in := newInstall(t, root)
	steps, err := in.Plan()
	run(t, steps, err, false)
	in.Conflist = []byte(strings.Replace(conflist, "10.244.0.0/24", "10.244.9.0/24", 1))
	steps, err = in.Plan()
	run(t, steps, err, false)
	wantFile(t, filepath.Join(root, "etc/cni/net.d/10-eni-cni.conflist"), 0o644, "10.244.9.0/24")
	entries, _ := os.ReadDir(filepath.Join(root, "etc/cni/net.d"))
	if len(entries) != 1 {
		t.Errorf("conf dir holds %v: temporary files left, or a runtime could load two conflists", entries)
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	root := t.TempDir()
	in := newInstall(t, root)
	sm := &fakeSM{}
	if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	in.Live, in.Systemd = true, sm
	before := tree(t, root)
	steps, err := in.Plan()
	out := run(t, steps, err, true)
	if after := tree(t, root); !maps.Equal(before, after) {
		t.Errorf("dry run changed the tree:\n%v\n%v", before, after)
	}
	if len(sm.calls) > 0 {
		t.Errorf("dry run called systemd: %v", sm.calls)
	}
	for _, want := range []string{"would write " + root + "/opt/cni/bin/eni-cni", "would write " + root + "/etc/cni/net.d/10-eni-cni.conflist",
		"would systemd: start eni-cni-warm.timer", "would create " + root + "/var/lib/eni-cni"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
}

func TestInstallNeedsAConflist(t *testing.T) {
	in := newInstall(t, t.TempDir())
	in.Conflist = nil
	if _, err := in.Plan(); !errors.Is(err, ErrNoConflist) {
		t.Fatalf("plan without a conflist: %v, want ErrNoConflist", err)
	}
	// One already on the node is kept.
	if err := os.MkdirAll(in.In(in.ConfDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in.In(in.ConfPath()), []byte(conflist), 0o600); err != nil {
		t.Fatal(err)
	}
	steps, err := in.Plan()
	run(t, steps, err, false)
	wantFile(t, in.In(in.ConfPath()), 0o600)
}

func TestInstallWarnsWhenAnotherConflistComesFirst(t *testing.T) {
	in := newInstall(t, t.TempDir())
	if err := os.MkdirAll(in.In(in.ConfDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in.In(in.ConfDir), "05-flannel.conflist"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	steps, err := in.Plan()
	if out := run(t, steps, err, false); !strings.Contains(out, "WARNING: 05-flannel.conflist sorts before 10-eni-cni.conflist") {
		t.Errorf("no warning about the shadowing conflist:\n%s", out)
	}
}

func TestImageInstallWarnsAboutStateAndLeavesIt(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "var/lib/eni-cni/state.json")
	if err := os.MkdirAll(filepath.Dir(state), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, []byte(`{"version":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	in := newInstall(t, root)
	steps, err := in.Plan()
	out := run(t, steps, err, false)
	if !strings.Contains(out, "WARNING: "+filepath.Dir(state)+" holds state.json: a node image must not carry eni-cni state") {
		t.Errorf("no warning about the state in the image:\n%s", out)
	}
	wantFile(t, state, 0o600, `{"version":1}`)
}

func TestOtherBinAndConfDirsAreWrittenIntoUnits(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	in := newInstall(t, root)
	in.BinDir, in.ConfDir, in.Timers = "/usr/libexec/cni", "/etc/kubernetes/cni/net.d", TimersAuto
	in.Live, in.Systemd = true, &fakeSM{}
	steps, err := in.Plan()
	run(t, steps, err, false)
	wantFile(t, filepath.Join(root, "usr/libexec/cni/eni-cni"), 0o755)
	wantFile(t, filepath.Join(root, "etc/systemd/system/eni-cni-gc.service"), 0o644,
		"ExecStart=/usr/libexec/cni/eni-cni gc --conf-dir /etc/kubernetes/cni/net.d\n")
	wantFile(t, filepath.Join(root, "etc/systemd/system/eni-cni-warm.service"), 0o644,
		"ExecStart=/var/lib/eni-cni/.bin/timer-warm warm --conf-dir /etc/kubernetes/cni/net.d\n")
	wantFile(t, filepath.Join(root, "etc/systemd/system/eni-cni-warm-lean.service"), 0o644,
		"ConditionPathExists=!/var/lib/eni-cni/.bin/timer-warm\n", "ExecStart=/usr/libexec/cni/eni-cni warm --conf-dir /etc/kubernetes/cni/net.d\n")
}

// The warm timer runs the ec2 build published in the network's state
// directory: another state directory is written into the units and the
// cron line, with the fallback to the binary beside it.
func TestOtherStateDirIsWrittenIntoWarmTimer(t *testing.T) {
	root := t.TempDir()
	in := newInstall(t, root)
	in.StateDir, in.Timers = "/srv/eni", TimersCron
	steps, err := in.Plan()
	run(t, steps, err, false)
	wantFile(t, filepath.Join(root, "etc/cron.d/eni-cni"), 0o644,
		"if [ -x /srv/eni/.bin/timer-warm ]; then /srv/eni/.bin/timer-warm warm; else /opt/cni/bin/eni-cni warm; fi\n")
	in = newInstall(t, t.TempDir())
	in.StateDir, in.Timers = "/srv/eni", TimersSystemd
	steps, err = in.Plan()
	run(t, steps, err, false)
	wantFile(t, filepath.Join(in.Root, "etc/systemd/system/eni-cni-warm.service"), 0o644, "ExecStart=/srv/eni/.bin/timer-warm warm\n")
	wantFile(t, filepath.Join(in.Root, "etc/systemd/system/eni-cni-warm-lean.service"), 0o644, "ConditionPathExists=!/srv/eni/.bin/timer-warm\n")
}

func TestTimersNoneAndForcedCron(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	in := newInstall(t, root)
	in.Timers = TimersNone
	steps, err := in.Plan()
	run(t, steps, err, false)
	wantAbsent(t, filepath.Join(root, "etc/systemd"), filepath.Join(root, "etc/cron.d"))
	in.Timers = TimersCron
	steps, err = in.Plan()
	run(t, steps, err, false)
	wantFile(t, filepath.Join(root, "etc/cron.d/eni-cni"), 0o644)
	wantAbsent(t, filepath.Join(root, "etc/systemd"))
}

func TestBadLayoutIsRefused(t *testing.T) {
	for name, mod := range map[string]func(*Install){
		"relative root":   func(in *Install) { in.Root = "tree" },
		"relative bindir": func(in *Install) { in.BinDir = "opt/cni/bin" },
		"conf name":       func(in *Install) { in.ConfName = "eni.conf" },
		"conf name path":  func(in *Install) { in.ConfName = "../x.conflist" },
		"missing binary":  func(in *Install) { in.Binary = "/nonexistent/eni-cni" },
	} {
		in := newInstall(t, t.TempDir())
		mod(in)
		if _, err := in.Plan(); err == nil {
			t.Errorf("%s: plan accepted it", name)
		}
	}
}

func TestRunStopsAtFirstFailureUnlessBestEffort(t *testing.T) {
	boom := errors.New("boom")
	var ran []string
	step := func(name string, err error, best bool) Step {
		return Step{Desc: name, BestEffort: best, Do: func(context.Context) error { ran = append(ran, name); return err }}
	}
	var out bytes.Buffer
	err := Run(context.Background(), []Step{step("a", boom, true), step("b", boom, false), step("c", nil, false)}, false, &out)
	if !errors.Is(err, boom) || !slices.Equal(ran, []string{"a", "b"}) {
		t.Errorf("ran %v, err %v; want a and b, then stop", ran, err)
	}
	if !strings.Contains(out.String(), "FAILED: boom") {
		t.Errorf("output: %s", out.String())
	}
}

func TestUninstallRemovesEverythingTwice(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "run/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	in := newInstall(t, root)
	in.Live, in.Systemd = true, &fakeSM{}
	steps, err := in.Plan()
	run(t, steps, err, false)
	// A node that also got the cron file once, a state and the cache.
	in.Timers, in.Live = TimersCron, false
	steps, err = in.Plan()
	run(t, steps, err, false)
	for _, f := range []string{"var/lib/eni-cni/state.json", "var/lib/eni-cni/state.lock", "var/lib/eni-cni/.bin/eni-cni-full-x"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sm := &fakeSM{}
	u := &Uninstall{Layout: in.Layout, Live: true, Systemd: sm, CacheDirs: []string{"/var/lib/eni-cni/.bin"}}
	steps, err = u.Plan()
	out := run(t, steps, err, false)
	wantAbsent(t, filepath.Join(root, "opt/cni/bin/eni-cni"), filepath.Join(root, "etc/cni/net.d/10-eni-cni.conflist"),
		filepath.Join(root, "etc/cron.d/eni-cni"), filepath.Join(root, "var/lib/eni-cni/.bin"),
		filepath.Join(root, "etc/systemd/system/timers.target.wants/eni-cni-gc.timer"))
	for _, u := range append(append([]string{}, Services...), Timers...) {
		wantAbsent(t, filepath.Join(root, "etc/systemd/system", u))
	}
	wantFile(t, filepath.Join(root, "var/lib/eni-cni/state.json"), 0o600)
	if !strings.Contains(out, "kept "+root+"/var/lib/eni-cni") {
		t.Errorf("output does not say the state was kept:\n%s", out)
	}
	want := []string{"stop eni-cni-gc.timer", "stop eni-cni-warm.timer", "stop eni-cni-gc.service", "stop eni-cni-warm.service", "stop eni-cni-warm-lean.service", "reload"}
	if !slices.Equal(sm.calls, want) {
		t.Errorf("systemd calls %v, want %v", sm.calls, want)
	}
	// Again: nothing left to do, no error, systemd not bothered.
	sm.calls = nil
	steps, err = u.Plan()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		if s.Do != nil {
			t.Errorf("second uninstall would still %s", s.Desc)
		}
	}
	run(t, steps, nil, false)
	if len(sm.calls) > 0 {
		t.Errorf("second uninstall called systemd: %v", sm.calls)
	}
	// --purge takes the state.
	u.Purge = true
	steps, err = u.Plan()
	run(t, steps, err, false)
	wantAbsent(t, filepath.Join(root, "var/lib/eni-cni"))
}

func TestUninstallDryRunChangesNothing(t *testing.T) {
	root := t.TempDir()
	in := newInstall(t, root)
	steps, err := in.Plan()
	run(t, steps, err, false)
	before := tree(t, root)
	u := &Uninstall{Layout: in.Layout, Purge: true}
	steps, err = u.Plan()
	out := run(t, steps, err, true)
	if after := tree(t, root); !maps.Equal(before, after) {
		t.Errorf("dry run changed the tree")
	}
	if !strings.Contains(out, "would remove "+root+"/opt/cni/bin/eni-cni") {
		t.Errorf("dry run output:\n%s", out)
	}
}

// TestSystemdOverDBus drives the real client against the fake systemd on
// its private socket: the wire protocol, method names and arguments.
func TestSystemdOverDBus(t *testing.T) {
	root := t.TempDir()
	fake, err := systemdfake.Start(root)
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	fake.Unknown("eni-cni-gc.service")
	sd := NewSystemd(root)
	ctx := context.Background()
	if err := sd.Reload(ctx); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if err := sd.Start(ctx, "eni-cni-gc.timer"); err != nil {
		t.Fatalf("start: %v", err)
	}
	if err := sd.Stop(ctx, "eni-cni-gc.service"); err != nil {
		t.Fatalf("stop of a unit systemd does not know: %v", err)
	}
	fake.Fail("StartUnit", "org.freedesktop.DBus.Error.AccessDenied")
	if err := sd.Start(ctx, "eni-cni-warm.timer"); err == nil || !strings.Contains(err.Error(), "AccessDenied") {
		t.Errorf("start refused by systemd: err %v", err)
	}
	sd.Close()
	want := []string{"Reload()", "StartUnit(eni-cni-gc.timer, replace)", "StopUnit(eni-cni-gc.service, replace)", "StartUnit(eni-cni-warm.timer, replace)"}
	var got []string
	for _, c := range fake.Calls() {
		got = append(got, c.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	if fake.Conns() != 1 {
		t.Errorf("%d connections, want 1 reused", fake.Conns())
	}
}

func TestSystemdUnreachable(t *testing.T) {
	sd := NewSystemd(t.TempDir())
	if err := sd.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "run/systemd/private") {
		t.Errorf("reload without systemd: %v", err)
	}
}

func TestLiveInstallTightensStateDirAndDropsOldBuilds(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "var/lib/eni-cni")
	if err := os.MkdirAll(filepath.Join(state, ".bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o755); err != nil { // as a hostPath volume makes it
		t.Fatal(err)
	}
	old := filepath.Join(state, ".bin/eni-cni-full-0123456789abcdef")
	oldEC2 := filepath.Join(state, ".bin/eni-cni-ec2-0123456789abcdef")
	for _, f := range []string{old, oldEC2} {
		if err := os.WriteFile(f, []byte("old build"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	in := newInstall(t, root)
	in.Live, in.Timers, in.CacheDir = true, TimersCron, "/var/lib/eni-cni/.bin"
	steps, err := in.Plan()
	run(t, steps, err, false)
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir: %v %v, want mode 0700", fi, err)
	}
	wantAbsent(t, old)
	wantAbsent(t, oldEC2)
	// Same binary again: a cache it unpacked meanwhile stays.
	if err := os.WriteFile(old, []byte("current build"), 0o700); err != nil {
		t.Fatal(err)
	}
	steps, err = in.Plan()
	run(t, steps, err, false)
	wantFile(t, old, 0o700, "current build")
}

// TestHostileRootStaysInside: a tree given as --root whose directories are
// symlinks out of it (an image's /etc -> the host's /etc, an absolute
// /opt/cni -> /opt/cni) must not make install or uninstall write or remove
// anything outside the root: an absolute link is read as the image would
// read it, relative to the root.
func TestHostileRootStaysInside(t *testing.T) {
	host := t.TempDir() // stands for the host's /etc and /opt
	for _, d := range []string{"etc/cni/net.d", "opt/cni/bin", "etc/systemd/system", "var/lib/eni-cni"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	foreign := filepath.Join(host, "etc/cni/net.d/10-eni-cni.conflist")
	if err := os.WriteFile(foreign, []byte("host's own\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "var/lib/eni-cni/state.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := tree(t, host)

	root := t.TempDir()
	for _, d := range []string{"opt", "var/lib"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"etc":             filepath.Join(host, "etc"),               // absolute, out of the root
		"opt/cni":         "../../../../../../" + host + "/opt/cni", // relative, climbing out
		"var/lib/eni-cni": filepath.Join(host, "var/lib/eni-cni"),
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	in := newInstall(t, root)
	in.Timers = TimersSystemd
	steps, err := in.Plan()
	_ = run(t, steps, err, false)
	u := &Uninstall{Layout: in.Layout, Purge: true, CacheDirs: []string{"/var/lib/eni-cni/.bin"}}
	steps, err = u.Plan()
	_ = run(t, steps, err, false)

	if after := tree(t, host); !maps.Equal(before, after) {
		t.Errorf("install/uninstall --root %s changed the tree its symlinks point at:\nbefore %v\nafter  %v", root, before, after)
	}
}

func TestInResolvesLinksInsideTheRoot(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/etc"), 0o755))
	must(os.Symlink("/usr/etc", filepath.Join(root, "etc")))   // absolute: the image's own
	must(os.Symlink("../../../..", filepath.Join(root, "up"))) // climbs: stops at the root
	must(os.Symlink("loop", filepath.Join(root, "loop")))      // a loop
	l := Layout{Root: root}
	for p, want := range map[string]string{
		"/etc/cni/net.d/x": "/usr/etc/cni/net.d/x",
		"/up/etc/x":        "/usr/etc/x",
		"/etc":             "/etc", // the last element itself is not followed
	} {
		if got := l.In(p); got != filepath.Join(root, want) {
			t.Errorf("In(%s) = %s, want %s", p, got, filepath.Join(root, want))
		}
	}
	if got := l.In("/loop/x"); !strings.HasPrefix(got, root+"/") || strings.HasPrefix(got, filepath.Join(root, "loop")) {
		t.Errorf("In(/loop/x) = %s: follows the loop or leaves the root", got)
	}
}

// TestPurgeKeepsADirectoryThatIsNotOurs: --purge removes the state
// directory the conflist names; a stateDir of /var/lib (a typo, a shared
// directory) must not take the other programs' directories with it.
func TestPurgeKeepsADirectoryThatIsNotOurs(t *testing.T) {
	root := t.TempDir()
	l := DefaultLayout()
	l.Root, l.StateDir = root, "/var/lib"
	dpkg := filepath.Join(root, "var/lib/dpkg/status")
	if err := os.MkdirAll(filepath.Dir(dpkg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dpkg, []byte("Package: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/state.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	u := &Uninstall{Layout: l, Purge: true, CacheDirs: []string{"/var/lib/.bin"}}
	steps, err := u.Plan()
	out := run(t, steps, err, false)
	if _, err := os.Stat(dpkg); err != nil {
		t.Fatalf("--purge with stateDir /var/lib removed another program's files: %v\n%s", err, out)
	}
	if !strings.Contains(out, "not only eni-cni's") {
		t.Errorf("the refusal is not reported:\n%s", out)
	}
}
