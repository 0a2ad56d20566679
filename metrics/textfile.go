// Package metrics owns eni-cni's Prometheus metrics without a daemon: the
// node_exporter textfile-collector file (written atomically), the
// cumulative counters of the CNI verbs (a small memory-mapped file every
// plugin process adds to) and the record of the last gc and warm runs. It
// needs no Prometheus library, so the lean build stays small.
package metrics

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/eni-cni/eni-cni/atomicfile"
)

// Metric types of the text format.
const (
	Gauge     = "gauge"
	Counter   = "counter"
	Histogram = "histogram"
)

// Family is one metric name with its HELP, TYPE and samples.
type Family struct {
	Name, Help, Type string
	Samples          []Sample
}

// Sample is one line: Name+Suffix (e.g. "_bucket"), labels, value.
type Sample struct {
	Suffix string
	Labels []Label
	Value  float64
}

// Label is a name="value" pair.
type Label struct{ Name, Value string }

// L builds labels from name, value pairs.
func L(kv ...string) []Label {
	out := make([]Label, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Label{kv[i], kv[i+1]})
	}
	return out
}

// Add appends a sample and returns f for chaining.
func (f *Family) Add(value float64, labels ...Label) *Family {
	f.Samples = append(f.Samples, Sample{Labels: labels, Value: value})
	return f
}

// Write renders families in the Prometheus text exposition format 0.0.4,
// sorted by name so the file is stable.
func Write(w io.Writer, fams []Family) error {
	sorted := append([]Family(nil), fams...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	bw := bufio.NewWriter(w)
	for _, f := range sorted {
		if len(f.Samples) == 0 {
			continue
		}
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.Name, escapeHelp(f.Help), f.Name, f.Type)
		for _, s := range f.Samples {
			bw.WriteString(f.Name + s.Suffix)
			if len(s.Labels) > 0 {
				bw.WriteByte('{')
				for i, l := range s.Labels {
					if i > 0 {
						bw.WriteByte(',')
					}
					fmt.Fprintf(bw, "%s=\"%s\"", l.Name, escapeValue(l.Value))
				}
				bw.WriteByte('}')
			}
			bw.WriteByte(' ')
			bw.WriteString(formatValue(s.Value))
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeValue(s string) string { return valueEscaper.Replace(s) }

// WriteFile writes the families to path atomically (atomicfile), so
// node_exporter never reads half a file. The file is world-readable:
// node_exporter often runs as another user. node_exporter reads only
// *.prom files, and the temporary name does not end in .prom.
func WriteFile(path string, fams []Family) error {
	var buf bytes.Buffer
	if err := Write(&buf, fams); err != nil {
		return fmt.Errorf("write metrics %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write metrics %s: %w", path, err)
	}
	return nil
}

// HistogramSamples turns per-bucket counts (not cumulative; the last one is
// +Inf) into the _bucket, _sum and _count samples of a histogram. _count is
// the +Inf bucket, so the samples agree even if the counts were read while
// a writer was adding to them.
func HistogramSamples(bounds []float64, counts []uint64, sum float64, labels ...Label) []Sample {
	var out []Sample
	var cum uint64
	for i, c := range counts {
		cum += c
		le := "+Inf"
		if i < len(bounds) {
			le = formatValue(bounds[i])
		}
		out = append(out, Sample{Suffix: "_bucket", Labels: append(append([]Label(nil), labels...), Label{"le", le}), Value: float64(cum)})
	}
	out = append(out, Sample{Suffix: "_sum", Labels: labels, Value: sum}, Sample{Suffix: "_count", Labels: labels, Value: float64(cum)})
	return out
}
