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
	mu     sync.Mutex
	since  func() time.Duration
	calls  []call
	events []passEvent
}

// passEvent is a line of a node's warm passes: a pass begun, skipped (one
// runs) or ended, and what the pass said (Warmer.Out).
type passEvent struct {
	At   time.Duration
	What string
}

// note records what happened now.
func (t *tracer) note(what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, passEvent{At: t.since(), What: what})
}

// Write is the node's Warmer.Out: each line it says is an event.
func (t *tracer) Write(p []byte) (int, error) {
	for line := range strings.Lines(string(p)) {
		if line = strings.TrimSpace(line); line != "" {
			t.note(line)
		}
	}
	return len(p), nil
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
	Events      []passEvent
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

// Story is the timeline's calls and warm events in time order, a line
// each, for reading one node through (-fleet.trace-story).
func (tl Timeline) Story() string {
	type line struct {
		at   time.Duration
		what string
	}
	var ls []line
	for _, c := range tl.Calls {
		what := c.Action
		if c.Throttled {
			what += " throttled"
		}
		ls = append(ls, line{c.At, what})
	}
	for _, e := range tl.Events {
		ls = append(ls, line{e.At, e.What})
	}
	slices.SortStableFunc(ls, func(a, b line) int { return int(a.at - b.at) })
	var b strings.Builder
	fmt.Fprintf(&b, "node %d (Ready %.1fs, done %.1fs):\n", tl.Node, tl.Ready.Seconds(), tl.Done.Seconds())
	for _, l := range ls {
		fmt.Fprintf(&b, "    %7.1fs %s\n", l.at.Seconds(), l.what)
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
