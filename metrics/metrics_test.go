package metrics

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse reads a metrics file with Prometheus' own text-format parser.
func Parse(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(f)
	if err != nil {
		data, _ := os.ReadFile(path)
		t.Fatalf("parse %s: %v\n%s", path, err, data)
	}
	return fams
}

func TestWriteFileParses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.prom")
	g := Family{Name: "eni_cni_test_gauge", Help: "A gauge with \\ and\nnewline.", Type: Gauge}
	g.Add(1.5, L("network", `we"ird\`+"\n")...).Add(math.Inf(1), L("network", "b")...)
	c := Family{Name: "eni_cni_test_total", Help: "c", Type: Counter}
	c.Add(3)
	h := Family{Name: "eni_cni_test_seconds", Help: "h", Type: Histogram}
	h.Samples = HistogramSamples([]float64{0.1, 1}, []uint64{2, 3, 1}, 4.5, L("verb", "ADD")...)
	empty := Family{Name: "eni_cni_empty", Help: "no samples", Type: Gauge}
	if err := WriteFile(path, []Family{h, g, c, empty}); err != nil {
		t.Fatal(err)
	}
	fams := Parse(t, path)
	if _, ok := fams["eni_cni_empty"]; ok {
		t.Error("a family without samples was written")
	}
	gm := fams["eni_cni_test_gauge"].Metric
	if len(gm) != 2 || gm[0].GetLabel()[0].GetValue() != `we"ird\`+"\n" || gm[0].GetGauge().GetValue() != 1.5 || !math.IsInf(gm[1].GetGauge().GetValue(), 1) {
		t.Errorf("gauge %v", gm)
	}
	if fams["eni_cni_test_total"].Metric[0].GetCounter().GetValue() != 3 {
		t.Error("counter")
	}
	hm := fams["eni_cni_test_seconds"].Metric[0].GetHistogram()
	if hm.GetSampleCount() != 6 || hm.GetSampleSum() != 4.5 || hm.Bucket[0].GetCumulativeCount() != 2 || hm.Bucket[1].GetCumulativeCount() != 5 {
		t.Errorf("histogram %v", hm)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", fi.Mode())
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.tmp-*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

func TestWriteFileFailureKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.prom")
	os.WriteFile(path, []byte("old 1\n"), 0o644)
	os.Chmod(dir, 0o500)
	defer os.Chmod(dir, 0o700)
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only directory")
	}
	if err := WriteFile(path, []Family{{Name: "n", Type: Gauge, Samples: []Sample{{Value: 1}}}}); err == nil {
		t.Fatal("no error")
	}
	if data, _ := os.ReadFile(path); string(data) != "old 1\n" {
		t.Errorf("old file changed: %q", data)
	}
}

// Many processes add to the counters at once; the lock makes every
// increment count (here: goroutines, each with its own open file and so its
// own flock, as processes have).
func TestCountersConcurrent(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if err := RecordVerb(dir, "ADD", i%10 != 0, time.Duration(g+1)*time.Millisecond); err != nil {
					t.Error(err)
					return
				}
				RecordVerb(dir, "DEL", true, 20*time.Second)
				RecordVerb(dir, "NOPE", true, 0)
			}
		}(g)
	}
	wg.Wait()
	vc, err := ReadCounters(dir)
	if err != nil {
		t.Fatal(err)
	}
	if vc.Calls["ADD"] != [2]uint64{1440, 160} || vc.Calls["DEL"] != [2]uint64{1600, 0} || vc.Calls["CHECK"] != [2]uint64{} {
		t.Errorf("calls %v", vc.Calls)
	}
	add := vc.Latency["ADD"]
	// 1-5 ms fall in the 5 ms bucket, 6-8 ms in the 10 ms bucket.
	if add.Buckets[0] != 1000 || add.Buckets[1] != 600 || math.Abs(add.Sum-200*(1+2+3+4+5+6+7+8)/1000.0) > 1e-9 {
		t.Errorf("ADD latency %+v", add)
	}
	if del := vc.Latency["DEL"]; del.Buckets[len(del.Buckets)-1] != 1600 {
		t.Errorf("DEL latency %+v", del)
	}
}

