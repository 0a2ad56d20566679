package plugin

import (
	"fmt"
	"io"
	"iter"
	"math"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/metrics"
	"github.com/eni-cni/eni-cni/netconf"
)

// nodeMetrics builds the families of the node_exporter textfile from the
// state, the run record and the CNI verb counters.
func nodeMetrics(network string, st *alloc.State, pl alloc.Pool, runs *metrics.Runs, verbs metrics.VerbCounts, now time.Time) []metrics.Family {
	net := metrics.Label{Name: "network", Value: network}
	fams := poolFamilies(net, st, pl, now)
	fams = append(fams, jobFamilies(net, runs)...)
	ec2Calls := metrics.Family{Name: "eni_cni_ec2_calls_total", Help: "EC2 API operations made by warm (and doctor, max-pods), by API; SDK retries count once.", Type: metrics.Counter}
	ec2Errors := metrics.Family{Name: "eni_cni_ec2_errors_total", Help: "EC2 API operations that failed after the SDK's retries, by API.", Type: metrics.Counter}
	for _, api := range sortedKeys(runs.EC2) {
		ec2Calls.Add(float64(runs.EC2[api].Calls), net, metrics.Label{Name: "api", Value: api})
		ec2Errors.Add(float64(runs.EC2[api].Errors), net, metrics.Label{Name: "api", Value: api})
	}
	freed := metrics.Family{Name: "eni_cni_gc_freed_addresses_total", Help: "Addresses freed by gc and the GC verb (sandboxes whose DEL never came).", Type: metrics.Counter}
	freed.Add(float64(runs.GCFreed), net)
	leftovers := metrics.Family{Name: "eni_cni_gc_leftovers_removed_total", Help: "Host veths, rules and routes no allocation explained, removed by gc.", Type: metrics.Counter}
	leftovers.Add(float64(runs.GCLeftovers), net)
	calls := metrics.Family{Name: "eni_cni_cni_calls_total", Help: "CNI verb calls by verb and result.", Type: metrics.Counter}
	for _, v := range metrics.CountedVerbs {
		c := verbs.Calls[v]
		calls.Add(float64(c[0]), net, metrics.Label{Name: "verb", Value: v}, metrics.Label{Name: "result", Value: "ok"})
		calls.Add(float64(c[1]), net, metrics.Label{Name: "verb", Value: v}, metrics.Label{Name: "result", Value: "error"})
	}
	latency := metrics.Family{Name: "eni_cni_cni_duration_seconds", Help: "Duration of CNI ADD and DEL calls, from configuration parsed to result printed.", Type: metrics.Histogram}
	for _, v := range metrics.TimedVerbs {
		l := verbs.Latency[v]
		latency.Samples = append(latency.Samples, metrics.HistogramSamples(metrics.LatencyBounds, l.Buckets, l.Sum, net, metrics.Label{Name: "verb", Value: v})...)
	}
	written := metrics.Family{Name: "eni_cni_metrics_written_timestamp_seconds", Help: "When this file was written (by gc or warm).", Type: metrics.Gauge}
	written.Add(float64(now.Unix()), net)
	return append(fams, ec2Calls, ec2Errors, freed, leftovers, calls, latency, written)
}

// poolFamilies are the pool's addresses per ENI and state.
func poolFamilies(net metrics.Label, st *alloc.State, pl alloc.Pool, now time.Time) []metrics.Family {
	if rs, ok := pl.(alloc.Ranges); ok && rs.FamilySize(alloc.IPv6) > 0 {
		return rangeFamilies(net, st, rs, now)
	}
	size := metrics.Family{Name: "eni_cni_pool_size", Help: "Addresses in the pool, by ENI (\"none\" for a static pool).", Type: metrics.Gauge}
	addrs := metrics.Family{Name: "eni_cni_pool_addresses", Help: "Pool addresses by ENI and state (free, cooling, allocated).", Type: metrics.Gauge}
	if sp, ok := pl.(alloc.StoredPool); ok && sp.IPv6 {
		// An ec2 pool with a /80 (2^48 addresses): its IPv6 addresses
		// are counted by ENI, not walked, and each family is labelled.
		addENICounts(&size, &addrs, walkByENI(st, sp.AddrsOf(st, alloc.IPv4), now), net, metrics.Label{Name: "family", Value: alloc.IPv4.String()})
		addENICounts(&size, &addrs, prefixesByENI(st, sp, now), net, metrics.Label{Name: "family", Value: alloc.IPv6.String()})
	} else {
		addENICounts(&size, &addrs, walkByENI(st, pl.Addrs(st), now), net)
	}
	allocs := metrics.Family{Name: "eni_cni_allocations", Help: "Addresses allocated to pod sandboxes (also those outside the pool).", Type: metrics.Gauge}
	allocs.Add(float64(len(st.Allocations)), net)
	return append([]metrics.Family{size, addrs, allocs}, demandFamilies(net, st, now)...)
}

