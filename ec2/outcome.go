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
	w.pacePause(&o)
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

// Failed records, for ADDs waiting on a dry pool and for STATUS, a pass
// that could not start (IMDS unreadable).
func (w *Warmer) Failed(ctx context.Context, passErr error) error {
	return errors.Join(w.recordGrowth(ctx, false, passErr), w.recordOutcome(ctx, false, passErr))
}

// pacePause records, in a throttled pass's outcome, the pace the pause
// before the next pass follows (paceOfPause).
func (w *Warmer) pacePause(o *section.PassOutcome) {
	if o.Result == section.PassThrottled {
		o.Pace = paceOfPause(w.pace.factor())
	}
}

// recordGrowth saves how the pass's attempt to grow the pool ended (err:
// the failure that stopped it before the pool reached its targets), for
// STATUS with readyWhenFilled: the boot is filled when it reached them, or as far as the
// instance's limits go (short), and Growth changes when its result does.
// An unchanged outcome is not saved again: a settled node's passes, and a
// timer's pass failing the same way every minute, write nothing.
func (w *Warmer) recordGrowth(ctx context.Context, short bool, err error) error {
	if !w.Cfg.ReadyWhenFilled {
		return nil // nobody reads it
	}
	o := section.PassOutcome{At: w.now().UTC(), Result: classify(short, err), Boot: w.Mgr.BootID}
	w.pacePause(&o)
	if err != nil {
		o.Message = section.TruncateOutcome(err.Error())
	}
	return w.update(context.WithoutCancel(ctx), func(_ *alloc.State, src *section.EC2) error {
		if err == nil {
			src.MarkFilled(w.Mgr.BootID, o.At)
		}
		g := src.Growth
		if g != nil && g.Boot == o.Boot && g.Result == o.Result && o.Result != section.PassThrottled {
			return nil
		}
		if o.Result == section.PassThrottled && g != nil && g.Boot == o.Boot && g.Result == section.PassThrottled {
			o.Streak = g.Streak + 1
		} else if o.Result == section.PassThrottled {
			o.Streak = 1
		}
		src.Growth = &o
		return nil
	})
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
	if errors.Is(err, ErrSubnetsFull) {
		return section.PassSubnetFull
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
