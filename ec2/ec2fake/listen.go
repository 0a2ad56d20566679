package ec2fake

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// Start serves both APIs on one new listener at 127.0.0.1 on a free port.
func (s *Server) Start() error { return s.StartAt("127.0.0.1:0", "") }

// StartSplit serves IMDS and EC2 on two separate 127.0.0.1 listeners, as on
// a real instance where they are different hosts.
func (s *Server) StartSplit() error { return s.StartAt("127.0.0.1:0", "127.0.0.1:0") }

// StartAt listens on imdsAddr for IMDS, and on ec2Addr for EC2; with an empty
// ec2Addr both APIs share imdsAddr. Only loopback addresses are accepted:
// the fake must never be reachable from outside the machine.
func (s *Server) StartAt(imdsAddr, ec2Addr string) error {
	if ec2Addr == "" {
		return s.StartHandlers(imdsAddr, s, "", nil)
	}
	return s.StartHandlers(imdsAddr, s.IMDSHandler(), ec2Addr, s.EC2Handler())
}

// StartHandlers is StartAt for callers that wrap the handlers (to log, or to
// act after each call): imdsHandler is served on imdsAddr and, when ec2Addr
// is not empty, ec2Handler on ec2Addr. Use the server itself as imdsHandler
// to serve both APIs on one address.
func (s *Server) StartHandlers(imdsAddr string, imdsHandler http.Handler, ec2Addr string, ec2Handler http.Handler) error {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if len(s.servers) > 0 {
		return errors.New("ec2fake: server already started")
	}
	iu, err := s.listenLocked(imdsAddr, imdsHandler)
	if err != nil {
		return err
	}
	if ec2Addr == "" {
		s.imdsURL, s.ec2URL, s.split = iu, iu, false
		return nil
	}
	eu, err := s.listenLocked(ec2Addr, ec2Handler)
	if err != nil {
		s.closeLocked()
		return err
	}
	s.imdsURL, s.ec2URL, s.split = iu, eu, true
	return nil
}

func (s *Server) listenLocked(addr string, h http.Handler) (string, error) {
	if err := checkLoopback(addr); err != nil {
		return "", err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	s.servers = append(s.servers, srv)
	go func() { _ = srv.Serve(l) }() // returns ErrServerClosed on Close
	return "http://" + l.Addr().String(), nil
}

// checkLoopback refuses anything but a literal loopback IP or "localhost".
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("listen address %q: only loopback addresses are allowed", addr)
}

// Close stops every listener and drops open connections. It is safe to call
// more than once.
func (s *Server) Close() {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	s.closeLocked()
}

func (s *Server) closeLocked() {
	for _, srv := range s.servers {
		_ = srv.Close()
	}
	s.servers = nil
}

// URL is the base URL serving both APIs after Start; empty after
// StartSplit, where IMDSURL and EC2URL differ.
func (s *Server) URL() string {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.split {
		return ""
	}
	return s.imdsURL
}

// IMDSURL is the value for imds.Options.Endpoint or
// AWS_EC2_METADATA_SERVICE_ENDPOINT.
func (s *Server) IMDSURL() string {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return s.imdsURL
}

// EC2URL is the value for ec2.Options.BaseEndpoint or AWS_ENDPOINT_URL_EC2.
func (s *Server) EC2URL() string {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return s.ec2URL
}

// Env returns the environment variables that point an SDK-based process
// (such as the plugin binary) at this server with dummy static credentials,
// so that nothing it does can reach real AWS.
func (s *Server) Env() []string { return s.env(s.IMDSURL(), s.EC2URL()) }

func (s *Server) env(imdsURL, ec2URL string) []string {
	return []string{
		"AWS_EC2_METADATA_SERVICE_ENDPOINT=" + imdsURL,
		"AWS_EC2_METADATA_V1_DISABLED=true",
		"AWS_ENDPOINT_URL_EC2=" + ec2URL,
		"AWS_ACCESS_KEY_ID=AKID",
		"AWS_SECRET_ACCESS_KEY=SECRET",
		"AWS_REGION=" + s.region,
	}
}
