package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// hangPoll is how often a held call looks at the fault file again: the
// delay between clearing a hang and the held calls going on.
const hangPoll = 100 * time.Millisecond

// faultFile is --faults: a file a script edits while the fake runs to make
// EC2 actions fail or hang, and empties or removes to let them recover.
// It is read before every EC2 call (a few bytes; no watcher, no signal,
// so a change applies to the very next call). One rule a line:
//
//	ACTION CODE   calls of ACTION fail with the EC2 error CODE
//	ACTION hang   calls of ACTION are held until the line is gone
//
// ACTION is an EC2 action or * for all of them (an action's own rule wins);
// blank lines and lines starting with # are ignored.
type faultFile struct {
	path   string
	srv    *ec2fake.Server
	stderr io.Writer

	mu   sync.Mutex
	last []byte // the content applied; nil before the first read
	hang map[string]bool
}

func newFaultFile(path string, srv *ec2fake.Server, stderr io.Writer) *faultFile {
	return &faultFile{path: path, srv: srv, stderr: stderr}
}

// sync applies the file's rules if its content changed since the last call.
func (f *faultFile) sync() {
	data, err := os.ReadFile(f.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		// Half-written or unreadable: keep what applies now.
		fmt.Fprintf(f.stderr, "ec2fake: read faults %s: %v\n", f.path, err)
		return
	}
	if data == nil {
		data = []byte{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last != nil && bytes.Equal(data, f.last) {
		return
	}
	f.last = data
	fails, hang, errs := parseFaults(data)
	for _, e := range errs {
		fmt.Fprintf(f.stderr, "ec2fake: faults %s: %v\n", f.path, e)
	}
	f.srv.ClearFaults()
	for action, code := range fails {
		f.srv.InjectFault(action, ec2fake.Fault{Code: code})
	}
	f.hang = hang
}

// parseFaults reads the rules: codes by action, held actions, and what it
// could not read (those lines are skipped).
func parseFaults(data []byte) (map[string]string, map[string]bool, []error) {
	fails, hang := map[string]string{}, map[string]bool{}
	var errs []error
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			errs = append(errs, fmt.Errorf("line %d %q: want ACTION CODE or ACTION hang", i+1, line))
			continue
		}
		if fields[1] == "hang" {
			hang[fields[0]] = true
		} else {
			fails[fields[0]] = fields[1]
		}
	}
	return fails, hang, errs
}

// held reports whether calls of action are to be held now.
func (f *faultFile) held(action string) bool {
	f.sync()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hang[action] || f.hang[ec2fake.AllActions]
}

// wrap applies the file to every EC2 call through next: IMDS is left
// alone. A held call waits until its rule is gone or its client gives up.
func (f *faultFile) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/latest") {
			next.ServeHTTP(w, r)
			return
		}
		// The fake reads the form again: ParseForm keeps what it parsed.
		action := ""
		if r.ParseForm() == nil {
			action = r.Form.Get("Action")
		}
		for f.held(action) {
			if !sleep(r.Context(), hangPoll) {
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// sleep waits d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
