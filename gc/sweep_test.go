package gc

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestFindLeftovers(t *testing.T) {
	snap := HostSnapshot{
		Veths: []string{"enib", "enia", "enigone"},
		Rules: []HostRule{
			{IP: ip("10.0.0.2"), Priority: 512, Table: 254},
			{IP: ip("10.0.0.1"), Priority: 512, Table: 254},
			{IP: ip("10.0.0.9"), Priority: 512, Table: 254},
			{IP: ip("10.0.0.9"), Priority: 1536, Table: 2, From: true},
		},
		Routes: []HostRoute{
			{IP: ip("10.0.0.1"), Veth: "enia"},
			{IP: ip("10.0.0.7"), Veth: "enia"},    // wrong address on a kept veth
			{IP: ip("10.0.0.8"), Veth: "enigone"}, // goes with its veth
		},
	}
	owned := Owned{ip("10.0.0.1"): "enia", ip("10.0.0.2"): "enib"}
	got := FindLeftovers(snap, owned)
	want := Leftovers{
		Veths: []string{"enigone"},
		Rules: []HostRule{
			{IP: ip("10.0.0.9"), Priority: 512, Table: 254},
			{IP: ip("10.0.0.9"), Priority: 1536, Table: 2, From: true},
		},
		Routes: []HostRoute{{IP: ip("10.0.0.7"), Veth: "enia"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if n := FindLeftovers(HostSnapshot{Veths: []string{"enia"}, Rules: snap.Rules[:2]}, owned).Len(); n != 0 {
		t.Errorf("everything explained, yet %d leftovers", n)
	}
}

type failingHost struct{ deleted []string }

func (h *failingHost) Veths() ([]string, error)     { return nil, nil }
func (h *failingHost) Rules() ([]HostRule, error)   { return nil, nil }
func (h *failingHost) Routes() ([]HostRoute, error) { return nil, nil }
func (h *failingHost) DeleteVeth(names ...string) error {
	h.deleted = append(h.deleted, names...)
	if slices.Contains(names, "bad") {
		return errors.New("busy")
	}
	return nil
}
func (h *failingHost) DeleteRule(HostRule) error   { return errors.New("rule busy") }
func (h *failingHost) DeleteRoute(HostRoute) error { return nil }

func TestRemoveLeftoversTriesEverything(t *testing.T) {
	h := &failingHost{}
	err := RemoveLeftovers(h, Leftovers{Veths: []string{"bad", "good"}, Rules: []HostRule{{IP: ip("10.0.0.1")}}})
	if err == nil || len(h.deleted) != 2 {
		t.Fatalf("err %v, deleted %v: a failed rule must not stop the veths", err, h.deleted)
	}
}
