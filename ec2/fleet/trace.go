package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
)

// call is one EC2 attempt of a node, for its timeline (Options.Trace).
type call struct {
	At        time.Duration // from the launch
	Action    string
	Throttled bool
}

// tracer records a node's EC2 attempts: each attempt, not each call, so a
// call's throttled retries show.
type tracer struct {
	mu    sync.Mutex
	since func() time.Duration
	calls []call
}

// option adds the tracer to an EC2 client's stack, inside the retry loop
// (the deserialize step runs once per attempt).
func (t *tracer) option(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("fleetTrace",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleDeserialize(ctx, in)
			var api smithy.APIError
			throttled := errors.As(err, &api) && api.ErrorCode() == "RequestLimitExceeded"
			t.mu.Lock()
			t.calls = append(t.calls, call{At: t.since(), Action: awsmiddleware.GetOperationName(ctx), Throttled: throttled})
			t.mu.Unlock()
			return out, md, err
		}), middleware.Before)
}

// Timeline is one node's story: when it was Ready and done, and its EC2
// attempts by action: each call that got through with its time, and the
// throttled attempts before it.
type Timeline struct {
	Node        int
	Ready, Done time.Duration
	Calls       []call
}

func (tl Timeline) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %d: Ready %.0fs, done %.0fs:", tl.Node, tl.Ready.Seconds(), tl.Done.Seconds())
	throttled := map[string]int{}
	for _, c := range tl.Calls {
		if strings.HasPrefix(c.Action, "Describe") {
			continue
		}
		if c.Throttled {
			throttled[c.Action]++
			continue
		}
		fmt.Fprintf(&b, " %s@%.0fs(%d)", strings.TrimSuffix(strings.TrimSuffix(c.Action, "NetworkInterface"), "PrivateIpAddresses"), c.At.Seconds(), throttled[c.Action])
		throttled[c.Action] = 0
	}
	for a, n := range throttled {
		if n > 0 {
			fmt.Fprintf(&b, " %s throttled %d (none through after)", a, n)
		}
	}
	return b.String()
}

// Slowest is the timelines of the n nodes done last, last first.
func (r Report) Slowest(n int) []Timeline {
	s := slices.Clone(r.Timelines)
	slices.SortFunc(s, func(a, b Timeline) int { return int(b.Done - a.Done) })
	return s[:min(n, len(s))]
}

// LongestWaits is the timelines of the n nodes whose pods waited longest
// after the node was Ready (where ADDs fail on their wait), longest first.
func (r Report) LongestWaits(n int) []Timeline {
	s := slices.Clone(r.Timelines)
	slices.SortFunc(s, func(a, b Timeline) int { return int((b.Done - b.Ready) - (a.Done - a.Ready)) })
	return s[:min(n, len(s))]
}

// Ordinals is, for each mutating action, when the nodes' k-th call of it
// got through (p50, p99 over the nodes that made one): whether the
// buckets served first calls before second ones across the fleet.
func (r Report) Ordinals() string {
	at := map[string][][]time.Duration{} // action, k-1: times
	for _, tl := range r.Timelines {
		k := map[string]int{}
		for _, c := range tl.Calls {
			if c.Throttled || strings.HasPrefix(c.Action, "Describe") {
				continue
			}
			if len(at[c.Action]) <= k[c.Action] {
				at[c.Action] = append(at[c.Action], nil)
			}
			at[c.Action][k[c.Action]] = append(at[c.Action][k[c.Action]], c.At)
			k[c.Action]++
		}
	}
	actions := make([]string, 0, len(at))
	for a := range at {
		actions = append(actions, a)
	}
	slices.Sort(actions)
	var b strings.Builder
	for _, a := range actions {
		fmt.Fprintf(&b, "  %s:", a)
		for k, ts := range at[a] {
			if k >= 4 {
				break
			}
			p := Report{NodeDone: ts}
			fmt.Fprintf(&b, " #%d (%d nodes) p50 %.0fs p99 %.0fs;", k+1, len(ts), p.Percentile(0.5).Seconds(), p.Percentile(0.99).Seconds())
		}
		b.WriteString("\n")
	}
	return b.String()
}
