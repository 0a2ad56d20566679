package ec2

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// scriptedCreates answers each Create call's attempts from a script, and
// asks the call's retryer (with the gate's option applied, as the SDK's
// retry middleware does) whether to make the next attempt.
type scriptedCreates struct {
	API
	attempts map[string]func(attempt int) error // by client token
}

func (s scriptedCreates) CreateNetworkInterface(ctx context.Context, in *ec2.CreateNetworkInterfaceInput, opts ...func(*ec2.Options)) (*ec2.CreateNetworkInterfaceOutput, error) {
	o := ec2.Options{Retryer: retry.NewStandard()}
	for _, fn := range opts {
		fn(&o)
	}
	script := s.attempts[*in.ClientToken]
	for attempt := 1; ; attempt++ {
		err := script(attempt)
		if err == nil {
			return &ec2.CreateNetworkInterfaceOutput{}, nil
		}
		if !o.Retryer.IsErrorRetryable(err) || attempt == 3 {
			return nil, err
		}
	}
}

func throttleErr() error { return &smithy.GenericAPIError{Code: "RequestLimitExceeded"} }

// internalErr is a 5xx after which EC2 may have created the ENI.
func internalErr() error {
	return &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: http.StatusInternalServerError}},
		Err:      &smithy.GenericAPIError{Code: "InternalError"},
	}
}

// TestThrottleGateKeepsAnUnknownAttempt: a batch's Create whose first
// attempt got a 5xx (EC2 may have created the ENI: the reply was lost) and
// whose next attempt met the throttle another Create owns is not retried
// by the gate, and ends with the throttle. That answer is not a refusal:
// the pending record must stay for the next pass to find the ENI (a
// dropped one leaves it available, tagged, until the next boot's sweep).
// The owner's call, retried into a lasting throttle after such a 5xx,
// likewise.
func TestThrottleGateKeepsAnUnknownAttempt(t *testing.T) {
	g := newThrottleGate()
	ownerThrottled := make(chan struct{})
	var once sync.Once
	api := scriptedCreates{attempts: map[string]func(int) error{
		"owner": func(attempt int) error {
			if attempt == 1 {
				return internalErr()
			}
			once.Do(func() { close(ownerThrottled) })
			return throttleErr()
		},
		"other": func(attempt int) error {
			if attempt == 1 {
				return internalErr()
			}
			<-ownerThrottled // the owner holds the gate: this throttle is not retried
			return throttleErr()
		},
	}}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, token := range []string{"owner", "other"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = g.create(context.Background(), api, &ec2.CreateNetworkInterfaceInput{ClientToken: &token}, i)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil || !isThrottle(err) {
			t.Fatalf("call %d: %v, want the throttle", i, err)
		}
		if refusal(err) {
			t.Errorf("call %d: %v taken for a refusal after an attempt EC2 may have carried out", i, err)
		}
	}

	// A throttle with no unknown attempt before it stays a refusal.
	g = newThrottleGate()
	api.attempts["plain"] = func(int) error { return throttleErr() }
	token := "plain"
	if _, err := g.create(context.Background(), api, &ec2.CreateNetworkInterfaceInput{ClientToken: &token}, 0); !refusal(err) {
		t.Errorf("a plain throttle: %v, want a refusal", err)
	}
}