// eniCounts are one ENI's pool addresses by state.
type eniCounts struct{ size, free, cooling, allocated int }

// busy are the addresses allocations hold and those cooling down.
func busy(st *alloc.State, now time.Time) (allocated, cooling map[netip.Addr]bool) {
	allocated = make(map[netip.Addr]bool, len(st.Allocations))
	for _, a := range st.Allocations {
		for _, ip := range a.Addrs() {
			allocated[ip] = true
		}
	}
	cooling = make(map[netip.Addr]bool, len(st.Cooling))
	for _, c := range st.Cooling {
		if now.Before(c.Until) {
			cooling[c.IP] = true
		}
	}
	return allocated, cooling
}

// walkByENI counts the addresses pool walks, by ENI ("none" when they
// have none) and state.
func walkByENI(st *alloc.State, pool iter.Seq2[netip.Addr, string], now time.Time) map[string]*eniCounts {
	allocated, cooling := busy(st, now)
	byENI := map[string]*eniCounts{}
	for ip, eni := range pool {
		if eni == "" {
			eni = "none"
		}
		c := byENI[eni]
		if c == nil {
			c = &eniCounts{}
			byENI[eni] = c
		}
		c.size++
		switch {
		case allocated[ip]:
			c.allocated++
		case cooling[ip]:
			c.cooling++
		default:
			c.free++
		}
	}
	return byENI
}

// prefixesByENI counts the IPv6 addresses of the ec2 pool sp by the ENI
// their /80 is delegated to: sizes from the prefixes, states from the
// allocations and cooldowns that hold one of them.
func prefixesByENI(st *alloc.State, sp alloc.StoredPool, now time.Time) map[string]*eniCounts {
	byENI := map[string]*eniCounts{}
	if st.EC2 == nil {
		return byENI
	}
	for _, e := range st.EC2.ENIs {
		if e.ForPods(sp.CreatedOnly) && len(e.IPv6Prefixes) > 0 {
			byENI[e.ID] = &eniCounts{size: prefixAddrs(e.IPv6Prefixes)}
		}
	}
	allocated, cooling := busy(st, now)
	for ip := range allocated {
		if c := byENI[eni6(st, sp, ip)]; c != nil {
			c.allocated++
		}
	}
	for ip := range cooling {
		if c := byENI[eni6(st, sp, ip)]; c != nil && !allocated[ip] {
			c.cooling++
		}
	}
	for _, c := range byENI {
		c.free = c.size - c.allocated - c.cooling
	}
	return byENI
}

// eni6 is the ENI whose /80 holds ip, "" if the pool does not hold it.
func eni6(st *alloc.State, sp alloc.StoredPool, ip netip.Addr) string {
	if !ip.Is6() || !sp.Contains(st, ip) {
		return ""
	}
	eni, _ := st.EC2.ENIOf6(ip)
	return eni
}

// prefixAddrs is how many pod addresses ps hold (all but each one's
// first), math.MaxInt when more.
func prefixAddrs(ps []section.IPv6Prefix) int {
	n := 0
	for _, p := range ps {
		host := 128 - p.Prefix.Bits()
		if host >= 62 {
			return math.MaxInt
		}
		n = min(n+(1<<host-1), math.MaxInt)
	}
	return n
}

