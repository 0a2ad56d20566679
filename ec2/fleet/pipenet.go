package fleet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// httpClient is what the SDK's clients take (imds.HTTPClient, ec2.HTTPClient).
type httpClient interface {
	Do(*http.Request) (*http.Response, error)
}

// network is how the nodes reach the world's EC2 API and their own IMDS.
type network interface {
	serveEC2(fake *ec2fake.Server) (url string, err error)
	serveIMDS(inst *ec2fake.Instance) (url string, err error)
	// client is an HTTP client with at most conns connections to a host.
	client(conns int) httpClient
	close()
}

// loopback is the world on 127.0.0.1 listeners (ec2fake's own).
type loopback struct{ fake *ec2fake.Server }

func (l *loopback) serveEC2(fake *ec2fake.Server) (string, error) {
	l.fake = fake
	if err := fake.Start(); err != nil {
		return "", err
	}
	return fake.EC2URL(), nil
}

func (*loopback) serveIMDS(inst *ec2fake.Instance) (string, error) {
	return inst.StartIMDS("127.0.0.1:0")
}

func (*loopback) client(conns int) httpClient { return fewConns(conns) }

func (l *loopback) close() {
	if l.fake != nil {
		l.fake.Close()
	}
}

// pipes is the world on in-memory connections (net.Pipe): inside a
// testing/synctest bubble a goroutine waiting on one is durably blocked,
// so the bubble's fake clock runs on while every node waits for EC2, and
// the machine's CPU time takes none of the simulated time.
type pipes struct {
	mu      sync.Mutex
	ls      map[string]*pipeListener
	servers []*http.Server
}

func newPipes() *pipes { return &pipes{ls: map[string]*pipeListener{}} }

func (p *pipes) serveEC2(fake *ec2fake.Server) (string, error) {
	return p.serve("ec2.fleet:80", fake.EC2Handler())
}

func (p *pipes) serveIMDS(inst *ec2fake.Instance) (string, error) {
	return p.serve("imds-"+inst.ID()+".fleet:80", inst.IMDSHandler())
}

func (p *pipes) serve(addr string, h http.Handler) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.ls[addr]; ok {
		return "", fmt.Errorf("pipes: %s already served", addr)
	}
	l := &pipeListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	p.ls[addr], p.servers = l, append(p.servers, srv)
	go func() { _ = srv.Serve(l) }()
	return "http://" + addr, nil
}

func (p *pipes) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	p.mu.Lock()
	l := p.ls[addr]
	p.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: fmt.Errorf("no server at %s", addr)}
	}
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: net.ErrClosed}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// client is a plain http.Client: the SDK replaces the dialer of a
// BuildableClient (IMDS's with its own timeouts), and with it the pipes.
func (p *pipes) client(conns int) httpClient {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: p.dial, MaxConnsPerHost: conns, MaxIdleConnsPerHost: conns,
	}}
}

func (p *pipes) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.servers {
		_ = s.Close()
	}
}

type pipeListener struct {
	addr  string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr(l.addr) }

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }
