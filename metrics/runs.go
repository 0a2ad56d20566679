package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/eni-cni/eni-cni/atomicfile"
	"github.com/eni-cni/eni-cni/lockfile"
)

// RunsFileName is the record of gc and warm runs in the state directory. It
// is kept whether or not a metrics file is configured: `eni-cni doctor`
// reads it to tell whether the timers run.
const RunsFileName = "runs.json"

// Run is the outcome of the last run of a job.
type Run struct {
	Last        time.Time `json:"last"`
	DurationSec float64   `json:"durationSeconds"`
	OK          bool      `json:"ok"`
	Error       string    `json:"error,omitempty"`
	LastSuccess time.Time `json:"lastSuccess,omitempty"`
	Total       uint64    `json:"total"`
	Failures    uint64    `json:"failures"`
}

// APICalls counts calls of one EC2 API and how many failed.
type APICalls struct {
	Calls  uint64 `json:"calls"`
	Errors uint64 `json:"errors"`
}

// Runs is the whole record.
type Runs struct {
	Jobs map[string]*Run `json:"jobs"` // "gc", "warm"
	// GCFreed counts addresses freed by gc (and the GC verb) since the
	// record began; GCLeftovers the host leftovers it removed.
	GCFreed     uint64               `json:"gcFreed"`
	GCLeftovers uint64               `json:"gcLeftovers"`
	EC2         map[string]*APICalls `json:"ec2"`
}

// RunUpdate is what one run adds.
type RunUpdate struct {
	Job       string
	Start     time.Time
	Duration  time.Duration
	Err       error
	Freed     int
	Leftovers int
	EC2       map[string]APICalls
}

// LoadRuns reads the record in dir; a missing one is empty. It never
// creates anything.
func LoadRuns(dir string) (*Runs, error) {
	r := &Runs{Jobs: map[string]*Run{}, EC2: map[string]*APICalls{}}
	data, err := os.ReadFile(filepath.Join(dir, RunsFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", RunsFileName, err)
	}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, RunsFileName), err)
	}
	if r.Jobs == nil {
		r.Jobs = map[string]*Run{}
	}
	if r.EC2 == nil {
		r.EC2 = map[string]*APICalls{}
	}
	return r, nil
}

// RecordRun adds u to the record in dir under its lock and returns the new
// record. gc and warm run from different timers and may finish together.
// A record that cannot be parsed is moved aside (runs.json.corrupt) and a
// fresh one begun: it holds counters only, Prometheus handles a counter
// reset, and a record stuck broken would stop every later one.
func RecordRun(dir string, u RunUpdate) (*Runs, error) {
	lock, err := lockfile.Open(filepath.Join(dir, "runs.lock"), os.O_CREATE|os.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("lock run record: %w", err)
	}
	defer lock.Close()
	if err := lock.Lock(); err != nil {
		return nil, fmt.Errorf("lock run record: %w", err)
	}
	r, err := LoadRuns(dir)
	if err != nil {
		path := filepath.Join(dir, RunsFileName)
		if rerr := os.Rename(path, path+".corrupt"); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		r = &Runs{Jobs: map[string]*Run{}, EC2: map[string]*APICalls{}}
	}
	j := r.Jobs[u.Job]
	if j == nil {
		j = &Run{}
		r.Jobs[u.Job] = j
	}
	j.Last, j.DurationSec, j.OK, j.Error = u.Start.UTC(), u.Duration.Seconds(), u.Err == nil, ""
	j.Total++
	if u.Err != nil {
		j.Error = u.Err.Error()
		j.Failures++
	} else {
		j.LastSuccess = j.Last
	}
	r.GCFreed += uint64(max(u.Freed, 0))
	r.GCLeftovers += uint64(max(u.Leftovers, 0))
	for api, c := range u.EC2 {
		a := r.EC2[api]
		if a == nil {
			a = &APICalls{}
			r.EC2[api] = a
		}
		a.Calls += c.Calls
		a.Errors += c.Errors
	}
	data, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	// Counters: after a power cut they may start again, which Prometheus
	// handles; not worth two fsyncs on every gc and warm run.
	if err := (atomicfile.Writer{NoSync: true}).WriteFile(filepath.Join(dir, RunsFileName), data, 0o600); err != nil {
		return nil, err
	}
	return r, nil
}
