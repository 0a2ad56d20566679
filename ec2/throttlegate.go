package ec2

import (
	"context"
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
type throttleGate struct {
	owner atomic.Int32 // 1 + the index of the call that may retry; 0: none yet
	once  sync.Once
	done  chan struct{} // closed when the owner's call has ended
	ok    bool          // the owner's call succeeded; set before done closes
}

func newThrottleGate() *throttleGate { return &throttleGate{done: make(chan struct{})} }

// create makes the batch's i-th Create call through the gate.
func (g *throttleGate) create(ctx context.Context, api API, in *ec2.CreateNetworkInterfaceInput, i int) (*ec2.CreateNetworkInterfaceOutput, error) {
	id := int32(i) + 1
	out, err := api.CreateNetworkInterface(ctx, in, g.option(id))
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
	return api.CreateNetworkInterface(ctx, in, g.option(id))
}

// option gives the call the gated retryer.
func (g *throttleGate) option(id int32) func(*ec2.Options) {
	return func(o *ec2.Options) {
		if base, ok := o.Retryer.(aws.RetryerV2); ok {
			o.Retryer = gatedRetryer{RetryerV2: base, gate: g, id: id}
		}
	}
}

// gatedRetryer retries a throttled attempt only for the gate's owner (the
// first call to meet the throttle becomes it).
type gatedRetryer struct {
	aws.RetryerV2
	gate *throttleGate
	id   int32
}

func (r gatedRetryer) IsErrorRetryable(err error) bool {
	if isThrottle(err) && !r.gate.owner.CompareAndSwap(0, r.id) && r.gate.owner.Load() != r.id {
		return false
	}
	return r.RetryerV2.IsErrorRetryable(err)
}
