// Package cri is eni-cni's CRI v1 client: which sandboxes the container
// runtime knows, over its unix socket, with timeouts and errors that say
// which misconfiguration it is. It links grpc and the CRI API, so only the
// gc subcommand imports it, never the CNI hot path.
package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/eni-cni/eni-cni/gc"
)

// Errors from the CRI client. All of them mean the same thing to a GC: the
// set of live sandboxes is unknown, so abort and change nothing. They exist
// so the message says which of the usual misconfigurations it is.
var (
	// ErrUnreachable: no socket at the path, or nothing listening on it.
	ErrUnreachable = errors.New("cri runtime unreachable")
	// ErrNotCRIRuntime: something answers on the socket but it is not a CRI
	// v1 runtime (another gRPC service, or not gRPC at all).
	ErrNotCRIRuntime = errors.New("not a cri v1 runtime")
	// ErrTimeout: the runtime did not answer within the client's timeout.
	ErrTimeout = errors.New("cri runtime did not answer in time")
	// ErrUntrustedPeer: the process serving the socket is not root's. A
	// listing decides which addresses gc frees; only a runtime running as
	// root (as containerd and CRI-O do) may give it.
	ErrUntrustedPeer = errors.New("cri socket is not served by root")
)

// DefaultTimeout bounds every CRI call when NewClient is given 0.
const DefaultTimeout = 5 * time.Second

// maxRecvMsgSize matches crictl's 16 MiB: a node with thousands of exited
// sandboxes can exceed gRPC's 4 MiB default, and a truncated listing must
// not happen (it is an error, not a short list, but an avoidable one).
const maxRecvMsgSize = 16 << 20

// criAPIVersion is what kubelet and crictl send in VersionRequest.
const criAPIVersion = "0.1.0"

// Client talks CRI v1 to one runtime over a unix socket.
type Client struct {
	ep      Endpoint
	timeout time.Duration
	conn    *grpc.ClientConn
	rt      runtimeapi.RuntimeServiceClient

	mu       sync.Mutex
	dialed   bool  // a dial was attempted
	dialErr  error // outcome of the last dial
	answered bool  // the runtime answered one call: later failures are not "wrong socket"
}

// NewClient prepares a client for ep; timeout bounds each call (0 means
// DefaultTimeout). It does not connect: the first call does, so a bad socket
// is reported by that call with the endpoint in the message.
func NewClient(ep Endpoint, timeout time.Duration) (*Client, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	c := &Client{ep: ep, timeout: timeout}
	// passthrough keeps the socket path out of URL parsing and name
	// resolution; the dialer ignores the target and dials ep.Path.
	conn, err := grpc.NewClient("passthrough:///localhost",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(c.dial),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvMsgSize)),
	)
	if err != nil {
		return nil, fmt.Errorf("create cri client for %s: %w", ep, err)
	}
	c.conn = conn
	c.rt = runtimeapi.NewRuntimeServiceClient(conn)
	return c, nil
}

// Close releases the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Endpoint returns the endpoint the client talks to.
func (c *Client) Endpoint() Endpoint { return c.ep }

// dial records whether the socket accepted the connection: that is what
// tells "nothing listening" from "listening but not speaking gRPC" when
// gRPC reports both as Unavailable.
func (c *Client) dial(ctx context.Context, _ string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.ep.Path)
	if err == nil {
		if err = checkPeer(conn); err != nil {
			conn.Close()
			conn = nil
		}
	}
	c.mu.Lock()
	c.dialed, c.dialErr = true, err
	c.mu.Unlock()
	return conn, err
}

// Version asks the runtime who it is. It is the cheapest call that proves
// the socket is a CRI v1 runtime.
func (c *Client) Version(ctx context.Context) (gc.RuntimeInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.rt.Version(ctx, &runtimeapi.VersionRequest{Version: criAPIVersion})
	if err != nil {
		return gc.RuntimeInfo{}, c.wrap("get cri runtime version", err)
	}
	c.mu.Lock()
	c.answered = true
	c.mu.Unlock()
	return gc.RuntimeInfo{Name: resp.RuntimeName, Version: resp.RuntimeVersion, APIVersion: resp.RuntimeApiVersion}, nil
}

// ListSandboxes checks the runtime with Version, then lists all sandboxes
// without a filter: READY and NOTREADY both own their IPs.
func (c *Client) ListSandboxes(ctx context.Context) ([]gc.Sandbox, error) {
	if _, err := c.Version(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, c.wrap("list pod sandboxes", err)
	}
	return fromCRI(resp.Items), nil
}

func fromCRI(items []*runtimeapi.PodSandbox) []gc.Sandbox {
	out := make([]gc.Sandbox, 0, len(items))
	for _, it := range items {
		if it.GetId() == "" {
			continue // cannot match any attachment
		}
		md := it.GetMetadata()
		out = append(out, gc.Sandbox{
			ID:           it.GetId(),
			PodName:      md.GetName(),
			PodNamespace: md.GetNamespace(),
			PodUID:       md.GetUid(),
			Ready:        it.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY,
			CreatedAt:    time.Unix(0, it.GetCreatedAt()),
		})
	}
	return out
}

// wrap turns a gRPC failure into "<op> at <endpoint> (from <source>): <kind>: <cause>".
func (c *Client) wrap(op string, err error) error {
	at := fmt.Sprintf("%s at %s (from %s)", op, c.ep, c.ep.Source)
	c.mu.Lock()
	dialed, dialErr, answered := c.dialed, c.dialErr, c.answered
	c.mu.Unlock()
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w: no answer within %s: %w", at, ErrTimeout, c.timeout, err)
	case codes.Unimplemented:
		return fmt.Errorf("%s: %w: it does not serve runtime.v1.RuntimeService (another gRPC service, or a runtime too old for CRI v1): %w",
			at, ErrNotCRIRuntime, err)
	case codes.Unavailable:
		if dialed && dialErr != nil {
			return fmt.Errorf("%s: %w: %s: %w", at, ErrUnreachable, dialHint(dialErr), dialErr)
		}
		if dialed && !answered {
			return fmt.Errorf("%s: %w: the socket accepts connections but the gRPC handshake failed (not a gRPC server?): %w",
				at, ErrNotCRIRuntime, err)
		}
		return fmt.Errorf("%s: %w: %w", at, ErrUnreachable, err)
	}
	return fmt.Errorf("%s: %w", at, err)
}

// checkPeer asks the kernel who serves the socket (SO_PEERCRED): root, or
// the user running gc (tests without root).
func checkPeer(conn net.Conn) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: pid %d runs as uid %d", ErrUntrustedPeer, cred.Pid, cred.Uid)
	}
	return nil
}

func dialHint(err error) string {
	switch {
	case errors.Is(err, ErrUntrustedPeer):
		return "refused"
	case errors.Is(err, fs.ErrNotExist):
		return "no socket at that path"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listening on the socket (runtime stopped?)"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied (gc needs root)"
	}
	return "cannot connect"
}
