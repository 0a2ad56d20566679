package ec2

import (
	"context"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// Backoff is how warm's EC2 client waits before it retries a call EC2
// throttled. EC2 throttles per account (token buckets shared by every node
// of the account and region), so a throttle says the fleet, not this node,
// is asking too much: the wait grows exponentially from Base to Cap, and is
// drawn at random from its upper half, so that a thousand nodes throttled
// in the same second spread their retries instead of meeting the empty
// bucket again together. Base is above the slowest refill of an EC2 bucket
// (one token per 200 ms): a retry sooner could not find a new token.
type Backoff struct {
	Base, Cap time.Duration
}

// DefaultBackoff: 1 s, 2 s, 4 s, ... up to 20 s between attempts, at most
// throttleAttempts attempts (about half a minute) per call; the pass's
// deadline and the next pass take over from there.
var DefaultBackoff = Backoff{Base: time.Second, Cap: 20 * time.Second}

// throttleAttempts bounds the attempts of one call, throttled or not.
const throttleAttempts = 6

// delay is the wait before attempt+1 after a throttle.
func (b Backoff) delay(attempt int, rnd func() float64) time.Duration {
	d := b.Cap
	if attempt < 30 {
		d = min(b.Cap, b.Base<<max(attempt-1, 0))
	}
	return d/2 + time.Duration(rnd()*float64(d/2))
}

// NewRetryer is the retry policy of warm's EC2 client: the SDK's standard
// retryer (6 attempts) with throttles waited out by b. A throttled attempt
// does not spend the client's retry quota: the back-off already paces it,
// and a spent quota would end the call early, leaving the pass to start
// over with a fresh call.
func NewRetryer(b Backoff) aws.RetryerV2 {
	std := retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxAttempts = throttleAttempts
		so.MaxBackoff = 5 * time.Second
	})
	return throttleRetryer{RetryerV2: std, b: b, rnd: rand.Float64}
}

type throttleRetryer struct {
	aws.RetryerV2
	b   Backoff
	rnd func() float64
	// pace, when set, scales each delay by the pace at that moment, not
	// at the call's start: a node whose ENI was just recorded yields
	// harder from its next attempt on.
	pace *pace
}

func (r throttleRetryer) RetryDelay(attempt int, err error) (time.Duration, error) {
	if isThrottle(err) {
		b := r.b
		if r.pace != nil {
			b = r.pace.scale(b)
		}
		return b.delay(attempt, r.rnd), nil
	}
	return r.RetryerV2.RetryDelay(attempt, err)
}

func (r throttleRetryer) GetRetryToken(ctx context.Context, err error) (func(error) error, error) {
	if isThrottle(err) {
		return func(error) error { return nil }, nil
	}
	return r.RetryerV2.GetRetryToken(ctx, err)
}

// pace scales the back-off of a pass's throttled calls by what its node
// already has, so that under one throttled bucket the nodes whose pods
// wait, and those with the least, get the tokens first and the rest
// yield: each retry that meets a refilled bucket takes its token, and a
// node retrying twice as often takes about twice as many. The unscaled
// back-off favoured the opposite: each attempt of a call waits longer
// than the last, so a node that had been throttled longest retried
// least, and a fleet finished its nodes in the order of their luck (p99
// node 1.6-1.8 times the p50). A pace is the factor's bits (float64), set
// by the pass as it goes; 0 means 1.
type pace struct{ bits atomic.Uint64 }

// Pace factors. A node whose waiting pods outnumber its free addresses
// retries 4 times as often as the unscaled back-off; any other node's
// back-off starts 1+s times as late for the share s of its target it
// holds (1.4 with the primary ENI's 14 of 35 addresses), and from about
// 60 % on the node yields much harder: paceSpread^(2s-1), 3.5 with its
// first ENI (28 of 35), up to paceSpread with all but a part; only the start of its back-off grows
// (the 20 s cap kept, so a call still gives up within two minutes and a
// yielding node leaves a refilled bucket unused for at most 20 s at the
// end of a burst), and the pause between its throttled passes doubles
// (paceOfPause). The earlier rule, 1 to 2 from nothing to all, set once a
// call, ordered nothing once calls reached the cap and the pass's pause,
// where most attempts are made: a node with its first ENI and one without
// retried about as often, and a fleet finished second ENIs among others'
// first (p99 node 1.55-1.6 times the p50 with minimumIPTarget 35). A floor
// below 1 for the nodes with least (0.3: the primary ENI's addresses
// alone retried at 0.66, its cap shrunk) ordered a fleet better still,
// but its fresh nodes then fought the starved ones for the Assign bucket
// and a third more ADDs failed in the defaults.
//
// Two more tell a node whose pods wait from one that nobody waits on,
// because under one bucket the first steals the second's tokens:
//
//   - paceFresh: a node that holds nothing, was never filled in this boot
//     and has no ADD waiting is NotReady (readyWhenFilled): its first
//     call is what admits it, and with it 30 more pods that will need the
//     same bucket. It starts its back-off 16 times as late (the 20 s cap
//     kept: a longer one left the last nodes of a fleet asleep past a
//     refilled bucket, 5-8 % on the last pod), so that the nodes already
//     serving pods get the tokens first. Not with minimumIPTarget: such a
//     node fills what its pods need before it is Ready, its admission
//     brings no more calls to yield for, and yielding only stretched a
//     fleet's tail (prefix delegation with minimumIPTarget: last pod
//     200 s against 195 s, the bound 180 s). Before, 1,000 fresh nodes'
//     early retries took about half of the Assign bucket from 15-30
//     starved ones, and the unluckiest of those waited 150-300 s.
//   - paceAged: a node that was filled in this boot (it was Ready, and
//     its pods were sent to it) and whose oldest waiting ADD has waited
//     longer than agedAfter retries the more often the longer it waits:
//     ¼·agedAfter/age, down to paceAgedFloor, and so does the pause
//     between its throttled passes. A throttled bucket is a lottery drawn
//     at every token: at a fixed pace a node's wait is memoryless, and in
//     a fleet of a thousand a few always lose for longer than an ADD may
//     wait. Aging makes the lottery favour the longest waiter. A node
//     never filled (its pods came at boot, a runtime without the
//     readiness gate) does not age: there every node waits, aging would
//     raise every node's rate together, ordering nothing, a retry storm
//     (7 times the throttled attempts in the ungated fleet).
const (
	paceWaiting = 0.25
	paceSpread  = 8
	paceFresh   = 16
	// paceAgedFloor is the pause's floor too (section.MinPausePace):
	// an aged node's pause shrinks with its pace (paceOfPause), and a
	// lower floor here would be clamped there.
	paceAgedFloor = section.MinPausePace
	agedAfter     = 10 * time.Second
	// admittedWithin is how soon after the pool was filled an ADD must
	// have begun to wait for its wait to age the pace: the scheduler
	// sends a node its pods within seconds of Ready, and kubelet retries
	// an ADD that waited its 110 s about 10 s later, which must age too
	// (with a one-minute window, those retries were the last failed ADDs
	// of the 1,000-node rush).
	admittedWithin = 3 * time.Minute
)

