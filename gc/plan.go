package gc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// ErrEmptyListing is the planner's refusal to free old allocations because
// the live set is empty. A wrong socket or a runtime that lost its state
// looks exactly like "no pods"; believing it freed every IP on a node in
// aws-vpc-cni. Only Options.Force overrides it.
var ErrEmptyListing = errors.New("empty listing")

// Attachment is one allocation as the store records it. The JSON names
// match `eni-cni list --json`.
type Attachment struct {
	Network      string     `json:"network"`
	ContainerID  string     `json:"containerID"`
	IfName       string     `json:"ifname"`
	IP           netip.Addr `json:"ip"`
	PodNamespace string     `json:"podNamespace,omitempty"`
	PodName      string     `json:"podName,omitempty"`
	PodUID       string     `json:"podUID,omitempty"`
	AllocatedAt  time.Time  `json:"allocatedAt"`
}

// ValidAttachment is one entry of the CNI GC verb's cni.dev/valid-attachments.
type ValidAttachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

// Options tune the planner.
type Options struct {
	// Grace: attachments younger than this are never freed. An attachment
	// exactly Grace old is old enough (age >= Grace is collectable).
	Grace time.Duration
	// Force frees old attachments even when the live set is empty.
	Force bool
	// RefuseEmpty enables the ErrEmptyListing refusal. True for the CRI
	// path; false for the CNI GC verb, where the runtime telling us "no valid
	// attachments" is a legitimate answer.
	RefuseEmpty bool
}

// Liveness is a set of live things to judge attachments against. Build one
// with FromSandboxes, QueryRuntime or FromValidAttachments.
type Liveness interface {
	covers(Attachment) bool // false: not ours to judge (another network), left untouched
	alive(Attachment) bool
	empty() bool
	deadReason() string // why a not-alive attachment is freed
	emptyText() string  // what an empty live set means, for the refusal
	warnings() []string
}

// Dead is an attachment to free.
type Dead struct {
	Attachment
	Reason string
	Age    time.Duration // at planning time
}

// Young is an attachment not found alive but kept because it is younger
// than the grace: its sandbox may still be being created.
type Young struct {
	Attachment
	Age  time.Duration
	Left time.Duration // until it becomes collectable
}

// Plan is what to do. Callers free exactly Free, and nothing if Refused is
// set (Free is then empty anyway).
type Plan struct {
	Free     []Dead
	Young    []Young
	Alive    []Attachment
	Other    int // attachments the live set does not cover (other networks)
	Warnings []string
	Refused  error // wraps ErrEmptyListing
}

// MakePlan decides which attachments to free. It is pure: same inputs, same
// plan, in a deterministic order (by IP, then container ID, ifname,
// network). A listing failure never reaches it: without a listing there is
// no Liveness (see QueryRuntime), so the caller aborts and changes nothing.
func MakePlan(atts []Attachment, live Liveness, now time.Time, opts Options) Plan {
	if live == nil {
		return Plan{Refused: errors.New("plan gc: no live set (listing failed?); nothing freed")}
	}
	var p Plan
	p.Warnings = append(p.Warnings, live.warnings()...)
	for _, a := range sorted(atts) {
		switch age := now.Sub(a.AllocatedAt); {
		case !live.covers(a):
			p.Other++
		case live.alive(a):
			p.Alive = append(p.Alive, a)
		case a.AllocatedAt.IsZero():
			// No time recorded: not from a fresh ADD (which always stamps
			// it), so the birth race cannot apply; collect but say so.
			p.Warnings = append(p.Warnings, fmt.Sprintf("attachment %s/%s (%s) has no allocation time; treated as old", a.ContainerID, a.IfName, a.IP))
			p.Free = append(p.Free, Dead{Attachment: a, Reason: live.deadReason(), Age: age})
		case age < opts.Grace:
			// Includes a negative age (clock stepped back): kept longer, which is the safe side.
			p.Young = append(p.Young, Young{Attachment: a, Age: age, Left: opts.Grace - age})
		default:
			p.Free = append(p.Free, Dead{Attachment: a, Reason: live.deadReason(), Age: age})
		}
	}
	return refuseEmpty(p, live, opts)
}

