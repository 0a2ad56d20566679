package gc

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func formatPlan() Plan {
	old := att("3f2a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8", "10.99.0.5", 2*time.Hour+5*time.Second+400*time.Millisecond)
	old.PodName = "web-0"
	bare := att("short", "10.99.0.6", 11*time.Minute)
	bare.PodNamespace, bare.PodName = "", ""
	return MakePlan(
		[]Attachment{old, bare, att("young", "10.99.0.7", 30*time.Second), att("live", "10.99.0.8", time.Hour)},
		FromSandboxes([]Sandbox{sb("live", "u1", true), sb("live2", "u1", true)}),
		now, Options{Grace: grace, RefuseEmpty: true})
}

func TestWriteText(t *testing.T) {
	for _, tc := range []struct {
		dryRun bool
		want   string
	}{
		{false, `gc: freed 10.99.0.5 sandbox 3f2a1b2c3d4e/eth0 pod default/web-0 network pods age 2h0m5s: sandbox not listed by runtime
gc: freed 10.99.0.6 sandbox short/eth0 pod -/- network pods age 11m0s: sandbox not listed by runtime
gc: warning: pod default/pod-live (uid u1) has 2 ready sandboxes: live, live2 (runtime bug?); keeping all
gc: freed 2, kept 1 young, 1 alive
`},
		{true, `gc: would free 10.99.0.5 sandbox 3f2a1b2c3d4e/eth0 pod default/web-0 network pods age 2h0m5s: sandbox not listed by runtime
gc: would free 10.99.0.6 sandbox short/eth0 pod -/- network pods age 11m0s: sandbox not listed by runtime
gc: warning: pod default/pod-live (uid u1) has 2 ready sandboxes: live, live2 (runtime bug?); keeping all
gc: would free 2, kept 1 young, 1 alive
`},
	} {
		var b bytes.Buffer
		if err := WriteText(&b, formatPlan(), tc.dryRun); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("dryRun %v:\n got:\n%s\nwant:\n%s", tc.dryRun, b.String(), tc.want)
		}
	}
}

func TestSummary(t *testing.T) {
	refused := MakePlan([]Attachment{att("a", "10.0.0.1", time.Hour)}, FromSandboxes(nil), now, Options{Grace: grace, RefuseEmpty: true})
	if got, want := Summary(refused, false), "gc: refused, freed 0, kept 0 young, 0 alive"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	cni := MakePlan([]Attachment{att("a", "10.0.0.1", time.Hour), withNet(att("b", "10.0.0.2", time.Hour), "other", "eth0")},
		FromValidAttachments("pods", nil), now, Options{Grace: grace})
	if got, want := Summary(cni, true), "gc: would free 1, kept 0 young, 0 alive, 1 of other networks"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, formatPlan(), true); err != nil {
		t.Fatal(err)
	}
	var got struct {
		DryRun bool `json:"dryRun"`
		Free   []struct {
			Network, ContainerID, IfName, IP, PodNamespace, PodName, PodUID, Reason string
			AllocatedAt                                                             time.Time
			AgeSeconds                                                              int64
		} `json:"free"`
		Young []struct {
			ContainerID string
			LeftSeconds int64
		} `json:"young"`
		Alive    int      `json:"alive"`
		Warnings []string `json:"warnings"`
		Refused  *string  `json:"refused"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v in %s", err, b.String())
	}
	if !got.DryRun || len(got.Free) != 2 || len(got.Young) != 1 || got.Alive != 1 || len(got.Warnings) != 1 || got.Refused != nil {
		t.Fatalf("got %+v", got)
	}
	f := got.Free[0]
	if f.ContainerID != "3f2a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8" || f.IP != "10.99.0.5" ||
		f.Network != "pods" || f.IfName != "eth0" || f.PodName != "web-0" || f.AgeSeconds != 7205 ||
		f.Reason != "sandbox not listed by runtime" || !f.AllocatedAt.Equal(now.Add(-(2*time.Hour + 5*time.Second + 400*time.Millisecond))) {
		t.Errorf("free[0] = %+v", f)
	}
	if got.Young[0].ContainerID != "young" || got.Young[0].LeftSeconds != 570 {
		t.Errorf("young = %+v", got.Young)
	}
	// Empty lists are [] not null.
	b.Reset()
	if err := WriteJSON(&b, Plan{}, false); err != nil {
		t.Fatal(err)
	}
	if s := b.String(); !strings.Contains(s, `"free": []`) || !strings.Contains(s, `"young": []`) || !strings.Contains(s, `"warnings": []`) {
		t.Errorf("empty plan JSON %s", s)
	}
}