// addENICounts adds byENI to the size and addresses families, by ENI,
// with labels before the ENI's.
func addENICounts(size, addrs *metrics.Family, byENI map[string]*eniCounts, labels ...metrics.Label) {
	for _, eni := range sortedKeys(byENI) {
		c := byENI[eni]
		ls := slices.Concat(labels[:1], []metrics.Label{{Name: "eni", Value: eni}}, labels[1:])
		state := func(v string) []metrics.Label { return append(slices.Clip(ls), metrics.Label{Name: "state", Value: v}) }
		size.Add(float64(c.size), ls...)
		addrs.Add(float64(c.free), state("free")...)
		addrs.Add(float64(c.cooling), state("cooling")...)
		addrs.Add(float64(c.allocated), state("allocated")...)
	}
}

// rangeFamilies are poolFamilies of a static pool with IPv6 ranges, by
// family (label "family"): counted, not walked, as an IPv6 range may hold
// 2^64 addresses.
func rangeFamilies(net metrics.Label, st *alloc.State, rs alloc.Ranges, now time.Time) []metrics.Family {
	size := metrics.Family{Name: "eni_cni_pool_size", Help: "Addresses in the pool, by ENI (\"none\" for a static pool).", Type: metrics.Gauge}
	addrs := metrics.Family{Name: "eni_cni_pool_addresses", Help: "Pool addresses by ENI and state (free, cooling, allocated).", Type: metrics.Gauge}
	none := metrics.Label{Name: "eni", Value: "none"}
	for _, f := range []alloc.Family{alloc.IPv4, alloc.IPv6} {
		total := rs.FamilySize(f)
		if total == 0 {
			continue
		}
		of := func(ip netip.Addr) bool { return alloc.FamilyOf(ip) == f && rs.Contains(st, ip) }
		allocated := map[netip.Addr]bool{}
		for _, a := range st.Allocations {
			for _, ip := range a.Addrs() {
				if of(ip) {
					allocated[ip] = true
				}
			}
		}
		cooling := 0
		for _, c := range st.Cooling {
			if of(c.IP) && !allocated[c.IP] && now.Before(c.Until) {
				cooling++
			}
		}
		fam := metrics.Label{Name: "family", Value: f.String()}
		size.Add(float64(total), net, none, fam)
		addrs.Add(float64(total-len(allocated)-cooling), net, none, fam, metrics.Label{Name: "state", Value: "free"})
		addrs.Add(float64(cooling), net, none, fam, metrics.Label{Name: "state", Value: "cooling"})
		addrs.Add(float64(len(allocated)), net, none, fam, metrics.Label{Name: "state", Value: "allocated"})
	}
	allocs := metrics.Family{Name: "eni_cni_allocations", Help: "Addresses allocated to pod sandboxes (also those outside the pool).", Type: metrics.Gauge}
	allocs.Add(float64(len(st.Allocations)), net)
	return append([]metrics.Family{size, addrs, allocs}, demandFamilies(net, st, now)...)
}

// demandFamilies are the ADDs waiting on a dry ec2 pool and how the last
// warm pass they waited for ended: an operator sees a burst outrunning the
// pool, and why warm could not keep up, without reading the logs.
func demandFamilies(net metrics.Label, st *alloc.State, now time.Time) []metrics.Family {
	demand := metrics.Family{Name: "eni_cni_pool_demand", Help: "ADDs waiting for an address on a dry ec2 pool.", Type: metrics.Gauge}
	demand.Add(float64(st.Waiting(now)), net)
	fams := []metrics.Family{demand}
	if st.EC2 != nil && (st.EC2.Growth != nil || len(st.EC2.FullSubnets) > 0) {
		fams = append(fams, growthFamilies(net, st, now)...)
	}
	if st.EC2 == nil || st.EC2.LastPass == nil {
		return fams
	}
	lp := st.EC2.LastPass
	last := metrics.Family{Name: "eni_cni_warm_last_pass_timestamp_seconds", Help: "When the last warm pass that waiting ADDs could read ended, by its result (done, throttled, iam-denied, subnet-full, instance-limit, failed).", Type: metrics.Gauge}
	last.Add(float64(lp.At.Unix()), net, metrics.Label{Name: "result", Value: lp.Result})
	return append(fams, last)
}

