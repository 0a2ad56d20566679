package ec2

import (
	"context"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go/middleware"
)

// CallCounter counts EC2 API operations and their failures by API name,
// for the metrics file. One operation is counted once, whatever the SDK's
// retries did.
type CallCounter struct {
	mu     sync.Mutex
	calls  map[string]uint64
	errors map[string]uint64
}

// NewCallCounter returns an empty counter.
func NewCallCounter() *CallCounter {
	return &CallCounter{calls: map[string]uint64{}, errors: map[string]uint64{}}
}

// Option installs the counter on an EC2 client (an option of NewAPI).
func (c *CallCounter) Option() func(*ec2.Options) {
	return func(o *ec2.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("eni-cni-call-counter",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					out, md, err := next.HandleInitialize(ctx, in)
					c.record(awsmiddleware.GetOperationName(ctx), err)
					return out, md, err
				}), middleware.After)
		})
	}
}

func (c *CallCounter) record(op string, err error) {
	if op == "" {
		op = "unknown"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[op]++
	if err != nil {
		c.errors[op]++
	}
}

// Counts returns calls and errors by API.
func (c *CallCounter) Counts() (calls, errors map[string]uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls, errors = make(map[string]uint64, len(c.calls)), make(map[string]uint64, len(c.errors))
	for k, v := range c.calls {
		calls[k] = v
	}
	for k, v := range c.errors {
		errors[k] = v
	}
	return calls, errors
}
