package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/gc/crifake"
)

// TestGCCommandBadRuntimeChangesNothing drives `eni-cni gc` against CRI
// sockets that are missing, refuse, are slow, are not CRI, or lie (empty
// listing): each exits non-zero and leaves the state file byte-for-byte.
func TestGCCommandBadRuntimeChangesNothing(t *testing.T) {
	if leanBuild {
		t.Skip("the lean build execs the full build in place of the test process; covered by the default build")
	}
	if ec2Build {
		t.Skip("gc runs in the full build alone; covered by the default build")
	}
	confDir, stateDir := writeConflist(t)
	store, _ := alloc.NewDiskStore(stateDir)
	boot, _ := alloc.ReadBootID()
	rs, _ := alloc.ParseRanges([]string{"10.99.0.0/29"})
	m := &alloc.Manager{Store: store, Pool: rs, BootID: boot}
	for _, cid := range []string{"a", "b"} {
		if _, _, err := m.Allocate(context.Background(), alloc.Request{Key: alloc.Key{Network: "pods", ContainerID: cid, IfName: "eth0"}, HostVeth: "eni" + cid}); err != nil {
			t.Fatal(err)
		}
	}
	m.Update(context.Background(), func(st *alloc.State) (bool, error) {
		for i := range st.Allocations {
			age(&st.Allocations[i], time.Hour)
		}
		return true, nil
	})
	statePath := filepath.Join(stateDir, alloc.StateFileName)
	before, _ := os.ReadFile(statePath)

	refusing := crifake.Start(t)
	refusing.SetListError(status.Error(codes.Unavailable, "runtime is restarting"))
	slow := crifake.Start(t)
	slow.SetListDelay(3 * time.Second)
	lying := crifake.Start(t)
	cases := map[string]struct {
		endpoint string
		want     string
	}{
		"missing": {crifake.MissingSocket(t), "unreachable"},
		"stale":   {crifake.StaleSocket(t), "unreachable"},
		"not cri": {crifake.StartNotCRI(t), "not a cri"},
		"refuses": {refusing.Endpoint(), "restarting"},
		"slow":    {slow.Endpoint(), "did not answer in time"},
		"silent":  {crifake.StartSilent(t), "did not answer in time"},
		"lying":   {lying.Endpoint(), "refusing to free"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errs := run("gc", "--conf-dir", confDir, "--cri-endpoint", tc.endpoint, "--timeout", "500ms", "--grace", "1m")
			if code == 0 || !strings.Contains(strings.ToLower(errs), tc.want) {
				t.Errorf("exit %d, stderr %q, want non-zero and %q", code, errs, tc.want)
			}
			if strings.Contains(out, "freed") && !strings.Contains(out, "freed 0") {
				t.Errorf("stdout claims frees: %s", out)
			}
			after, _ := os.ReadFile(statePath)
			if !bytes.Equal(before, after) {
				t.Error("state file changed")
			}
		})
	}
}

// TestGCGraceFlagMinimum: `gc --grace` may lengthen the grace of the
// config, never go below the minimum that gcGraceSeconds has: ADD runs
// before the runtime lists the sandbox, so a shorter grace could free a pod
// being created. Below it is a usage error that changes nothing.
func TestGCGraceFlagMinimum(t *testing.T) {
	if leanBuild {
		t.Skip("the lean build execs the full build in place of the test process; covered by the default build")
	}
	if ec2Build {
		t.Skip("gc runs in the full build alone; covered by the default build")
	}
	confDir, stateDir := writeConflist(t)
	store, _ := alloc.NewDiskStore(stateDir)
	boot, _ := alloc.ReadBootID()
	rs, _ := alloc.ParseRanges([]string{"10.99.0.0/29"})
	m := &alloc.Manager{Store: store, Pool: rs, BootID: boot}
	if _, _, err := m.Allocate(context.Background(), alloc.Request{Key: alloc.Key{Network: "pods", ContainerID: "young", IfName: "eth0"}, HostVeth: "eniyoung"}); err != nil {
		t.Fatal(err)
	}
	statePath := filepath.Join(stateDir, alloc.StateFileName)
	before, _ := os.ReadFile(statePath)
	cri := crifake.Start(t)
	cri.SetSandboxes(crifake.PodSandbox("other", "default", "web", "uid", true, time.Now()))
	for _, grace := range []string{"0s", "59s", "-1s"} {
		code, out, errs := run("gc", "--conf-dir", confDir, "--cri-endpoint", cri.Endpoint(), "--grace", grace)
		if code != 2 || !strings.Contains(errs, "--grace") || !strings.Contains(errs, "minimum") {
			t.Errorf("gc --grace %s: exit %d, stderr %q; want a usage error (2) naming the minimum", grace, code, errs)
		}
		if strings.Contains(out, "freed") {
			t.Errorf("gc --grace %s freed: %s", grace, out)
		}
		if after, _ := os.ReadFile(statePath); !bytes.Equal(before, after) {
			t.Fatalf("gc --grace %s changed the state", grace)
		}
	}
	code, out, errs := run("gc", "--conf-dir", confDir, "--cri-endpoint", cri.Endpoint(), "--grace", "60s")
	if code != 0 || !strings.Contains(out, "kept 1 young") {
		t.Errorf("gc --grace 60s: exit %d, %s%s; want the young allocation kept", code, out, errs)
	}
}
