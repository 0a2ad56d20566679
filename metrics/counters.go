package metrics

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/eni-cni/eni-cni/lockfile"
)

// Verbs whose calls are counted, and their results.
var (
	CountedVerbs = []string{"ADD", "DEL", "CHECK", "STATUS", "GC"}
	// TimedVerbs get a latency histogram.
	TimedVerbs = []string{"ADD", "DEL"}
	// LatencyBounds are the histogram's upper bounds in seconds (+Inf
	// follows): a cached ADD takes milliseconds, one that waits on the
	// lock or on IMDS up to seconds.
	LatencyBounds = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

// CountersFileName is the counters file in the state directory.
const CountersFileName = "metrics.counters"

// The file is a header, an array of uint64 slots and a CRC of both. Each
// counted call locks it (flock), reads it, adds and writes it back with one
// pwrite: about as cheap as opening the file (BenchmarkRecordVerb), where
// a shared memory mapping cost several times more here. Layout, in slots
// after the header:
//
//	per counted verb: ok, error
//	per timed verb: one count per bucket (len(LatencyBounds)+1), sum in µs
//
// A file whose CRC does not match (a write torn by a power loss) counts
// from zero again: these are Prometheus counters, and a reset is what
// Prometheus expects of a counter that lost its value.
const countersMagic = "ENICNT02"

var (
	headerSize   = len(countersMagic)
	perTimedVerb = len(LatencyBounds) + 2
	slotCount    = 2*len(CountedVerbs) + perTimedVerb*len(TimedVerbs)
	countersSize = headerSize + 8*slotCount + 4
)

type slots []uint64

// decodeSlots returns the slots in data, or zeros if data is not a whole,
// intact counters file.
func decodeSlots(data []byte) slots {
	s := make(slots, slotCount)
	if len(data) != countersSize || string(data[:headerSize]) != countersMagic ||
		crc32.ChecksumIEEE(data[:countersSize-4]) != binary.LittleEndian.Uint32(data[countersSize-4:]) {
		return s
	}
	for i := range s {
		s[i] = binary.LittleEndian.Uint64(data[headerSize+8*i:])
	}
	return s
}

func (s slots) encode() []byte {
	out := make([]byte, countersSize)
	copy(out, countersMagic)
	for i, v := range s {
		binary.LittleEndian.PutUint64(out[headerSize+8*i:], v)
	}
	binary.LittleEndian.PutUint32(out[countersSize-4:], crc32.ChecksumIEEE(out[:countersSize-4]))
	return out
}

func index(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// RecordVerb counts one call of verb in dir's counters file and, for timed
// verbs, its latency. The file is created if needed (dir is not).
func RecordVerb(dir, verb string, ok bool, d time.Duration) error {
	v := index(CountedVerbs, verb)
	if v < 0 {
		return nil
	}
	// The counters file is its own lock (lockfile): we run as root.
	f, err := lockfile.Open(filepath.Join(dir, CountersFileName), os.O_RDWR|os.O_CREATE)
	if err != nil {
		return fmt.Errorf("open metrics counters: %w", err)
	}
	defer f.Close() // also releases the lock
	if err := soleLink(f); err != nil {
		return fmt.Errorf("open metrics counters: %w", err)
	}
	if err := f.Lock(); err != nil {
		return fmt.Errorf("lock metrics counters: %w", err)
	}
	buf := make([]byte, countersSize+1)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read metrics counters: %w", err)
	}
	s := decodeSlots(buf[:n])
	res := 0
	if !ok {
		res = 1
	}
	s[2*v+res]++
	if t := index(TimedVerbs, verb); t >= 0 {
		base := 2*len(CountedVerbs) + t*perTimedVerb
		b := len(LatencyBounds)
		for i, le := range LatencyBounds {
			if d.Seconds() <= le {
				b = i
				break
			}
		}
		s[base+b]++
		s[base+perTimedVerb-1] += uint64(d.Microseconds())
	}
	if _, err := f.WriteAt(s.encode(), 0); err != nil {
		return fmt.Errorf("write metrics counters: %w", err)
	}
	if n > countersSize {
		return f.Truncate(int64(countersSize))
	}
	return nil
}

// soleLink refuses a counters file that another name links to: it is
// rewritten and truncated in place, and a hard link planted at its name
// would have that done to another file. Only the count is lost; a lock
// file, which holds no data, is not held to this.
func soleLink(f *lockfile.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink != 1 {
		return fmt.Errorf("%s: %w: %d hard links to it (want 1)", f.Name(), lockfile.ErrUnsafe, st.Nlink)
	}
	return nil
}

// VerbCounts are the counters as read at one moment.
type VerbCounts struct {
	Calls   map[string][2]uint64 // verb -> ok, error
	Latency map[string]Latency   // timed verb -> histogram
}

// Latency is one verb's histogram: per-bucket counts (the last is +Inf)
// and the sum in seconds.
type Latency struct {
	Buckets []uint64
	Sum     float64
}

func (s slots) counts() VerbCounts {
	vc := VerbCounts{Calls: map[string][2]uint64{}, Latency: map[string]Latency{}}
	for i, v := range CountedVerbs {
		vc.Calls[v] = [2]uint64{s[2*i], s[2*i+1]}
	}
	for t, v := range TimedVerbs {
		base := 2*len(CountedVerbs) + t*perTimedVerb
		l := Latency{Buckets: append([]uint64(nil), s[base:base+perTimedVerb-1]...)}
		l.Sum = float64(s[base+perTimedVerb-1]) / 1e6
		vc.Latency[v] = l
	}
	return vc
}

// ReadCounters reads the counters file in dir without creating it; a
// missing file reads as zeros.
func ReadCounters(dir string) (VerbCounts, error) {
	f, err := lockfile.Open(filepath.Join(dir, CountersFileName), os.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return make(slots, slotCount).counts(), nil
	}
	if err != nil {
		return VerbCounts{}, fmt.Errorf("read metrics counters: %w", err)
	}
	defer f.Close()
	if err := f.RLock(); err != nil {
		return VerbCounts{}, fmt.Errorf("lock metrics counters: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(countersSize)+1))
	if err != nil {
		return VerbCounts{}, fmt.Errorf("read metrics counters: %w", err)
	}
	return decodeSlots(data).counts(), nil
}