func TestReadCountersMissingAndForeign(t *testing.T) {
	dir := t.TempDir()
	vc, err := ReadCounters(dir)
	if err != nil || vc.Calls["ADD"] != [2]uint64{} {
		t.Errorf("missing file: %v %v", vc, err)
	}
	if _, err := os.Stat(filepath.Join(dir, CountersFileName)); !os.IsNotExist(err) {
		t.Error("ReadCounters created the file")
	}
	// A torn or foreign file counts from zero (a counter reset) and is
	// replaced by an intact one on the next call.
	os.WriteFile(filepath.Join(dir, CountersFileName), []byte(strings.Repeat("x", 4096)), 0o600)
	if vc, err := ReadCounters(dir); err != nil || vc.Calls["ADD"] != [2]uint64{} {
		t.Errorf("foreign file: %v %v", vc.Calls, err)
	}
	RecordVerb(dir, "ADD", true, time.Millisecond)
	RecordVerb(dir, "ADD", true, time.Millisecond)
	if vc, _ := ReadCounters(dir); vc.Calls["ADD"] != [2]uint64{2, 0} {
		t.Errorf("after reset: %v", vc.Calls)
	}
	data, _ := os.ReadFile(filepath.Join(dir, CountersFileName))
	data[20] ^= 0xff // a torn write
	os.WriteFile(filepath.Join(dir, CountersFileName), data, 0o600)
	if vc, _ := ReadCounters(dir); vc.Calls["ADD"] != [2]uint64{} {
		t.Errorf("torn file read as %v", vc.Calls)
	}
}

func BenchmarkRecordVerb(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		if err := RecordVerb(dir, "ADD", true, 3*time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRecordRun(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	RecordRun(dir, RunUpdate{Job: "warm", Start: t0, Duration: time.Second, EC2: map[string]APICalls{"AssignPrivateIpAddresses": {Calls: 2, Errors: 1}}})
	r, err := RecordRun(dir, RunUpdate{Job: "warm", Start: t0.Add(time.Minute), Err: errors.New("boom"), EC2: map[string]APICalls{"AssignPrivateIpAddresses": {Calls: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	w := r.Jobs["warm"]
	if w.OK || w.Error != "boom" || w.Total != 2 || w.Failures != 1 || !w.LastSuccess.Equal(t0) || !w.Last.Equal(t0.Add(time.Minute)) {
		t.Errorf("warm %+v", w)
	}
	if a := r.EC2["AssignPrivateIpAddresses"]; a.Calls != 3 || a.Errors != 1 {
		t.Errorf("ec2 %+v", a)
	}
	RecordRun(dir, RunUpdate{Job: "gc", Start: t0, Freed: 3, Leftovers: 2})
	r, _ = LoadRuns(dir)
	if r.GCFreed != 3 || r.GCLeftovers != 2 || !r.Jobs["gc"].OK {
		t.Errorf("gc %+v", r)
	}
	// A broken record is moved aside, not fatal and not silently lost.
	os.WriteFile(filepath.Join(dir, RunsFileName), []byte("{"), 0o600)
	if _, err := LoadRuns(dir); err == nil {
		t.Error("broken record loaded")
	}
	if r, err = RecordRun(dir, RunUpdate{Job: "gc", Start: t0}); err != nil || r.Jobs["gc"].Total != 1 {
		t.Errorf("after a broken record: %+v %v", r, err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, RunsFileName+".corrupt")); string(data) != "{" {
		t.Errorf("broken record not kept aside: %q", data)
	}
}

// TestLockAndCountersNoFollow: a symlink planted at runs.lock or at the
// counters file (we run as root; the directory may be one others could
// once write) is not followed: the call fails and the file it names is
// neither created nor written.
func TestLockAndCountersNoFollow(t *testing.T) {
	for _, name := range []string{"runs.lock", CountersFileName} {
		t.Run(name, func(t *testing.T) {
			dir, elsewhere := t.TempDir(), t.TempDir()
			victim := filepath.Join(elsewhere, "victim")
			if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			_, rerr := RecordRun(dir, RunUpdate{Job: "gc", Start: time.Now()})
			verr := RecordVerb(dir, CountedVerbs[0], true, time.Millisecond)
			if name == "runs.lock" && rerr == nil {
				t.Error("RecordRun went through a symlinked lock")
			}
			if name == CountersFileName && verr == nil {
				t.Error("RecordVerb went through a symlinked counters file")
			}
			if _, err := os.Lstat(victim); err == nil {
				t.Errorf("the symlink's target %s was created", victim)
			}
		})
	}
}

// The counters file holds data that RecordVerb rewrites in place (and
// truncates), so a hard link planted at its name must not make it write
// another file: a symlink is refused by O_NOFOLLOW, a link by its count.
// (A state directory others can write is refused by the store, but the
// CNI verbs count their calls there all the same.)
func TestRecordVerbRefusesHardLink(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	victim := filepath.Join(elsewhere, "victim")
	precious := []byte(strings.Repeat("precious data\n", 1000))
	if err := os.WriteFile(victim, precious, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(victim, filepath.Join(dir, CountersFileName)); err != nil {
		t.Skipf("no hard link here: %v", err)
	}
	if err := RecordVerb(dir, CountedVerbs[0], true, time.Millisecond); err == nil {
		t.Error("RecordVerb wrote a counters file with another name linked to it")
	}
	if got, _ := os.ReadFile(victim); string(got) != string(precious) {
		t.Errorf("the linked file was rewritten: %d bytes, %q...", len(got), got[:min(len(got), 40)])
	}
}
