package ec2fake

import (
	"maps"
	"math/rand/v2"
	"time"
)

// Latency is a profile of how long EC2 and the instance take: how long
// each EC2 action takes to answer, how long after an attach the ENI's link
// appears on the instance, and how long IMDS lags EC2. With it, a test or
// benchmark sees the waits a real node sees, and the floor of a scenario
// (the sum of the minimum latencies of the calls it needs) is known.
type Latency struct {
	// Calls is the minimum reply time of each EC2 action; the AllActions
	// entry covers actions not listed.
	Calls map[string]time.Duration `json:"calls"`
	// Jitter makes each reply take min × (1 + u), u uniform in [0, Jitter).
	Jitter float64 `json:"jitter"`
	// LinkDelay is the time from AttachNetworkInterface's reply to the
	// ENI's link appearing on the instance: when OnLink hooks run.
	LinkDelay time.Duration `json:"linkDelay"`
	// IMDSLag is how long EC2's changes take to show in IMDS (used when
	// Config.IMDSLag is zero).
	IMDSLag time.Duration `json:"imdsLag"`
	// Seed makes the jitter reproducible.
	Seed uint64 `json:"seed"`
}

// RealisticLatency is a profile of EC2 as eni-cni meets it. AWS publishes
// no latency table for the EC2 API; the numbers come from what the AWS VPC
// CNI's maintainers and users have reported, rounded up:
//   - AssignPrivateIpAddresses 400 ms: amazon-vpc-cni-k8s PR #648 ("Add IPs
//     to the first ENI on startup") reports that assigning the first ENI's
//     addresses adds 400-600 ms to a node's start.
//   - CreateNetworkInterface 500 ms, AttachNetworkInterface 600 ms,
//     ModifyNetworkInterfaceAttribute 200 ms: the CloudTrail of
//     amazon-vpc-cni-k8s issue #732 has Create, Modify, Assign and Attach
//     of one ENI within two seconds; the ipamd log of issue #1872 has 1.8 s
//     from "Created a new ENI" to its addresses assigned, attach included.
//   - IMDS 1 s behind EC2: in #1872 the new ENI was missing from IMDS for
//     the first ~100 ms after the attach, and its addresses still 0.8 s
//     after their assignment.
//   - The link 1.5 s after the attach reply: no measurement was found (the
//     ECS agent waits for the hot-plug udev event, amazon-ecs-agent PR
//     #2564; ipamd polls IMDS from 100 ms on); 1.5 s is an assumption on the
//     slow side of what those retry schedules expect.
//   - Describe calls 150-200 ms, Unassign and Delete 300 ms: read-only and
//     small calls, taken below the mutating ones.
//
// Jitter is 10 %: real calls vary, but throttling, which the fake models on
// its own (Throttle), is what makes them vary by integer factors.
func RealisticLatency() Latency {
	return Latency{
		Calls: map[string]time.Duration{
			"AssignPrivateIpAddresses":        400 * time.Millisecond,
			"UnassignPrivateIpAddresses":      300 * time.Millisecond,
			"CreateNetworkInterface":          500 * time.Millisecond,
			"AttachNetworkInterface":          600 * time.Millisecond,
			"ModifyNetworkInterfaceAttribute": 200 * time.Millisecond,
			"DeleteNetworkInterface":          300 * time.Millisecond,
			"DetachNetworkInterface":          400 * time.Millisecond,
			"DescribeInstanceTypes":           150 * time.Millisecond,
			"DescribeSubnets":                 150 * time.Millisecond,
			"DescribeNetworkInterfaces":       200 * time.Millisecond,
			AllActions:                        150 * time.Millisecond,
		},
		Jitter:    0.10,
		LinkDelay: 1500 * time.Millisecond,
		IMDSLag:   time.Second,
		Seed:      1,
	}
}

// Min is the minimum reply time of action under the profile.
func (l Latency) Min(action string) time.Duration {
	if d, ok := l.Calls[action]; ok {
		return d
	}
	return l.Calls[AllActions]
}

func (l Latency) clone() Latency {
	l.Calls = maps.Clone(l.Calls)
	return l
}

// LatencyProfile returns the profile the fake runs with (zero: none).
func (s *Server) LatencyProfile() Latency {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.profile.clone()
}

// profileDelayLocked is the reply time the profile gives one call.
func (s *Server) profileDelayLocked(action string) time.Duration {
	d := s.profile.Min(action)
	if d <= 0 || s.profile.Jitter <= 0 {
		return d
	}
	return d + time.Duration(float64(d)*s.profile.Jitter*s.rng.Float64())
}

// OnLink registers fn to run when the link of an ENI attached through the
// API appears on the instance: LinkDelay after the attach reply. A test or
// benchmark playing the hypervisor creates the link there. fn runs on its
// own goroutine, without the server's lock.
func (s *Server) OnLink(fn func(ENI)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.linkHooks = append(s.linkHooks, fn)
}

// scheduleLinkLocked runs the OnLink hooks for e after the link delay.
func (s *Server) scheduleLinkLocked(e *eni) {
	if len(s.linkHooks) == 0 {
		return
	}
	snap, hooks := s.snapshotLocked(e), append([]func(ENI){}, s.linkHooks...)
	time.AfterFunc(s.profile.LinkDelay, func() {
		for _, fn := range hooks {
			fn(snap)
		}
	})
}

func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
