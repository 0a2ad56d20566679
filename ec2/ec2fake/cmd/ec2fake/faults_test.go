package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// assign asks the fake for one more address on eni: the HTTP status and
// the reply.
func assign(ctx context.Context, t *testing.T, base, eni string) (int, string, error) {
	t.Helper()
	form := url.Values{
		"Action": {"AssignPrivateIpAddresses"}, "Version": {"2016-11-15"},
		"NetworkInterfaceId": {eni}, "SecondaryPrivateIpAddressCount": {"1"},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func TestFaultFileFailsHangsAndRecovers(t *testing.T) {
	srv, err := ec2fake.New(ec2fake.Config{InstanceType: "t3.medium"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "faults")
	ff := newFaultFile(path, srv, io.Discard)
	ts := httptest.NewServer(ff.wrap(srv.EC2Handler()))
	defer ts.Close()
	eni := srv.ENIs()[0].ID
	ctx := context.Background()
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	if code, body, err := assign(ctx, t, ts.URL, eni); err != nil || code != http.StatusOK {
		t.Fatalf("no fault file: %d %s %v", code, body, err)
	}
	write("# the subnet is out of addresses\nAssignPrivateIpAddresses InsufficientFreeAddressesInSubnet\nnot a rule at all\n")
	if code, body, err := assign(ctx, t, ts.URL, eni); err != nil || code != http.StatusBadRequest || !strings.Contains(body, "InsufficientFreeAddressesInSubnet") {
		t.Fatalf("fail rule: %d %s %v", code, body, err)
	}

	write("* hang\n")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if code, _, err := assign(short, t, ts.URL, eni); err == nil {
		t.Fatalf("a held call answered (%d)", code)
	}
	type reply struct {
		code int
		err  error
	}
	done := make(chan reply, 1)
	go func() {
		code, _, err := assign(ctx, t, ts.URL, eni)
		done <- reply{code, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("a held call answered: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	cleared := time.Now()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.code != http.StatusOK {
			t.Fatalf("held call after clearing: %+v", r)
		}
		if d := time.Since(cleared); d > time.Second {
			t.Fatalf("held call went on %v after clearing", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held call still held 5 s after clearing")
	}
	// Addresses: the first call, and the one held until cleared.
	if n := len(srv.ENIs()[0].SecondaryIPs); n != 2 {
		t.Fatalf("%d secondary addresses, want 2 (failed and abandoned calls assign none)", n)
	}
}

func TestParseFaults(t *testing.T) {
	fails, hang, errs := parseFaults([]byte("\n# c\n* RequestLimitExceeded\nCreateNetworkInterface hang\n  AssignPrivateIpAddresses   UnauthorizedOperation \nbad\n"))
	if fails["*"] != "RequestLimitExceeded" || fails["AssignPrivateIpAddresses"] != "UnauthorizedOperation" || len(fails) != 2 ||
		!hang["CreateNetworkInterface"] || len(hang) != 1 || len(errs) != 1 {
		t.Fatalf("fails %v hang %v errs %v", fails, hang, errs)
	}
}

func TestRunAppliesFaultFile(t *testing.T) {
	dir := t.TempDir()
	faults := filepath.Join(dir, "faults")
	if err := os.WriteFile(faults, []byte("AssignPrivateIpAddresses InsufficientFreeAddressesInSubnet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--faults", faults, "--describe", filepath.Join(dir, "ec2.json")}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufioLine(pr)
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	eni := readDescription(t, filepath.Join(dir, "ec2.json")).ENIs[0].ID
	if code, body, err := assign(ctx, t, line, eni); err != nil || !strings.Contains(body, "InsufficientFreeAddressesInSubnet") {
		t.Fatalf("with the fault: %d %s %v", code, body, err)
	}
	if err := os.WriteFile(faults, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body, err := assign(ctx, t, line, eni); err != nil || code != http.StatusOK {
		t.Fatalf("fault cleared: %d %s %v", code, body, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// bufioLine reads the first line run prints (the IMDS URL, which also
// serves EC2 without --ec2-listen).
func bufioLine(r io.Reader) (string, error) {
	s := bufio.NewScanner(r)
	if !s.Scan() {
		return "", io.ErrUnexpectedEOF
	}
	return s.Text(), nil
}
