package ec2

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// throttleGate keeps a batch of concurrent CreateNetworkInterface calls
// from multiplying the calls fired into a throttle. The first call of the
// batch that EC2 throttles (the owner) is retried as the client retries
// (adaptive: slowing down); the others' throttled attempts are not
// retried by the SDK: they wait for the owner's call to end, and try once
// more (the same client token: idempotent) only if it got through. When
// it did not, they fail with their throttle (a throttled Create was not
// carried out: each drops its pending record) and the pass reports it. A
// short throttle thus costs one call's retries, a lasting one does not
// cost n calls' worth.
//
// A throttle ends a call as a refusal (nothing created) only if no
// earlier attempt of the call may have been carried out: after a 5xx or a
// lost reply, the throttle that stops the retries says nothing about the
// ENI the earlier attempt may have made, and its pending record must stay
// (errUnknownAttempt).
type throttleGate struct {
	owner atomic.Int32 // 1 + the index of the call that may retry; 0: none yet
	once  sync.Once
	done  chan struct{} // closed when the owner's call has ended
	ok    bool          // the owner's call succeeded; set before done closes
}

func newThrottleGate() *throttleGate { return &throttleGate{done: make(chan struct{})} }

// create makes the batch's i-th Create call through the gate.
func (g *throttleGate) create(ctx context.Context, api API, in *ec2.CreateNetworkInterfaceInput, i int) (*ec2.CreateNetworkInterfaceOutput, error) {
	var unknown atomic.Bool
	out, err := g.call(ctx, api, in, int32(i)+1, &unknown)
	if err != nil && unknown.Load() && refusal(err) {
		err = errors.Join(err, errUnknownAttempt)
	}
	return out, err
}

// errUnknownAttempt: an earlier attempt of a call that ended in a refusal
// may have been carried out, so the call is no refusal.
var errUnknownAttempt = errors.New("an earlier attempt may have been carried out")

func (g *throttleGate) call(ctx context.Context, api API, in *ec2.CreateNetworkInterfaceInput, id int32, unknown *atomic.Bool) (*ec2.CreateNetworkInterfaceOutput, error) {
	out, err := api.CreateNetworkInterface(ctx, in, g.option(id, unknown))
	if g.owner.Load() == id {
		g.once.Do(func() {
			g.ok = err == nil
			close(g.done)
		})
		return out, err
	}
	if err == nil || !isThrottle(err) || g.owner.Load() == 0 {
		return out, err
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		return out, err
	}
	if !g.ok {
		return out, err
	}
	return api.CreateNetworkInterface(ctx, in, g.option(id, unknown))
}

// option gives the call the gated retryer.
func (g *throttleGate) option(id int32, unknown *atomic.Bool) func(*ec2.Options) {
	return func(o *ec2.Options) {
		if base, ok := o.Retryer.(aws.RetryerV2); ok {
			o.Retryer = gatedRetryer{RetryerV2: base, gate: g, id: id, unknown: unknown}
		}
	}
}

// gatedRetryer retries a throttled attempt only for the gate's owner (the
// first call to meet the throttle becomes it).
type gatedRetryer struct {
	aws.RetryerV2
	gate    *throttleGate
	id      int32
	unknown *atomic.Bool // an attempt of the call failed without a refusal
}

func (r gatedRetryer) IsErrorRetryable(err error) bool {
	if !refusal(err) {
		r.unknown.Store(true)
	}
	if isThrottle(err) && !r.gate.owner.CompareAndSwap(0, r.id) && r.gate.owner.Load() != r.id {
		return false
	}
	return r.RetryerV2.IsErrorRetryable(err)
}
