package ec2

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
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
}

func (r throttleRetryer) RetryDelay(attempt int, err error) (time.Duration, error) {
	if isThrottle(err) {
		return r.b.delay(attempt, r.rnd), nil
	}
	return r.RetryerV2.RetryDelay(attempt, err)
}

func (r throttleRetryer) GetRetryToken(ctx context.Context, err error) (func(error) error, error) {
	if isThrottle(err) {
		return func(error) error { return nil }, nil
	}
	return r.RetryerV2.GetRetryToken(ctx, err)
}
