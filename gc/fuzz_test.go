package gc

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// FuzzValidAttachments: the GC verb's stdin parser never panics, and what
// it returns is what the JSON says. Seeds: testdata/fuzz/FuzzValidAttachments.
func FuzzValidAttachments(f *testing.F) {
	f.Fuzz(func(t *testing.T, conf []byte) {
		va, err := ValidAttachmentsFromConfig(conf)
		if err != nil && va != nil {
			t.Fatalf("error with a result: %v %v", err, va)
		}
	})
}

// FuzzPlan drives the planner with a CRI listing and a store made from
// fuzz bytes: 6 bytes per attachment (sandbox, ifname, address, age in
// minutes, network), 2 per listed sandbox (sandbox, ready). Whatever the
// input, the plan keeps the safety rules: a listed sandbox is never freed,
// nothing younger than the grace is freed, a refusal frees nothing, an
// empty or unrelated listing is refused without force, every attachment
// lands in exactly one bucket unless refused, and the plan is the same
// twice. Seeds: testdata/fuzz/FuzzPlan.
func FuzzPlan(f *testing.F) {
	f.Fuzz(func(t *testing.T, store, listing []byte, graceMin uint8, force, refuseEmpty bool) {
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		var atts []Attachment
		for i := 0; i+6 <= len(store) && len(atts) < 64; i += 6 {
			b := store[i : i+6]
			a := Attachment{
				Network:     []string{"pods", "other"}[b[5]%2],
				ContainerID: fmt.Sprintf("sb%d", b[0]%16),
				IfName:      fmt.Sprintf("eth%d", b[1]%2),
				IP:          netip.AddrFrom4([4]byte{10, 0, b[2], b[3]}),
			}
			if b[4] != 255 { // 255: no allocation time recorded
				a.AllocatedAt = now.Add(-time.Duration(int8(b[4])) * time.Minute)
			}
			atts = append(atts, a)
		}
		var sbs []Sandbox
		listed := map[string]bool{}
		for i := 0; i+2 <= len(listing); i += 2 {
			id := fmt.Sprintf("sb%d", listing[i]%16)
			sbs = append(sbs, Sandbox{ID: id, PodUID: fmt.Sprintf("uid%d", listing[i]%4), Ready: listing[i+1]%2 == 0})
			listed[id] = true
		}
		opts := Options{Grace: time.Duration(graceMin) * time.Minute, Force: force, RefuseEmpty: refuseEmpty}
		p := MakePlan(atts, FromSandboxes(sbs), now, opts)
		// A refusal empties Free: what it would have freed is nowhere.
		if n := len(p.Free) + len(p.Young) + len(p.Alive) + p.Other; n != len(atts) && p.Refused == nil {
			t.Fatalf("%d attachments planned into %d places", len(atts), n)
		}
		for _, d := range p.Free {
			if listed[d.ContainerID] {
				t.Fatalf("freed %s, which the runtime lists", d.ContainerID)
			}
			if !d.AllocatedAt.IsZero() && now.Sub(d.AllocatedAt) < opts.Grace {
				t.Fatalf("freed %s at age %s, younger than the grace %s", d.ContainerID, now.Sub(d.AllocatedAt), opts.Grace)
			}
		}
		if p.Refused != nil && len(p.Free) != 0 {
			t.Fatal("refused, yet frees")
		}
		if refuseEmpty && !force && len(p.Alive) == 0 && len(p.Free) > 0 {
			t.Fatalf("freed %d with a listing that names none of them, without force", len(p.Free))
		}
		again := MakePlan(slices.Clone(atts), FromSandboxes(slices.Clone(sbs)), now, opts)
		if fmt.Sprint(again) != fmt.Sprint(p) {
			t.Fatal("the planner is not deterministic")
		}
	})
}
