package ec2

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Each way IMDS fails gets its likely causes; the original error stays in
// the chain.
func TestExplainIMDS(t *testing.T) {
	// A port nothing listens on: not on EC2 or a wrong endpoint.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	// A listener that never answers: what a lost token reply looks like.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	status := func(code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut {
				w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", "21600")
				w.Write([]byte("token"))
				return
			}
			w.WriteHeader(code)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	tests := []struct{ name, endpoint, want string }{
		{"refused", closed, "nothing answers at imdsEndpoint " + closed},
		{"silent", "http://" + silent.Addr().String(), "hop limit"},
		{"401", status(http.StatusUnauthorized), "hop limit"},
		{"403", status(http.StatusForbidden), "IMDS refused"},
		{"404", status(http.StatusNotFound), "does not serve this path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := Discover(ctx, NewQuickMetadataClient(tt.endpoint))
			if err == nil {
				t.Fatal("discover succeeded")
			}
			got := ExplainIMDS(err, tt.endpoint)
			var h *IMDSHintError
			if !errors.As(got, &h) || !strings.Contains(got.Error(), tt.want) || !errors.Is(got, ErrIMDS) {
				t.Errorf("got %q, want a hint with %q", got, tt.want)
			}
		})
	}
	if ExplainIMDS(nil, "") != nil {
		t.Error("nil error explained")
	}
	plain := errors.New("something else")
	if ExplainIMDS(plain, "") != plain {
		t.Error("an unrelated error got a hint")
	}
}
