package fleet

import (
	"container/heap"
	"math/rand/v2"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// IPAMD models the same scale-up done the way the AWS VPC CNI's ipamd makes
// its EC2 calls, on virtual time against the same buckets: a model of its
// call pattern, not its code. Where each number comes from
// (aws/amazon-vpc-cni-k8s):
//   - pkg/ipamd/ipamd.go: ipPoolMonitorInterval = 5 s; StartNodeIPPoolManager
//     sleeps half of it, runs updateIPPoolIfRequired, sleeps the other half
//     (a pool step every 5 s plus the step's own time); defaultWarmENITarget
//     = 1 (WARM_ENI_TARGET unset: the pool is too low while fewer than one
//     ENI's worth of addresses, 14 on m5.xlarge, are free); increaseIPPool
//     first fills an ENI with room (tryAssignIPs: one
//     AssignPrivateIpAddresses of all its free slots), else allocates ONE
//     ENI per step (tryAllocateENI).
//   - pkg/awsutils/awsutils.go: AllocENI = CreateNetworkInterface (with the
//     ENI's addresses), attachENI = DescribeInstances (awsGetFreeDeviceNumber)
//   - AttachNetworkInterface, then ModifyNetworkInterfaceAttribute
//     (DeleteOnTermination); a failed attach deletes the new ENI
//     (DeleteNetworkInterface); at start, one DescribeNetworkInterfaces of the
//     instance's ENIs (DescribeAllENIs); the instance type's limits come from
//     its built-in table (vpc_ip_resource_limit.go), no DescribeInstanceTypes.
//   - The SDK's standard retryer (aws-sdk-go-v2 aws/retry: 3 attempts, a
//     throttled attempt waits a random time below 2^attempt s, at most 20 s);
//     a call that fails after them fails the step, and the next step (5 s
//     later) starts over.
//
// Left out: the leak sweep and the hourly reconcile (not in the first
// minutes), the aws-node pod's own start-up time, the link's appearance
// after the attach (1.5 s, as in RealisticLatency, is added to the step).
func IPAMD(nodes, pods int, seed uint64) *Report {
	const (
		perENI    = 14 // m5.xlarge: 15 addresses per ENI, its primary not for pods
		maxENIs   = 4
		loop      = 5 * time.Second
		linkDelay = 1500 * time.Millisecond
	)
	lat := ec2fake.RealisticLatency().Calls
	m := &ipamdModel{spec: ec2fake.AccountThrottling(), buckets: map[string]*bucket{},
		calls: map[string]int{}, throttled: map[string]int{}, rnd: rand.New(rand.NewPCG(seed, 1))}
	r := &Report{Opts: Options{Nodes: nodes, PodsPerNode: pods}, AddFailed: map[string]int{}, Model: "VPC CNI ipamd (model)"}
	q := &events{}
	type nodeState struct {
		addrs, enis int
		done        bool
	}
	state := make([]nodeState, nodes)
	for i := range nodes {
		state[i].enis = 1
		// ipamd's start-up describe, then its first step half a loop
		// later; nodes start within the same second.
		t := time.Duration(m.rnd.Float64() * float64(time.Second))
		t, _ = m.call("DescribeNetworkInterfaces", t, lat)
		heap.Push(q, event{at: t + loop/2, node: i})
	}
	for q.Len() > 0 {
		ev := heap.Pop(q).(event)
		s := &state[ev.node]
		free := s.addrs - min(s.addrs, pods)
		if free >= perENI || s.enis == maxENIs && s.addrs == perENI*maxENIs {
			continue // the pool is warm: no more calls in the scale-up
		}
		t, ok := ev.at, false
		if s.addrs < perENI*s.enis {
			if t, ok = m.call("AssignPrivateIpAddresses", t, lat); ok {
				s.addrs = perENI * s.enis
			}
		} else if t, ok = m.call("CreateNetworkInterface", t, lat); ok {
			t, _ = m.call("DescribeInstances", t, lat)
			if t, ok = m.call("AttachNetworkInterface", t, lat); !ok {
				t, _ = m.call("DeleteNetworkInterface", t, lat)
			} else {
				t, _ = m.call("ModifyNetworkInterfaceAttribute", t, lat)
				s.enis++
				s.addrs += perENI
				t += linkDelay
			}
		}
		if !s.done && s.addrs >= pods {
			// The pods waiting on the pool take the addresses as they
			// come: the last has one now.
			s.done = true
			r.NodeDone = append(r.NodeDone, t)
			r.Last = max(r.Last, t)
		}
		heap.Push(q, event{at: t + loop, node: ev.node})
	}
	r.Calls, r.Throttled = m.calls, m.throttled
	served := map[string]int{}
	for a, n := range r.Calls {
		served[a] = n - r.Throttled[a]
	}
	r.Bound, r.BoundOf = m.spec.Drain(served)
	return r
}

// ipamdModel is the account's buckets on the model's virtual time.
type ipamdModel struct {
	spec             ec2fake.Throttling
	buckets          map[string]*bucket
	calls, throttled map[string]int
	rnd              *rand.Rand
}

type bucket struct {
	left float64
	at   time.Duration
}

// call makes one call at t with the SDK's three attempts; it returns when
// the call ended and whether it got through. The model's events are taken
// in time order, so the buckets are read in time order too (within the
// retries' waits, nearly so).
func (m *ipamdModel) call(action string, t time.Duration, lat map[string]time.Duration) (time.Duration, bool) {
	for attempt := range 3 {
		m.calls[action]++
		if m.take(action, t) {
			d, ok := lat[action]
			if !ok {
				d = lat[ec2fake.AllActions]
			}
			return t + d, true
		}
		m.throttled[action]++
		if attempt < 2 {
			t += time.Duration(m.rnd.Float64() * float64(min(20*time.Second, time.Second<<(attempt+1))))
		}
	}
	return t, false
}

func (m *ipamdModel) take(action string, t time.Duration) bool {
	name := ec2fake.MutatingAction
	if _, ok := m.spec.Buckets[action]; ok {
		name = action
	} else if len(action) > 8 && action[:8] == "Describe" {
		name = ec2fake.DescribeAction
	}
	spec := m.spec.Buckets[name]
	b := m.buckets[name]
	if b == nil {
		b = &bucket{left: spec.Size, at: t}
		m.buckets[name] = b
	}
	if dt := (t - b.at).Seconds(); dt > 0 {
		b.left = min(spec.Size, b.left+dt*spec.Refill)
		b.at = t
	}
	if b.left < 1 {
		return false
	}
	b.left--
	return true
}

type event struct {
	at   time.Duration
	node int
}

type events []event

func (e events) Len() int           { return len(e) }
func (e events) Less(i, j int) bool { return e[i].at < e[j].at }
func (e events) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)        { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}