// growthFamilies are how warm's last attempt to grow the pool ended, which
// is recorded whoever waited for it, and the pod subnets it found full: a
// subnet-full node is seen before its pods fail.
func growthFamilies(net metrics.Label, st *alloc.State, now time.Time) []metrics.Family {
	var fams []metrics.Family
	if g := st.EC2.Growth; g != nil {
		f := metrics.Family{Name: "eni_cni_warm_last_growth_timestamp_seconds", Help: "When warm's last attempt to grow the pool ended, by its result (done, throttled, iam-denied, subnet-full, instance-limit, failed).", Type: metrics.Gauge}
		f.Add(float64(g.At.Unix()), net, metrics.Label{Name: "result", Value: g.Result})
		fams = append(fams, f)
	}
	full := metrics.Family{Name: "eni_cni_pod_subnets_full", Help: "Pod subnets (custom subnets) warm found full and skips for now.", Type: metrics.Gauge}
	n := 0
	for _, f := range st.EC2.FullSubnets {
		if now.Before(f.Until) {
			n++
		}
	}
	full.Add(float64(n), net)
	return append(fams, full)
}

// jobFamilies are the last run of gc and warm.
func jobFamilies(net metrics.Label, runs *metrics.Runs) []metrics.Family {
	last := metrics.Family{Name: "eni_cni_job_last_run_timestamp_seconds", Help: "When gc or warm last ran.", Type: metrics.Gauge}
	success := metrics.Family{Name: "eni_cni_job_last_success_timestamp_seconds", Help: "When gc or warm last succeeded.", Type: metrics.Gauge}
	duration := metrics.Family{Name: "eni_cni_job_last_duration_seconds", Help: "How long the last run of gc or warm took.", Type: metrics.Gauge}
	result := metrics.Family{Name: "eni_cni_job_last_run_success", Help: "1 if the last run of gc or warm succeeded, else 0.", Type: metrics.Gauge}
	total := metrics.Family{Name: "eni_cni_job_runs_total", Help: "Runs of gc and warm.", Type: metrics.Counter}
	failures := metrics.Family{Name: "eni_cni_job_failures_total", Help: "Failed runs of gc and warm.", Type: metrics.Counter}
	for _, job := range sortedKeys(runs.Jobs) {
		r := runs.Jobs[job]
		l := metrics.Label{Name: "job", Value: job}
		last.Add(unixOrZero(r.Last), net, l)
		success.Add(unixOrZero(r.LastSuccess), net, l)
		duration.Add(r.DurationSec, net, l)
		ok := 0.0
		if r.OK {
			ok = 1
		}
		result.Add(ok, net, l)
		total.Add(float64(r.Total), net, l)
		failures.Add(float64(r.Failures), net, l)
	}
	return []metrics.Family{last, success, duration, result, total, failures}
}

func unixOrZero(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// recordJob records a gc or warm run and rewrites the metrics file. Neither
// failing fails the run: metrics must never stop the pool being served, so
// a failure is reported on stderr.
func (p *Plugin) RecordJob(u metrics.RunUpdate, stderr io.Writer) {
	runs, err := metrics.RecordRun(p.Cfg.StateDir, u)
	if err != nil {
		fmt.Fprintf(stderr, "eni-cni: %s: record the run: %v\n", u.Job, err)
		return
	}
	if err := p.writeMetrics(runs, time.Now()); err != nil {
		fmt.Fprintf(stderr, "eni-cni: %s: %v\n", u.Job, err)
	}
}

// writeMetrics writes the metrics file, if metrics are on.
func (p *Plugin) writeMetrics(runs *metrics.Runs, now time.Time) error {
	path := p.Cfg.MetricsPath()
	if path == "" {
		return nil
	}
	st, _, err := p.Mgr.Peek()
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	verbs, err := metrics.ReadCounters(p.Cfg.StateDir)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return metrics.WriteFile(path, nodeMetrics(p.Cfg.Network, st, p.Mgr.Pool, runs, verbs, now))
}

// recordVerb counts a CNI call when metrics are on: one small locked
// read-modify-write of a file (about as long as opening a file; see
// BenchmarkRecordVerb). A failure only loses the count.
func recordVerb(cfg *netconf.Config, verb string, ok bool, d time.Duration) {
	if cfg.MetricsPath() == "" {
		return
	}
	_ = metrics.RecordVerb(cfg.StateDir, verb, ok, d)
}