// paceOf is the factor of a node holding have addresses, lacking need,
// with more ADDs waiting than free addresses (starved) or not.
func paceOf(have, need int, starved bool) float64 {
	if starved {
		return paceWaiting
	}
	if have+need <= 0 {
		return 1
	}
	s := float64(have) / float64(have+need)
	return max(1+s, math.Pow(paceSpread, 2*s-1))
}

// paceAged is the factor of a starved node filled in this boot whose
// oldest waiting ADD has waited age.
func paceAged(age time.Duration) float64 {
	if age <= agedAfter {
		return paceWaiting
	}
	return max(paceAgedFloor, paceWaiting*float64(agedAfter)/float64(age))
}

// paceOfPause is what a throttled pass at pace f records for the pause
// before the next pass (section.PassOutcome.Pace): the ADDs' pause and
// STATUS's for a node never filled scale with it, 1 to 2 times (so at
// most a minute), so that between passes, too, a node with more comes
// back later. Never shorter but for an aged node (paceAged), whose pause
// shrinks with its pace, from ¼ at 10 s of waiting (a step from 1: the
// pause, not the retries, is where a starved node spends most of its
// time, and a pause of 4f instead left the longest waiters of a
// 200-node fleet past their 110 s: 9 and 65 failed ADDs against 0): the
// pause after each throttled pass is what keeps a node's waiting ADDs
// from starting a pass into the empty bucket every few seconds, which
// only the longest waiters may do, about once a second at most
// (section's minPause).
func paceOfPause(f float64) float64 {
	if f < paceWaiting {
		return f
	}
	return min(2, max(1, f))
}

func (p *pace) set(f float64) { p.bits.Store(math.Float64bits(f)) }

func (p *pace) factor() float64 {
	if f := math.Float64frombits(p.bits.Load()); f > 0 {
		return f
	}
	return 1
}

// scale is b at the pace's factor now.
func (p *pace) scale(b Backoff) Backoff {
	f := p.factor()
	b.Base = time.Duration(float64(b.Base) * f)
	if f < 1 {
		// A yielding call keeps the cap: its attempts, each at most
		// 20 s apart, still give up within two minutes, and the pass
		// with them.
		b.Cap = time.Duration(float64(b.Cap) * f)
	}
	return b
}

// option scales the call's throttle back-off by the pace, attempt by
// attempt. It must come before any option that wraps the retryer
// (throttleGate's).
func (p *pace) option(o *ec2.Options) {
	if r, ok := o.Retryer.(throttleRetryer); ok {
		r.pace = p
		o.Retryer = r
	}
}

// pacedAPI is the pass's API: its calls that draw on the mutating
// buckets back off by the pass's pace.
type pacedAPI struct {
	API
	pace *pace
}

func (a pacedAPI) opts(opts []func(*ec2.Options)) []func(*ec2.Options) {
	return append([]func(*ec2.Options){a.pace.option}, opts...)
}

func (a pacedAPI) AssignPrivateIpAddresses(ctx context.Context, in *ec2.AssignPrivateIpAddressesInput, opts ...func(*ec2.Options)) (*ec2.AssignPrivateIpAddressesOutput, error) {
	return a.API.AssignPrivateIpAddresses(ctx, in, a.opts(opts)...)
}

func (a pacedAPI) CreateNetworkInterface(ctx context.Context, in *ec2.CreateNetworkInterfaceInput, opts ...func(*ec2.Options)) (*ec2.CreateNetworkInterfaceOutput, error) {
	return a.API.CreateNetworkInterface(ctx, in, a.opts(opts)...)
}

func (a pacedAPI) AttachNetworkInterface(ctx context.Context, in *ec2.AttachNetworkInterfaceInput, opts ...func(*ec2.Options)) (*ec2.AttachNetworkInterfaceOutput, error) {
	return a.API.AttachNetworkInterface(ctx, in, a.opts(opts)...)
}

func (a pacedAPI) ModifyNetworkInterfaceAttribute(ctx context.Context, in *ec2.ModifyNetworkInterfaceAttributeInput, opts ...func(*ec2.Options)) (*ec2.ModifyNetworkInterfaceAttributeOutput, error) {
	return a.API.ModifyNetworkInterfaceAttribute(ctx, in, a.opts(opts)...)
}
