package fleet

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// TestSmallFleet: four nodes of ten pods each, well inside the buckets:
// every pod gets an address, nothing is throttled, and nodes whose launch
// template assigned prefixes make no mutating call at all.
func TestSmallFleet(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	base := Options{Nodes: 4, PodsPerNode: 10, Scale: 10, Timeout: 5 * time.Minute, Warm: section.WarmConfig{WarmIPTarget: 5}}
	lt := base
	lt.Warm.PrefixDelegation, lt.LaunchPrefixes = true, 1
	for _, o := range []Options{base, lt} {
		r, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("\n%s", Table([]*Report{r}))
		if r.Unserved != 0 || len(r.NodeDone) != o.Nodes {
			t.Errorf("%s: %d pods unserved", name(r), r.Unserved)
		}
		if len(r.Throttled) != 0 {
			t.Errorf("%s: throttled %v", name(r), r.Throttled)
		}
		if o.LaunchPrefixes > 0 && r.Mutations() != 0 {
			t.Errorf("%s: %d mutating calls, want 0 (calls %v)", name(r), r.Mutations(), r.Calls)
		}
		if o.LaunchPrefixes == 0 && r.Calls["AssignPrivateIpAddresses"] != o.Nodes {
			t.Errorf("%s: %d assigns for %d nodes, want one each", name(r), r.Calls["AssignPrivateIpAddresses"], o.Nodes)
		}
	}
}

// TestIPAMDModel: the VPC CNI's call pattern per node (one Assign, then one
// ENI per 5 s step: Create, DescribeInstances, Attach, Modify) for 30 pods
// and WARM_ENI_TARGET=1 on m5.xlarge is 1 Assign and 3 ENIs; a small fleet
// is not throttled, and its node needs three steps after the first.
func TestIPAMDModel(t *testing.T) {
	r := IPAMD(10, 30, 1)
	want := map[string]int{"DescribeNetworkInterfaces": 10, "AssignPrivateIpAddresses": 10, "CreateNetworkInterface": 30,
		"DescribeInstances": 30, "AttachNetworkInterface": 30, "ModifyNetworkInterfaceAttribute": 30}
	if !maps.Equal(r.Calls, want) || len(r.Throttled) != 0 {
		t.Errorf("calls %v (throttled %v), want %v", r.Calls, r.Throttled, want)
	}
	if len(r.NodeDone) != 10 || r.Last < 10*time.Second || r.Last > 25*time.Second {
		t.Errorf("%d nodes done, last at %s", len(r.NodeDone), r.Last)
	}
	big := IPAMD(1000, 30, 1)
	if len(big.NodeDone) != 1000 || big.Last < big.Bound {
		t.Errorf("1000 nodes: %d done, last %s, bound %s", len(big.NodeDone), big.Last, big.Bound)
	}
	t.Logf("\n%s", Table([]*Report{r, big}))
}

// TestSteadyState: after the scale-up a fleet's passes ask EC2 at most once
// per node-hour (the spread hourly check and the boot's leak sweep), never
// more Describes in a second than the bucket refills; when the pods go,
// the surplus goes back to EC2.
func TestSteadyState(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	r, err := Steady(context.Background(), SteadyOptions{Options: Options{Nodes: 10, PodsPerNode: 30, Warm: section.WarmConfig{WarmIPTarget: 5}},
		Hours: 2, Every: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", SteadyTable(r))
	if r.PerNodeHour() > 1 || r.MaxDescribePerSec > 20 || len(r.Throttled) != 0 {
		t.Errorf("%.2f calls per node-hour, %d Describes in a second, throttled %v", r.PerNodeHour(), r.MaxDescribePerSec, r.Throttled)
	}
	if r.DownCalls["UnassignPrivateIpAddresses"] < 10 {
		t.Errorf("scale-down: calls %v, want the surplus of every node given back", r.DownCalls)
	}
}

// TestStory: a node's story interleaves its EC2 attempts and its warm
// passes' lines in time order, throttled attempts marked, so that a pass
// spent on throttled describes reads as such (how the kept ENI's forced
// describe was found).
func TestStory(t *testing.T) {
	tr := &tracer{}
	at := time.Duration(0)
	tr.since = func() time.Duration { return at }
	tr.note("pass begins")
	tr.calls = append(tr.calls, call{At: 2 * time.Second, Action: "DescribeNetworkInterfaces", Throttled: true})
	at = 3 * time.Second
	if _, err := tr.Write([]byte("warm: one\n\nwarm: two\n")); err != nil {
		t.Fatal(err)
	}
	tr.calls = append(tr.calls, call{At: time.Second, Action: "AttachNetworkInterface"})
	tl := Timeline{Node: 7, Ready: 10 * time.Second, Done: 20 * time.Second, Calls: tr.calls, Events: tr.events}
	var got []string
	for l := range strings.Lines(tl.Story()) {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	want := []string{
		"node 7 (Ready 10.0s, done 20.0s):",
		"0.0s pass begins",
		"1.0s AttachNetworkInterface",
		"2.0s DescribeNetworkInterfaces throttled",
		"3.0s warm: one",
		"3.0s warm: two",
	}
	if !slices.Equal(got, want) {
		t.Errorf("story:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
