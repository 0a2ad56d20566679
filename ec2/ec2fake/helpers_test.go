package ec2fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
)

// loopbackDial refuses to dial anything but 127.0.0.1, so a mistake in
// endpoint configuration fails the test instead of reaching real AWS.
func loopbackDial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" {
		return nil, fmt.Errorf("test transport: refusing to dial %q", addr)
	}
	d := &net.Dialer{Timeout: 2 * time.Second}
	return d.DialContext(ctx, network, addr)
}

func loopbackHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: loopbackDial}}
}

// loopbackBuildableClient is the same for config.LoadDefaultConfig, which
// needs an *awshttp.BuildableClient when AWS_CA_BUNDLE is set (it is on these
// machines) and fails with a plain *http.Client.
func loopbackBuildableClient() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.Proxy = nil
		tr.DialContext = loopbackDial
	})
}

// noBackoff keeps SDK retries instantaneous so tests stay fast.
type noBackoff struct{}

func (noBackoff) BackoffDelay(int, error) (time.Duration, error) { return 0, nil }

func fastRetryer(attempts int) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = attempts
		o.Backoff = noBackoff{}
	})
}

func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// newEC2 builds the real EC2 client against the fake with dummy
// credentials, a fixed region and an explicit endpoint.
func newEC2(srv *Server, attempts int) *ec2.Client {
	return ec2.New(ec2.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(srv.EC2URL()),
		Credentials:      credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		HTTPClient:       loopbackHTTPClient(),
		Retryer:          fastRetryer(attempts),
		RetryMaxAttempts: attempts,
	})
}

func newIMDS(srv *Server) *imds.Client {
	return imds.New(imds.Options{
		Endpoint:       srv.IMDSURL(),
		HTTPClient:     loopbackHTTPClient(),
		Retryer:        fastRetryer(3),
		EnableFallback: aws.FalseTernary,
		// Without this the client wraps Retryer with its own 1 s jittered
		// backoff, which would make the fault tests slow.
		DisableDefaultMaxBackoff: true,
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// getMeta reads one IMDS path through the SDK.
func getMeta(ctx context.Context, c *imds.Client, path string) (string, error) {
	out, err := c.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", err
	}
	defer out.Content.Close()
	b, err := io.ReadAll(out.Content)
	return string(b), err
}

func mustMeta(t *testing.T, c *imds.Client, path string) string {
	t.Helper()
	v, err := getMeta(ctxT(t), c, path)
	if err != nil {
		t.Fatalf("imds %s: %v", path, err)
	}
	return v
}

// httpStatus digs the HTTP status out of an SDK error. The EC2 client wraps
// it in *awshttp.ResponseError, the IMDS client in *smithyhttp.ResponseError;
// both have HTTPStatusCode.
func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// wantAPIError asserts the SDK surfaced an EC2 error with code and status.
func wantAPIError(t *testing.T, err error, code string, status int) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("want smithy.APIError %s, got %T %v", code, err, err)
	}
	if ae.ErrorCode() != code {
		t.Fatalf("error code = %q (%s), want %q", ae.ErrorCode(), ae.ErrorMessage(), code)
	}
	if status != 0 && httpStatus(err) != status {
		t.Fatalf("%s: HTTP status = %d, want %d", code, httpStatus(err), status)
	}
}

// fakeClock is a hand-moved clock for IMDS lag and token expiry.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
