package ec2

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/fault"
)

// ErrNoIPv6Subnet: the primary ENI's subnet has no IPv6 block, so EC2
// cannot delegate it an IPv6 prefix. The pass's outcome carries it.
var ErrNoIPv6Subnet = errors.New("the subnet has no IPv6 CIDR block")

// fill6 is the fill of a network of IPv6: one /80 prefix delegated to the
// primary ENI, as the AWS VPC CNI does, is the whole pool. It holds 2^48
// addresses, so once it is there nothing is ever asked again (one
// AssignIpv6Addresses call for the node's life), and trim never gives it
// back. A second ENI would only help if the primary ENI refused the prefix
// (its IPv6 slots taken by someone else); that is reported instead.
func (w *Warmer) fill6(ctx context.Context) (short bool, err error) {
	v, err := w.snapshot(ctx)
	if err != nil {
		return false, err
	}
	e, ok := v.src.PrimaryENI()
	if !ok {
		return false, fmt.Errorf("assign an IPv6 prefix: no primary ENI discovered")
	}
	if len(e.IPv6Prefixes) > 0 {
		return false, nil
	}
	if err := w.setDirty(ctx, true); err != nil {
		return false, err
	}
	fault.Point("warm:after-dirty-mark")
	w.flushWake()
	out, err := w.API.AssignIpv6Addresses(ctx, &ec2.AssignIpv6AddressesInput{
		NetworkInterfaceId: aws.String(e.ID), Ipv6PrefixCount: aws.Int32(1),
	})
	if err != nil {
		err = fmt.Errorf("assign an IPv6 prefix to %s: %w", e.ID, err)
		if refusal(err) {
			err = w.explainIPv6(ctx, e, err)
		}
		return isLimit(err), w.refused(ctx, err)
	}
	fault.Point("warm:after-assign-before-record")
	var prefixes []netip.Prefix
	for _, s := range out.AssignedIpv6Prefixes {
		if p, err := netip.ParsePrefix(s); err == nil && section.Delegated6(p) {
			prefixes = append(prefixes, p.Masked())
		}
	}
	if len(prefixes) == 0 {
		// The dirty mark stays: the next pass reads EC2's truth before
		// asking again.
		return false, fmt.Errorf("assign an IPv6 prefix to %s: EC2 replied %q, no IPv6 /%d", e.ID, out.AssignedIpv6Prefixes, section.IPv6PrefixLen)
	}
	if err := w.record6(ctx, e.ID, prefixes); err != nil {
		return false, err
	}
	fault.Point("warm:after-record")
	w.say("assigned IPv6 prefix %v to %s", prefixes, e.ID)
	w.recorded()
	return false, nil
}

// lacksPrefix reports whether fill6 would ask EC2 for a prefix.
func (w *Warmer) lacksPrefix(src *section.EC2) bool {
	e, ok := src.PrimaryENI()
	return w.Cfg.IPv6 && ok && len(e.IPv6Prefixes) == 0
}

// explainIPv6 names the usual cause of a refused prefix: the subnet has
// no IPv6 block (IMDS says so for free, whatever EC2's code for it).
func (w *Warmer) explainIPv6(ctx context.Context, e section.ENI, err error) error {
	if w.MD == nil || isLimit(err) {
		return err
	}
	blocks, rerr := SubnetIPv6(ctx, w.MD, e.MAC)
	if rerr != nil || len(blocks) > 0 {
		return err
	}
	return fmt.Errorf("%w: %s of %s (associate an IPv6 /64 with it for pods of IPv6): %w", ErrNoIPv6Subnet, e.SubnetID, e.ID, err)
}

// isLimit: EC2 refused for the ENI's address limit.
func isLimit(err error) bool { return classify(false, err) == section.PassInstanceLimit }

// record6 records the prefixes EC2 delegated to eniID.
func (w *Warmer) record6(ctx context.Context, eniID string, prefixes []netip.Prefix) error {
	// EC2 has made the change: record it even if the pass's time is up.
	return w.update(context.WithoutCancel(ctx), func(_ *alloc.State, src *section.EC2) error {
		if _, ok := src.ENI(eniID); !ok {
			return fmt.Errorf("record IPv6 prefixes of %s: ENI not in the store", eniID)
		}
		src.AddIPv6Prefixes(eniID, section.OriginAssigned, prefixes, w.now())
		return nil
	})
}
