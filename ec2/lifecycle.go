package ec2

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// ENI lifecycle. Create → Attach → record is not atomic: a pass can be
// killed, or lose a reply, in between. So a pending record is saved before
// the Create call (and completed with the ENI's ID once EC2 answers), the
// ENI is tagged with the instance's ID and its creation time, and each pass
//   - settles pending records: an ENI attached to this instance has been
//     learnt by resync; one that is not is deleted, unless its attach was
//     throttled (kept for the fill to attach, for keptFor);
//   - looks for leaked ENIs (available, tagged with this instance's ID,
//     older than leakAge) when a pending record has no ID, after an ENI
//     eni-cni created was detached behind its back, and once per boot,
//     rate-limited to once per sweepEvery; and deletes them;
//   - retries DeleteOnTermination on the ENIs it attached until EC2 has
//     set it, so none outlives the instance.

const (
	// leakAge is how old an available ENI tagged with this instance must be
	// before a sweep deletes it: younger ones may belong to a pass that is
	// still running on the way to attaching them.
	leakAge = 5 * time.Minute
	// sweepEvery rate-limits the search for leaked ENIs.
	sweepEvery = 5 * time.Minute
	// cleanupTimeout bounds each cleanup call on its own: a pass that fails
	// at its deadline must still be able to delete what it created.
	cleanupTimeout = 30 * time.Second
	// keptFor is how long an ENI whose attach EC2 throttled is kept for
	// a later pass to attach: past it, a pool that has not needed it does
	// not, and it is deleted.
	keptFor = 30 * time.Minute
)

// settleENIs runs the lifecycle work above.
func (w *Warmer) settleENIs(ctx context.Context) error {
	v, err := w.snapshot(ctx)
	if err != nil {
		return err
	}
	var errs []error
	sweepView := v // what the sweep reads, unless settling changes it
	for _, p := range v.src.Pending {
		if p.ID != "" {
			errs = append(errs, w.settlePending(ctx, v.src, p))
			sweepView = nil
		}
	}
	errs = append(errs, w.sweepLeaks(ctx, sweepView))
	for _, e := range v.src.ENIs {
		if e.Created && !e.DeleteOnTermination && e.AttachmentID != "" {
			errs = append(errs, w.setDeleteOnTermination(ctx, e))
		}
	}
	return errors.Join(errs...)
}

// settlePending finishes the record of an ENI whose creation a pass did
// not finish. Resync ran before (pending records trigger it): if the ENI
// is attached here it is in the store now; otherwise it is deleted.
func (w *Warmer) settlePending(ctx context.Context, src *section.EC2, p section.PendingENI) error {
	_, attachedHere := src.ENI(p.ID)
	if p.Unattached != nil && !attachedHere && !section.Elapsed(w.now(), p.Since, keptFor) {
		return nil
	}
	if !attachedHere {
		if err := w.deleteENI(ctx, p.ID); err != nil {
			return fmt.Errorf("delete %s, created by an unfinished pass: %w", p.ID, err)
		}
		w.say("deleted %s: created by a pass that did not attach it", p.ID)
	}
	return w.dropPending(ctx, p.Token)
}

// deleteENI deletes an ENI with its own timeout; one already gone is fine.
func (w *Warmer) deleteENI(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, err := w.API.DeleteNetworkInterface(ctx, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(id)})
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "InvalidNetworkInterfaceID.NotFound" {
		return nil
	}
	return err
}

func (w *Warmer) dropPending(ctx context.Context, token string) error {
	return w.update(context.WithoutCancel(ctx), func(_ *alloc.State, src *section.EC2) error {
		src.Pending = slices.DeleteFunc(src.Pending, func(p section.PendingENI) bool { return p.Token == token })
		if len(src.Pending) == 0 {
			src.Pending = nil
		}
		return nil
	})
}

