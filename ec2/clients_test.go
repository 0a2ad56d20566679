package ec2

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// An IMDS that refuses the IMDSv2 token (as an IMDSv1-only endpoint, or
// something impersonating one, does) is not read without a token unless
// the configuration allows IMDSv1.
func TestMetadataClientIsIMDSv2Only(t *testing.T) {
	var tokenless atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			http.Error(w, "no tokens here", http.StatusForbidden)
			return
		}
		if r.Header.Get("X-aws-ec2-metadata-token") == "" {
			tokenless.Add(1)
		}
		io.WriteString(w, "i-0123456789abcdef0")
	}))
	defer srv.Close()
	get := func(c *imds.Client) error {
		_, err := c.GetMetadata(context.Background(), &imds.GetMetadataInput{Path: "instance-id"})
		return err
	}
	if err := get(NewMetadataClient(srv.URL)); err == nil || tokenless.Load() != 0 {
		t.Errorf("default client: err %v, %d tokenless GETs; want a failure and none", err, tokenless.Load())
	}
	if err := get(NewQuickMetadataClient(srv.URL)); err == nil || tokenless.Load() != 0 {
		t.Errorf("quick client: err %v, %d tokenless GETs; want a failure and none", err, tokenless.Load())
	}
	if err := get(NewMetadataClient(srv.URL, AllowIMDSv1())); err != nil || tokenless.Load() == 0 {
		t.Errorf("client allowing IMDSv1: err %v, %d tokenless GETs; want the IMDSv1 read", err, tokenless.Load())
	}
}
