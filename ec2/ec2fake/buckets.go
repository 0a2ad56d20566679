package ec2fake

import (
	"maps"
	"net/url"
	"strings"
	"time"
)

// Bucket is one of EC2's request token buckets: a call takes a token, a
// call that finds none is throttled (RequestLimitExceeded), and tokens come
// back at Refill per second up to Size.
type Bucket struct {
	Size   float64 `json:"size"`
	Refill float64 `json:"refill"` // tokens per second
}

// Throttling is how the account's EC2 API rate-limits the whole world: one
// bucket per action (every instance of the world shares them, as every
// node of an account and region does), throttled calls counted per action.
type Throttling struct {
	// Buckets by action; the MutatingAction and DescribeAction entries
	// cover the actions not listed, UnfilteredDescribe the
	// DescribeNetworkInterfaces calls that neither filter nor paginate.
	Buckets map[string]Bucket `json:"buckets"`
}

// Keys of Throttling.Buckets for what no single action names.
const (
	MutatingAction     = "mutating"
	DescribeAction     = "describe"
	UnfilteredDescribe = "unfiltered-describe"
)

// AccountThrottling is EC2's documented throttling for one account and
// region (EC2 API reference, "Request throttling"): Describe actions 100
// tokens, 20 a second; AssignPrivateIpAddresses and
// UnassignPrivateIpAddresses 100 and 5; CreateNetworkInterface,
// DeleteNetworkInterface and ModifyNetworkInterfaceAttribute 100 and 5;
// other mutating actions (AttachNetworkInterface among them) 50 and 5; an
// unfiltered, unpaginated DescribeNetworkInterfaces 50 and 10. Each action
// has a bucket of its own.
func AccountThrottling() Throttling {
	return Throttling{Buckets: map[string]Bucket{
		DescribeAction:                    {100, 20},
		UnfilteredDescribe:                {50, 10},
		MutatingAction:                    {50, 5},
		"AssignPrivateIpAddresses":        {100, 5},
		"UnassignPrivateIpAddresses":      {100, 5},
		"CreateNetworkInterface":          {100, 5},
		"DeleteNetworkInterface":          {100, 5},
		"ModifyNetworkInterfaceAttribute": {100, 5},
	}}
}

// Scaled is t with every refill rate multiplied by k: the same buckets on
// a clock k times faster.
func (t Throttling) Scaled(k float64) Throttling {
	out := Throttling{Buckets: make(map[string]Bucket, len(t.Buckets))}
	for name, b := range t.Buckets {
		out.Buckets[name] = Bucket{Size: b.Size, Refill: b.Refill * k}
	}
	return out
}

// Shrunk is t for a smaller account: every bucket's size multiplied by
// size (at least one token, so a call can go through) and its refill by
// refill. A fleet of N nodes against buckets shrunk by N/1000 meets them
// as 1,000 nodes meet the account's; a larger refill factor shortens the
// run.
func (t Throttling) Shrunk(size, refill float64) Throttling {
	out := Throttling{Buckets: make(map[string]Bucket, len(t.Buckets))}
	for name, b := range t.Buckets {
		out.Buckets[name] = Bucket{Size: max(1, b.Size*size), Refill: b.Refill * refill}
	}
	return out
}

// Drain is how long the buckets of t take to serve calls (by action), the
// buckets full at the start: for each bucket, the calls beyond its size at
// its refill rate. The longest is the floor of any schedule of those calls.
func (t Throttling) Drain(calls map[string]int) (time.Duration, string) {
	used := map[string]int{}
	for action, n := range calls {
		used[t.bucketName(action, false)] += n
	}
	var worst time.Duration
	var which string
	for name, n := range used {
		b := t.Buckets[name]
		if b.Refill <= 0 || float64(n) <= b.Size {
			continue
		}
		if d := time.Duration((float64(n) - b.Size) / b.Refill * float64(time.Second)); d > worst {
			worst, which = d, name
		}
	}
	return worst, which
}

// bucketName is the bucket a call of action takes its token from.
func (t Throttling) bucketName(action string, unfiltered bool) string {
	if unfiltered {
		if _, ok := t.Buckets[UnfilteredDescribe]; ok {
			return UnfilteredDescribe
		}
	}
	if _, ok := t.Buckets[action]; ok {
		return action
	}
	if strings.HasPrefix(action, "Describe") {
		return DescribeAction
	}
	return MutatingAction
}

// tokens is the state of one bucket.
type tokens struct {
	left float64
	at   time.Time
}

// throttle is the account's token buckets at work.
type throttle struct {
	cfg       Throttling
	buckets   map[string]*tokens
	throttled map[string]int
}

// SetThrottling makes the world's EC2 API throttle as t says, every bucket
// full; nil turns throttling off. The buckets run on Config.Clock.
func (s *Server) SetThrottling(t *Throttling) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t == nil {
		s.throttle = nil
		return
	}
	cfg := Throttling{Buckets: maps.Clone(t.Buckets)}
	s.throttle = &throttle{cfg: cfg, buckets: map[string]*tokens{}, throttled: map[string]int{}}
}

// Throttled returns how many calls of each action the buckets refused.
func (s *Server) Throttled() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.throttle == nil {
		return map[string]int{}
	}
	return maps.Clone(s.throttle.throttled)
}

// admitLocked takes a token for one call of action, or reports it
// throttled.
func (s *Server) admitLocked(action string, form url.Values) bool {
	t := s.throttle
	if t == nil {
		return true
	}
	name := t.cfg.bucketName(action, action == "DescribeNetworkInterfaces" && unfiltered(form))
	spec, ok := t.cfg.Buckets[name]
	if !ok {
		return true // no bucket for it: never throttled
	}
	now := s.now()
	b := t.buckets[name]
	if b == nil {
		b = &tokens{left: spec.Size, at: now}
		t.buckets[name] = b
	}
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.left = min(spec.Size, b.left+dt*spec.Refill)
		b.at = now
	}
	if b.left < 1 {
		t.throttled[action]++
		return false
	}
	b.left--
	return true
}

// unfiltered: a DescribeNetworkInterfaces that names no interface, sets no
// filter and asks for no page size.
func unfiltered(form url.Values) bool {
	for k := range form {
		if k == "MaxResults" || strings.HasPrefix(k, "Filter.") || strings.HasPrefix(k, "NetworkInterfaceId.") {
			return false
		}
	}
	return true
}
