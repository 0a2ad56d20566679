package delegate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eni-cni/eni-cni/fullexec"
)

// gc and warm cache the full build beside the state of the configuration
// they were given, whichever way the flags are spelt; with no usable
// configuration they run from memory ("").
func TestStateDirOfFlags(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "10-x.conflist")
	os.WriteFile(conf, []byte(`{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"eni-cni","stateDir":"/var/lib/x"}]}`), 0o600)
	other := filepath.Join(dir, "d")
	os.Mkdir(other, 0o700)
	os.WriteFile(filepath.Join(other, "05-y.conflist"), []byte(`{"cniVersion":"1.0.0","name":"y","plugins":[{"type":"eni-cni","stateDir":"/var/lib/y"}]}`), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", conf}, "/var/lib/x"},
		{[]string{"--config=" + conf, "--dry-run"}, "/var/lib/x"},
		{[]string{"-config", conf, "--grace", "5m"}, "/var/lib/x"},
		{[]string{"--cri-endpoint", "unix:///run/c.sock", "--conf-dir", other}, "/var/lib/y"},
		{[]string{"--conf-dir=" + other}, "/var/lib/y"},
		{[]string{"--config"}, ""},
		{[]string{"--config", filepath.Join(dir, "missing")}, ""},
		{[]string{"--conf-dir", filepath.Join(dir, "none")}, ""},
	} {
		if got := stateDirOf(c.args); got != c.want {
			t.Errorf("stateDirOf(%q) = %q, want %q", c.args, got, c.want)
		}
	}
	if cacheDir("") != "" || cacheDir("/var/lib/x") != "/var/lib/x/.bin" {
		t.Errorf("cacheDir: %q %q", cacheDir(""), cacheDir("/var/lib/x"))
	}
}

// TestInstallNamesItselfNotTheEnvironment: install copies the file the
// operator ran, even when root's environment already carries an
// ENI_CNI_SELF (which the full build would read first).
func TestInstallNamesItselfNotTheEnvironment(t *testing.T) {
	env := withSelf([]string{"PATH=/bin", "ENI_CNI_SELF=/tmp/planted", "HOME=/root"}, "/usr/local/bin/eni-cni")
	var got []string
	for _, e := range env {
		if strings.HasPrefix(e, "ENI_CNI_SELF=") {
			got = append(got, e)
		}
	}
	if len(got) != 1 || got[0] != "ENI_CNI_SELF=/usr/local/bin/eni-cni" {
		t.Fatalf("environment of the full build names %v as the binary to install", got)
	}
	if len(env) != 3 {
		t.Errorf("other variables lost: %v", env)
	}
}

// TestDelegatedBuildsRunOnOneP: the builds the lean one starts for its
// timer commands run with one P unless the operator chose GOMAXPROCS, and
// the caller's environment is not written through.
func TestDelegatedBuildsRunOnOneP(t *testing.T) {
	env := make([]string, 2, 8)
	env[0], env[1] = "PATH=/bin", "HOME=/root"
	got := oneP(env)
	if len(got) != 3 || got[2] != "GOMAXPROCS=1" {
		t.Fatalf("oneP(%q) = %q", env, got)
	}
	if extended := env[:3]; extended[2] == "GOMAXPROCS=1" {
		t.Error("oneP wrote into the caller's backing array")
	}
	chosen := []string{"GOMAXPROCS=4", "PATH=/bin"}
	if got := oneP(chosen); len(got) != 2 || got[0] != "GOMAXPROCS=4" {
		t.Errorf("the operator's GOMAXPROCS replaced: %q", got)
	}
}

// A timer run whose cache cannot be used (here: a group-writable cache
// directory; a noexec mount, a full disk) runs from memory and removes the
// warm timer's copy: that copy cannot verify itself there nor find whom
// to hand over to, and the timer's fallback to the binary runs only while
// it is missing, so a copy left behind stops every warm pass.
func TestUnusableCacheUnpublishesWarmTimer(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	bin := cacheDir(state)
	if err := os.MkdirAll(bin, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{WarmTimerName, fullexec.PublishedPrefix + WarmTimerName} {
		if err := os.WriteFile(filepath.Join(bin, n), []byte("published"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(bin, 0o770); err != nil {
		t.Fatal(err)
	}
	b := fullexec.Build{Name: "ec2", Data: []byte("#!/bin/true\n"), Digest: strings.Repeat("ab", 32)}
	f := Full{Build: b, Warm: &b}
	exe, err := f.open(Cached, state)
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	if exe.Cached {
		t.Fatal("a group-writable cache was used")
	}
	f.publishWarm(exe, state)
	for _, n := range []string{WarmTimerName, fullexec.PublishedPrefix + WarmTimerName} {
		if _, err := os.Lstat(filepath.Join(bin, n)); err == nil {
			t.Errorf("%s left in a cache the binary could not use", n)
		}
	}
}