// refuseEmpty empties p.Free when the live set is empty and old attachments
// would be freed, unless forced. Only young or no attachments: no refusal,
// there is nothing to lose.
//
// A listing that names none of the allocations is treated the same way: on
// a node with two runtimes, the socket of the one kubelet does not use
// lists sandboxes, just none of ours, and believing it would free every
// pod. (A node whose only pods are host-network ones and whose allocations
// all leaked needs --force once; that is the price of never guessing.)
func refuseEmpty(p Plan, live Liveness, opts Options) Plan {
	if !opts.RefuseEmpty || len(p.Free) == 0 || len(p.Alive) > 0 {
		return p
	}
	what := live.emptyText()
	if !live.empty() {
		what = "the runtime lists sandboxes, but none of this node's allocations"
	}
	if opts.Force {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%s; freeing %d attachments older than %s because of force", what, len(p.Free), opts.Grace))
		return p
	}
	p.Refused = fmt.Errorf("%w: %s, while %d attachments older than %s exist; refusing to free them without force (a wrong or broken cri socket looks like this; check --cri-endpoint)",
		ErrEmptyListing, what, len(p.Free), opts.Grace)
	p.Free = nil
	return p
}

func sorted(atts []Attachment) []Attachment {
	s := slices.Clone(atts)
	slices.SortFunc(s, func(a, b Attachment) int {
		return cmp.Or(a.IP.Compare(b.IP),
			strings.Compare(a.ContainerID, b.ContainerID),
			strings.Compare(a.IfName, b.IfName),
			strings.Compare(a.Network, b.Network))
	})
	return s
}

// QueryRuntime lists the runtime's sandboxes and returns them as a live set.
// On error there is no live set: the caller must abort and change nothing
// (a GC that cannot see the runtime must not guess).
func QueryRuntime(ctx context.Context, l SandboxLister) (Liveness, error) {
	sbs, err := l.ListSandboxes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list live sandboxes (gc aborted, nothing changed): %w", err)
	}
	return FromSandboxes(sbs), nil
}

// sandboxes is the CRI live set: every listed sandbox, in any state, is alive.
// It covers attachments of every network: a sandbox that is gone owns
// nothing anywhere.
type sandboxes struct {
	ids  map[string]struct{}
	warn []string
}

// FromSandboxes makes a live set of the given sandboxes (any state).
func FromSandboxes(sbs []Sandbox) Liveness {
	s := sandboxes{ids: make(map[string]struct{}, len(sbs))}
	for _, sb := range sbs {
		s.ids[sb.ID] = struct{}{}
	}
	s.warn = duplicateReady(sbs)
	return s
}

func (s sandboxes) covers(Attachment) bool  { return true }
func (s sandboxes) alive(a Attachment) bool { _, ok := s.ids[a.ContainerID]; return ok }
func (s sandboxes) empty() bool             { return len(s.ids) == 0 }
func (s sandboxes) deadReason() string      { return "sandbox not listed by runtime" }
func (s sandboxes) emptyText() string       { return "runtime listed no sandboxes" }
func (s sandboxes) warnings() []string      { return s.warn }

// duplicateReady warns about pods with more than one READY sandbox, which is
// a runtime bug. Both stay alive (liveness is by sandbox ID), so neither
// loses its IP; the warning is for a person to look.
func duplicateReady(sbs []Sandbox) []string {
	byUID := map[string][]Sandbox{}
	for _, sb := range sbs {
		if sb.Ready && sb.PodUID != "" {
			byUID[sb.PodUID] = append(byUID[sb.PodUID], sb)
		}
	}
	var warn []string
	for uid, group := range byUID {
		if len(group) < 2 {
			continue
		}
		ids := make([]string, len(group))
		for i, sb := range group {
			ids[i] = sb.ID
		}
		slices.Sort(ids)
		warn = append(warn, fmt.Sprintf("pod %s/%s (uid %s) has %d ready sandboxes: %s (runtime bug?); keeping all",
			group[0].PodNamespace, group[0].PodName, uid, len(group), strings.Join(ids, ", ")))
	}
	slices.Sort(warn)
	return warn
}

// validAttachments is the CNI GC verb's live set: the runtime's list of
// (containerID, ifname) still valid for one network.
type validAttachments struct {
	network string
	valid   map[ValidAttachment]struct{}
}

// FromValidAttachments makes the live set of the CNI GC verb for network.
// Attachments of other networks are not covered and stay untouched.
func FromValidAttachments(network string, valid []ValidAttachment) Liveness {
	v := validAttachments{network: network, valid: make(map[ValidAttachment]struct{}, len(valid))}
	for _, va := range valid {
		v.valid[va] = struct{}{}
	}
	return v
}

func (v validAttachments) covers(a Attachment) bool { return a.Network == v.network }
func (v validAttachments) alive(a Attachment) bool {
	_, ok := v.valid[ValidAttachment{ContainerID: a.ContainerID, IfName: a.IfName}]
	return ok
}
func (v validAttachments) empty() bool        { return len(v.valid) == 0 }
func (v validAttachments) deadReason() string { return "not in valid attachments" }
func (v validAttachments) emptyText() string {
	return fmt.Sprintf("valid attachments of network %q are empty", v.network)
}
func (v validAttachments) warnings() []string { return nil }
