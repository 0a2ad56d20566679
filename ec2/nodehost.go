package ec2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/atomicfile"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/lockfile"
	"github.com/eni-cni/eni-cni/netsetup"
	"github.com/eni-cni/eni-cni/netsetup/connmark"
)

// NodeHost is the node side of warm (the Warmer's Host): it sets up the
// ENIs warm attaches and re-asserts, every pass, each ENI's link and table
// and each pod's rules, and the primary ENI's connection marking
// (netsetup/connmark: NodePort to pods on secondary ENIs).
type NodeHost struct {
	MTU        int
	SNAT       bool
	VethPrefix string // the pods' host veth prefix, for the marking
	// MarkSeen is the file, in the state directory, that remembers the
	// witness of the marking's last look that found it intact, so that a
	// pass on unchanged tables runs no iptables ("": no memory).
	MarkSeen string
	// StateDir holds the marking's lock (connmark.LockName).
	StateDir string
}

func (h NodeHost) link(e section.ENI) netsetup.ENILink {
	return netsetup.ENILink{MAC: e.MAC, MTU: h.MTU, Table: e.Table(), SubnetCIDR: e.SubnetCIDR, Gateway: e.Gateway(), Address: e.PrimaryIP}
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
			// The primary ENI's link is the node's own: its owner sets it
			// up. The marking that keeps NodePort replies on it is ours.
			missing, made, fresh, err := h.nodePort(e)
			rep.Missing = append(rep.Missing, missing...)
			if fresh {
				rep.SetUp = append(rep.SetUp, made...)
			} else {
				rep.Repaired = append(rep.Repaired, made...)
			}
			if err != nil {
				errs = append(errs, err)
			}
			continue
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
		if a.IP6.IsValid() {
			// The primary ENI's /80: the main table's, no ENI table.
			rules = append(rules, netsetup.PodRules{IP: a.IP6})
		}
	}
	r, err := netsetup.ReassertPodRules(rules)
	rep.Repaired = append(rep.Repaired, r...)
	return rep, errors.Join(append(errs, err)...)
}

// maxSeen bounds what is read of MarkSeen; a witness is ~250 bytes.
const maxSeen = 4096

// readSeen returns the witness remembered in path, or "" when there is none
// that only this user could have written.
func readSeen(path string) string {
	if path == "" {
		return ""
	}
	f, err := lockfile.Open(path, os.O_RDONLY)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSeen))
	if err != nil {
		return ""
	}
	return string(b)
}

// writeSeen remembers the witness in path, mode 0600 (readSeen trusts
// nothing else), without fsyncs: on iptables-nft nodes kube-proxy's commits
// change the witness almost every pass, and a witness lost in a power cut
// costs one listing of the table. w carries a test's CreateTemp.
func writeSeen(w atomicfile.Writer, path, witness string) error {
	w.NoSync = true
	return w.WriteFile(path, []byte(witness), 0o600)
}

// nodePort keeps the primary ENI's connection marking in place. A settled
// node costs one cheap look (connmark.Intact); the full Ensure runs only
// when something is missing. fresh says none of it was on the node before
// (a new node, or one just upgraded): set up, not lost, so the pass does
// not warn an operator of a repair on every fresh install.
func (h NodeHost) nodePort(e section.ENI) (missing, made []string, fresh bool, err error) {
	spec := connmark.Spec{PrimaryMAC: e.MAC, VethPrefix: h.VethPrefix}
	seen := readSeen(h.MarkSeen)
	ok, now, err := connmark.IntactSince(spec, seen)
	if ok && err == nil {
		if now != seen && h.MarkSeen != "" {
			// Best effort: without it the next pass lists the table.
			_ = writeSeen(atomicfile.Writer{}, h.MarkSeen, now)
		}
		return nil, nil, false, nil
	}
	var changed []string
	if err == nil {
		present, perr := connmark.Present()
		fresh = perr == nil && !present
		changed, err = connmark.Ensure(h.StateDir, spec)
	}
	switch {
	case errors.Is(err, connmark.ErrNoLink):
		return []string{fmt.Sprintf("%s (%s)", e.ID, e.MAC)}, nil, false, nil
	case err != nil:
		return nil, nil, false, fmt.Errorf("nodeport marking on %s: %w", e.ID, err)
	case len(changed) > 0:
		return nil, []string{"nodeport: " + strings.Join(changed, ", ")}, fresh, nil
	}
	return nil, nil, false, nil
}
