package ec2

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// markStarted records that a pass with ADDs waiting for it has begun, so
// they do not start another meanwhile. Nothing is written when nobody
// waits: a quiet node's passes write nothing.
func (w *Warmer) markStarted(ctx context.Context) error {
	return w.mgrUpdate(ctx, func(st *alloc.State) (bool, error) {
		if st.Waiting(w.now()) == 0 {
			return false, nil
		}
		src := sectionOf(st)
		src.PassStartedAt, src.PassPID = w.now().UTC(), os.Getpid()
		return true, nil
	})
}

// recordOutcome saves how the pass ended and wakes waiting ADDs. It saves
// only when ADDs wait for it (or waited when it began): a pass that nobody
// waits for writes nothing it would not have written anyway, so a failed
// timer pass leaves the store as it was.
func (w *Warmer) recordOutcome(ctx context.Context, short bool, passErr error) error {
	now := w.now()
	o := section.PassOutcome{At: now.UTC(), Result: classify(short, passErr)}
	if passErr != nil {
		o.Message = passErr.Error()
		o.Message = section.TruncateOutcome(o.Message)
	}
	saved := false
	// Recorded even when the pass ran out of time: waiters need it most
	// then.
	err := w.mgrUpdate(context.WithoutCancel(ctx), func(st *alloc.State) (bool, error) {
		if st.Waiting(now) == 0 && (st.EC2 == nil || st.EC2.PassStartedAt.IsZero()) {
			return false, nil
		}
		src := sectionOf(st)
		if o.Result == section.PassThrottled {
			o.Streak = 1
			if lp := src.LastPass; lp != nil && lp.Result == section.PassThrottled {
				o.Streak = lp.Streak + 1
			}
		}
		src.LastPass, src.PassStartedAt, src.PassPID, saved = &o, time.Time{}, 0, true
		return true, nil
	})
	if saved {
		w.wake()
	}
	return err
}

// Failed records, for ADDs waiting on a dry pool, a pass that could not
// start (IMDS unreadable).
func (w *Warmer) Failed(ctx context.Context, passErr error) error {
	return w.recordOutcome(ctx, false, passErr)
}

// deniedCodes are EC2's answers to a caller that may not make the call.
var deniedCodes = map[string]bool{
	"UnauthorizedOperation": true, "AccessDenied": true, "AccessDeniedException": true,
	"AuthFailure": true, "Blocked": true, "OptInRequired": true,
}

// classify names how a pass ended, from EC2's error codes (not messages).
func classify(short bool, err error) string {
	if err == nil {
		if short {
			return section.PassInstanceLimit
		}
		return section.PassDone
	}
	var quota ratelimit.QuotaExceededError
	if errors.As(err, &quota) {
		return section.PassThrottled // the SDK's retry budget ran out on throttling
	}
	var api smithy.APIError
	if !errors.As(err, &api) {
		return section.PassFailed
	}
	code := api.ErrorCode()
	if _, ok := retry.DefaultThrottleErrorCodes[code]; ok {
		return section.PassThrottled
	}
	switch {
	case deniedCodes[code]:
		return section.PassDenied
	case code == "InsufficientFreeAddressesInSubnet" || code == "InsufficientCidrBlocks":
		return section.PassSubnetFull
	case code == "AttachmentLimitExceeded" || code == "PrivateIpAddressLimitExceeded":
		return section.PassInstanceLimit
	}
	return section.PassFailed
}