// sweepLeaks deletes available ENIs tagged with this instance's ID that
// are older than leakAge. It runs when a pending record has no ENI ID (the
// Create reply was lost or not saved), when owed (an ENI eni-cni created
// was detached, or the last sweep left a leak behind) and once per boot,
// at most once per sweepEvery. Only the once-a-boot sweep waits for the
// node's window of the hour when spreading (spread.go): the others delete
// a leak known to be there, and a retry every sweepEvery would always
// miss a window as long as sweepEvery. A pending record without ID is
// dropped once a sweep has found nothing younger than leakAge that could
// still be it.
//
// v is the store as the caller just read it, if nothing has changed what
// the sweep looks at since (only warm writes Pending and the sweep's
// records, and one pass runs at a time); nil to read it again.
func (w *Warmer) sweepLeaks(ctx context.Context, v *view) error {
	if v == nil {
		var err error
		if v, err = w.snapshot(ctx); err != nil {
			return err
		}
	}
	src, now := v.src, w.now()
	unknown := slices.ContainsFunc(src.Pending, func(p section.PendingENI) bool { return p.ID == "" })
	due := unknown || src.SweepOwed || (src.SweptBoot != w.Mgr.BootID && w.sweepWindow(src))
	if !due || !section.Elapsed(now, src.LastSweep, sweepEvery) || src.InstanceID == "" {
		return nil
	}
	var leaked []types.NetworkInterface
	err := describeENIs(ctx, w.API, &ec2.DescribeNetworkInterfacesInput{Filters: []types.Filter{
		{Name: aws.String("tag:" + TagInstanceID), Values: []string{src.InstanceID}},
		{Name: aws.String("status"), Values: []string{string(types.NetworkInterfaceStatusAvailable)}},
	}}, func(ni *types.NetworkInterface) error { leaked = append(leaked, *ni); return nil })
	if err != nil {
		return fmt.Errorf("look for leaked ENIs of %s: %w", src.InstanceID, err)
	}
	young := false
	var errs []error
	for _, ni := range leaked {
		id := aws.ToString(ni.NetworkInterfaceId)
		if slices.ContainsFunc(src.Pending, func(p section.PendingENI) bool { return p.ID == id && p.Unattached != nil }) {
			continue // kept for the fill to attach; settlePending deletes it if never needed
		}
		// A tag more than leakAge in the future is from before the
		// clock went back, not from a pass still on its way to attach.
		if created, ok := createdAt(ni.TagSet); ok && !section.Elapsed(now, created, leakAge) {
			young = true
			continue
		}
		if err := w.deleteENI(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("delete leaked %s: %w", id, err))
			continue
		}
		w.say("deleted leaked %s (available, tagged with this instance)", id)
	}
	err = w.update(context.WithoutCancel(ctx), func(_ *alloc.State, src *section.EC2) error {
		src.LastSweep = now.UTC()
		src.SweepOwed = young || len(errs) > 0
		if !src.SweepOwed {
			// Done for this boot; a young or undeletable one is looked
			// at again after sweepEvery.
			src.SweptBoot = w.Mgr.BootID
			src.Pending = slices.DeleteFunc(src.Pending, func(p section.PendingENI) bool { return p.ID == "" && section.Elapsed(now, p.Since, leakAge) })
			if len(src.Pending) == 0 {
				src.Pending = nil
			}
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}

// createdAt reads the creation time eni-cni tags its ENIs with.
func createdAt(tags []types.Tag) (time.Time, bool) {
	for _, t := range tags {
		if aws.ToString(t.Key) == TagCreatedAt {
			ts, err := time.Parse(time.RFC3339, aws.ToString(t.Value))
			return ts, err == nil
		}
	}
	return time.Time{}, false
}

// setDeleteOnTermination asks EC2 to delete the ENI with the instance, and
// records it once EC2 has; until then every pass tries again.
func (w *Warmer) setDeleteOnTermination(ctx context.Context, e section.ENI) error {
	_, err := w.API.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{
		NetworkInterfaceId: aws.String(e.ID),
		Attachment: &types.NetworkInterfaceAttachmentChanges{
			AttachmentId: aws.String(e.AttachmentID), DeleteOnTermination: aws.Bool(true),
		},
	})
	if err != nil {
		return fmt.Errorf("set DeleteOnTermination on %s (retried next pass; until then it would outlive the instance): %w", e.ID, err)
	}
	return w.update(context.WithoutCancel(ctx), func(_ *alloc.State, src *section.EC2) error {
		for i := range src.ENIs {
			if src.ENIs[i].ID == e.ID {
				src.ENIs[i].DeleteOnTermination = true
			}
		}
		return nil
	})
}

// newToken is the idempotency token of a Create call and the key of its
// pending record.
func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "eni-cni-" + hex.EncodeToString(b)
}
