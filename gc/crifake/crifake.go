// Package crifake is an in-process CRI runtime for tests: a gRPC server on a
// unix socket in a short temporary directory that serves Version and
// ListPodSandbox from knobs, plus the wrong sockets a GC must refuse to
// trust (another gRPC service, a non-gRPC listener, a stale socket, no
// socket). It is test support; production code must not import it.
package crifake

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Server is a fake CRI runtime. All knobs are safe to change while serving.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	path string
	srv  *grpc.Server

	mu           sync.Mutex
	sandboxes    []*runtimeapi.PodSandbox
	versionErr   error
	listErr      error
	versionDelay time.Duration
	listDelay    time.Duration
	versionCalls int
	listCalls    int
	lastList     *runtimeapi.ListPodSandboxRequest
}

// Start serves a fake runtime that lists no sandboxes until SetSandboxes.
// It stops and removes its directory when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{}
	s.path = socketPath(tb)
	lis := listen(tb, s.path)
	s.srv = grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(s.srv, s)
	go s.srv.Serve(lis) //nolint:errcheck // returns when stopped
	tb.Cleanup(s.srv.Stop)
	return s
}

// Endpoint is the unix:// endpoint of the server.
func (s *Server) Endpoint() string { return "unix://" + s.path }

// Path is the socket path.
func (s *Server) Path() string { return s.path }

// Stop stops serving; later calls see nothing listening (the socket file is
// removed by the gRPC listener).
func (s *Server) Stop() { s.srv.Stop() }

// SetSandboxes sets what ListPodSandbox returns; no arguments makes the
// runtime "lie" with an empty list.
func (s *Server) SetSandboxes(sbs ...*runtimeapi.PodSandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sandboxes = sbs
}

// SetVersionError makes Version fail with err (use status.Error for a code).
func (s *Server) SetVersionError(err error) { s.mu.Lock(); s.versionErr = err; s.mu.Unlock() }

// SetListError makes ListPodSandbox fail with err.
func (s *Server) SetListError(err error) { s.mu.Lock(); s.listErr = err; s.mu.Unlock() }

// SetVersionDelay delays Version replies (a slow or hung runtime).
func (s *Server) SetVersionDelay(d time.Duration) { s.mu.Lock(); s.versionDelay = d; s.mu.Unlock() }

// SetListDelay delays ListPodSandbox replies.
func (s *Server) SetListDelay(d time.Duration) { s.mu.Lock(); s.listDelay = d; s.mu.Unlock() }

// Calls reports how many Version and ListPodSandbox calls arrived.
func (s *Server) Calls() (version, list int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versionCalls, s.listCalls
}

// LastListRequest is the last ListPodSandbox request, or nil.
func (s *Server) LastListRequest() *runtimeapi.ListPodSandboxRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastList
}

// Version implements runtimeapi.RuntimeServiceServer.
func (s *Server) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	s.mu.Lock()
	s.versionCalls++
	fail, delay := s.versionErr, s.versionDelay
	s.mu.Unlock()
	if err := sleep(ctx, delay); err != nil {
		return nil, err
	}
	if fail != nil {
		return nil, fail
	}
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "crifake", RuntimeVersion: "0.0.1", RuntimeApiVersion: "v1"}, nil
}

// ListPodSandbox implements runtimeapi.RuntimeServiceServer. It ignores
// filters and returns every sandbox set, whatever its state.
func (s *Server) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	s.mu.Lock()
	s.listCalls++
	s.lastList = proto.Clone(req).(*runtimeapi.ListPodSandboxRequest)
	fail, delay := s.listErr, s.listDelay
	items := make([]*runtimeapi.PodSandbox, len(s.sandboxes))
	for i, sb := range s.sandboxes {
		items[i] = proto.Clone(sb).(*runtimeapi.PodSandbox)
	}
	s.mu.Unlock()
	if err := sleep(ctx, delay); err != nil {
		return nil, err
	}
	if fail != nil {
		return nil, fail
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PodSandbox builds a listed sandbox; ready false means SANDBOX_NOTREADY.
func PodSandbox(id, namespace, name, uid string, ready bool, created time.Time) *runtimeapi.PodSandbox {
	state := runtimeapi.PodSandboxState_SANDBOX_READY
	if !ready {
		state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	return &runtimeapi.PodSandbox{
		Id:        id,
		Metadata:  &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: uid},
		State:     state,
		CreatedAt: created.UnixNano(),
	}
}

// StartNotCRI serves a gRPC server with no RuntimeService (another gRPC
// service on the socket) and returns its endpoint.
func StartNotCRI(tb testing.TB) string {
	tb.Helper()
	path := socketPath(tb)
	lis := listen(tb, path)
	srv := grpc.NewServer()
	go srv.Serve(lis) //nolint:errcheck // returns when stopped
	tb.Cleanup(srv.Stop)
	return "unix://" + path
}

// StartNotGRPC serves a listener that accepts connections and closes them
// at once (a socket of something that does not speak gRPC) and returns its
// endpoint.
func StartNotGRPC(tb testing.TB) string {
	tb.Helper()
	path := socketPath(tb)
	lis := listen(tb, path)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	tb.Cleanup(func() { lis.Close(); <-done })
	return "unix://" + path
}

// StartSilent serves a listener that accepts connections and then never
// reads or writes (a runtime wedged in its accept loop, or a process that
// holds the socket and hangs) and returns its endpoint. Connections are
// closed when the test ends.
func StartSilent(tb testing.TB) string {
	tb.Helper()
	path := socketPath(tb)
	lis := listen(tb, path)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		lis.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "unix://" + path
}

// StaleSocket returns the endpoint of a socket file nobody listens on, as a
// crashed runtime leaves behind (connect gets ECONNREFUSED).
func StaleSocket(tb testing.TB) string {
	tb.Helper()
	path := socketPath(tb)
	lis := listen(tb, path)
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close()
	return "unix://" + path
}

// MissingSocket returns the endpoint of a path where no socket exists.
func MissingSocket(tb testing.TB) string {
	tb.Helper()
	return "unix://" + socketPath(tb)
}

// socketPath makes a fresh short directory (unix socket paths are limited
// to 108 bytes, and t.TempDir paths can exceed that) removed at cleanup.
func socketPath(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "gccri")
	if err != nil {
		tb.Fatalf("make socket dir: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "cri.sock")
}

func listen(tb testing.TB, path string) net.Listener {
	tb.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		tb.Fatalf("listen on %s: %v", path, err)
	}
	return lis
}
