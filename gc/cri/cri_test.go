package cri

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/gc/crifake"
)

// client resolves endpoint as the flag would and returns a client with the
// given timeout, closed at the end of the test.
func client(t *testing.T, endpoint string, timeout time.Duration) *Client {
	t.Helper()
	ep, err := ResolveEndpoint(endpoint, fakeLookup(nil, nil, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(ep, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestListSandboxesAllStates(t *testing.T) {
	fake := crifake.Start(t)
	created := time.Unix(1700000000, 123)
	fake.SetSandboxes(
		crifake.PodSandbox("sb-ready", "default", "web-0", "uid-1", true, created),
		crifake.PodSandbox("sb-notready", "kube-system", "dns-1", "uid-2", false, created),
	)
	c := client(t, fake.Endpoint(), time.Second)

	got, err := c.ListSandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []gc.Sandbox{
		{ID: "sb-ready", PodName: "web-0", PodNamespace: "default", PodUID: "uid-1", Ready: true, CreatedAt: created},
		{ID: "sb-notready", PodName: "dns-1", PodNamespace: "kube-system", PodUID: "uid-2", Ready: false, CreatedAt: created},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d sandboxes, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		// CreatedAt goes through nanoseconds: compare instants, then the rest.
		g, w := got[i], want[i]
		sameTime := g.CreatedAt.Equal(w.CreatedAt)
		g.CreatedAt, w.CreatedAt = time.Time{}, time.Time{}
		if g != w || !sameTime {
			t.Errorf("sandbox %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if f := fake.LastListRequest().GetFilter(); f != nil {
		t.Errorf("ListPodSandbox sent filter %v; want none so NOTREADY sandboxes are listed", f)
	}
	if v, l := fake.Calls(); v != 1 || l != 1 {
		t.Errorf("calls: version %d list %d, want 1 and 1 (Version first)", v, l)
	}
}

func TestListSandboxesEmptyIsNotNil(t *testing.T) {
	fake := crifake.Start(t)
	got, err := client(t, fake.Endpoint(), time.Second).ListSandboxes(context.Background())
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("got %v, %v; want an empty non-nil listing", got, err)
	}
}

func TestVersion(t *testing.T) {
	fake := crifake.Start(t)
	info, err := client(t, fake.Path(), time.Second).Version(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "crifake" || info.APIVersion != "v1" {
		t.Fatalf("got %+v", info)
	}
}

// TestListSandboxesFailures: every way the runtime can fail is an error
// naming the endpoint, of the right kind, and never an empty listing.
func TestListSandboxesFailures(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(tb testing.TB) string // returns the endpoint
		timeout time.Duration
		wantIs  error
		wantSub string
	}{
		{
			name: "list error",
			setup: func(t testing.TB) string {
				f := crifake.Start(t)
				f.SetListError(status.Error(codes.Internal, "boom"))
				return f.Endpoint()
			},
			wantSub: "list pod sandboxes at unix://",
		},
		{
			name: "version error",
			setup: func(t testing.TB) string {
				f := crifake.Start(t)
				f.SetVersionError(status.Error(codes.Internal, "boom"))
				return f.Endpoint()
			},
			wantSub: "get cri runtime version at unix://",
		},
		{
			name: "slow version",
			setup: func(t testing.TB) string {
				f := crifake.Start(t)
				f.SetVersionDelay(5 * time.Second)
				return f.Endpoint()
			},
			timeout: 100 * time.Millisecond,
			wantIs:  ErrTimeout,
			wantSub: "no answer within 100ms",
		},
		{
			name: "slow list",
			setup: func(t testing.TB) string {
				f := crifake.Start(t)
				f.SetListDelay(5 * time.Second)
				return f.Endpoint()
			},
			timeout: 100 * time.Millisecond,
			wantIs:  ErrTimeout,
			wantSub: "list pod sandboxes",
		},
		{name: "another grpc service", setup: crifake.StartNotCRI, wantIs: ErrNotCRIRuntime, wantSub: "runtime.v1.RuntimeService"},
		{name: "not grpc at all", setup: crifake.StartNotGRPC, wantIs: ErrNotCRIRuntime, wantSub: "handshake"},
		{name: "stale socket", setup: crifake.StaleSocket, wantIs: ErrUnreachable, wantSub: "nothing listening"},
		{name: "missing socket", setup: crifake.MissingSocket, wantIs: ErrUnreachable, wantSub: "no socket at that path"},
		{
			name: "runtime stopped",
			setup: func(t testing.TB) string {
				f := crifake.Start(t)
				f.Stop()
				return f.Endpoint()
			},
			wantIs: ErrUnreachable,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep := tc.setup(t)
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 2 * time.Second
			}
			start := time.Now()
			got, err := client(t, ep, timeout).ListSandboxes(context.Background())
			if err == nil {
				t.Fatalf("got %v, want an error", got)
			}
			t.Log(err)
			if got != nil {
				t.Errorf("got listing %v along with the error", got)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("err = %v, want errors.Is %v", err, tc.wantIs)
			}
			if !strings.Contains(err.Error(), ep) {
				t.Errorf("err = %v, want it to name %s", err, ep)
			}
			if !strings.Contains(err.Error(), tc.wantSub) {
				t.Errorf("err = %v, want it to contain %q", err, tc.wantSub)
			}
			if d := time.Since(start); d > timeout+time.Second {
				t.Errorf("took %s with timeout %s", d, timeout)
			}
		})
	}
}

func TestListErrorKeepsGRPCStatus(t *testing.T) {
	f := crifake.Start(t)
	f.SetListError(status.Error(codes.PermissionDenied, "nope"))
	_, err := client(t, f.Endpoint(), time.Second).ListSandboxes(context.Background())
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("status.Code(%v) = %v, want PermissionDenied", err, status.Code(err))
	}
}

func TestQueryRuntime(t *testing.T) {
	f := crifake.Start(t)
	c := client(t, f.Endpoint(), time.Second)
	f.SetSandboxes(crifake.PodSandbox("a", "ns", "p", "u", false, time.Now()))
	live, err := gc.QueryRuntime(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Unix(1, 0)
	plan := gc.MakePlan([]gc.Attachment{{ContainerID: "a", AllocatedAt: old}, {ContainerID: "b", AllocatedAt: old}}, live, time.Now(), gc.Options{})
	if len(plan.Alive) != 1 || plan.Alive[0].ContainerID != "a" || len(plan.Free) != 1 || plan.Free[0].ContainerID != "b" {
		t.Fatalf("live set does not match the listing: %+v", plan)
	}

	f.SetListError(status.Error(codes.Unavailable, "restarting"))
	live, err = gc.QueryRuntime(context.Background(), c)
	if err == nil || live != nil {
		t.Fatalf("got %v, %v; want no live set and an error", live, err)
	}
	if !strings.Contains(err.Error(), "nothing changed") {
		t.Errorf("err = %v, want it to say nothing changed", err)
	}
	// Without a live set the planner refuses rather than freeing.
	p := gc.MakePlan([]gc.Attachment{{ContainerID: "a", AllocatedAt: time.Unix(1, 0)}}, live, time.Now(), gc.Options{Force: true})
	if p.Refused == nil || len(p.Free) != 0 {
		t.Fatalf("plan with nil live set: %+v", p)
	}
}

func TestCancelledContext(t *testing.T) {
	f := crifake.Start(t)
	f.SetVersionDelay(5 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	_, err := client(t, f.Endpoint(), 5*time.Second).ListSandboxes(ctx)
	if status.Code(err) != codes.Canceled {
		t.Fatalf("err = %v, want Canceled", err)
	}
}
