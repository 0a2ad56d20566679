package ec2

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/netsetup"
)

// NodeHost is the node side of warm (the Warmer's Host): it sets up the
// ENIs warm attaches and re-asserts, every pass, each ENI's link and table
// and each pod's rules.
type NodeHost struct {
	MTU  int
	SNAT bool
}

func (h NodeHost) link(e section.ENI) netsetup.ENILink {
	return netsetup.ENILink{MAC: e.MAC, MTU: h.MTU, Table: e.Table(), SubnetCIDR: e.SubnetCIDR, Gateway: e.Gateway()}
}

// SetupENI waits for a newly attached ENI's link and sets up its table.
func (h NodeHost) SetupENI(ctx context.Context, e section.ENI) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return netsetup.WaitENI(ctx, h.link(e))
}

// Reassert puts back what the node lost. An ENI whose link is missing (not
// yet appeared, or detached) is reported, and the rest still done.
func (h NodeHost) Reassert(_ context.Context, enis []section.ENI, pods []alloc.Allocation) (HostReport, error) {
	var rep HostReport
	var errs []error
	byID := map[string]section.ENI{}
	for _, e := range enis {
		byID[e.ID] = e
		if e.Table() == 0 {
			continue // the primary ENI is the node's own: its owner sets it up
		}
		r, err := netsetup.ReassertENI(h.link(e))
		switch {
		case errors.Is(err, netsetup.ErrNoLink):
			rep.Missing = append(rep.Missing, fmt.Sprintf("%s (%s)", e.ID, e.MAC))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s (%s): %w", e.ID, e.MAC, err))
		case r != "":
			rep.Repaired = append(rep.Repaired, r)
		}
	}
	rules := make([]netsetup.PodRules, 0, len(pods))
	for _, a := range pods {
		pr := netsetup.PodRules{IP: a.IP}
		if e, ok := byID[a.ENI]; ok && e.Table() != 0 {
			pr.Table = e.Table()
			if h.SNAT {
				pr.FromDsts = e.VPCCIDRs
			}
		}
		rules = append(rules, pr)
	}
	r, err := netsetup.ReassertPodRules(rules)
	rep.Repaired = append(rep.Repaired, r...)
	return rep, errors.Join(append(errs, err)...)
}
