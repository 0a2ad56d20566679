package plugin

import (
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/metrics"
)

// A pass that ended subnet-full, and the pod subnets warm skips, show in
// `eni-cni list`, `eni-cni status` and the metrics, whoever waited for the
// pass.
func TestSubnetFullShown(t *testing.T) {
	now := time.Now()
	st := alloc.NewState("b")
	st.EC2 = &section.EC2{Growth: &section.PassOutcome{At: now, Result: section.PassSubnetFull, Message: "every pod subnet of the zone is full: zone us-east-1a: subnet-a, subnet-b"}}
	st.EC2.MarkSubnetFull("subnet-a", now.Add(-section.FullSubnetTTL)) // expired
	st.EC2.MarkSubnetFull("subnet-b", now)
	// An older outcome recorded for waiting ADDs does not hide it.
	st.EC2.LastPass = &section.PassOutcome{At: now.Add(-time.Hour), Result: section.PassDone}

	var b strings.Builder
	printListing(&b, listing{LastPass: lastOutcome(st), FullSubnets: fullSubnets(st, now)}, func(alloc.Allocation) time.Duration { return 0 })
	out := b.String()
	for _, want := range []string{"warm: the pass of", "ended the subnet is full: every pod subnet of the zone is full: zone us-east-1a: subnet-a, subnet-b", "pod subnet subnet-b is full; skipped until"} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "pod subnet subnet-a") {
		t.Errorf("list shows a subnet whose time is up:\n%s", out)
	}
	if note := (StatusReport{LastPass: lastOutcome(st)}).WarmNote(); !strings.Contains(note, "the subnet is full") {
		t.Errorf("status note %q", note)
	}
	if note := (StatusReport{LastPass: st.EC2.LastPass}).WarmNote(); note != "" {
		t.Errorf("status note of a pass that was done: %q", note)
	}

	fams := growthFamilies(metrics.Label{Name: "network", Value: "pods"}, st, now)
	var text strings.Builder
	for _, f := range fams {
		for _, s := range f.Samples {
			text.WriteString(f.Name + " " + labelsOf(s) + "\n")
		}
	}
	if got := text.String(); !strings.Contains(got, "eni_cni_warm_last_growth_timestamp_seconds") || !strings.Contains(got, `result=subnet-full`) || !strings.Contains(got, "eni_cni_pod_subnets_full") {
		t.Errorf("metrics:\n%s", got)
	}
	for _, f := range fams {
		if f.Name == "eni_cni_pod_subnets_full" && f.Samples[0].Value != 1 {
			t.Errorf("pod subnets full: %v, want 1", f.Samples[0].Value)
		}
	}
}

func labelsOf(s metrics.Sample) string {
	var parts []string
	for _, l := range s.Labels {
		parts = append(parts, l.Name+"="+l.Value)
	}
	return strings.Join(parts, ",")
}
