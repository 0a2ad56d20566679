package plugin

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
)

func TestHumanAge(t *testing.T) {
	for d, want := range map[time.Duration]string{-time.Second: "0s", 42 * time.Second: "42s", 192 * time.Second: "3m12s",
		125 * time.Minute: "2h5m", 50 * time.Hour: "2d2h"} {
		if got := humanAge(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}

// TestListEscapesControlCharacters: pod metadata recorded with control
// characters (C0, C1, invalid UTF-8: a file from before ADD refused them,
// or edited by hand) is printed escaped, never raw to the terminal.
func TestListEscapesControlCharacters(t *testing.T) {
	var b strings.Builder
	printListing(&b, listing{Allocations: []alloc.Allocation{{
		Key: alloc.Key{ContainerID: "c1", IfName: "eth0"}, IP: netip.MustParseAddr("10.0.0.1"),
		PodName: "web\u009b31m", PodNamespace: "ns\x1b]0;x\x07", HostVeth: "eni\xff",
	}}}, func(alloc.Allocation) time.Duration { return 0 })
	out := b.String()
	if strings.ContainsFunc(out, func(r rune) bool { return r != '\n' && (r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0xfffd) }) {
		t.Errorf("list printed control characters raw: %q", out)
	}
	for _, want := range []string{`"web\u009b31m"`, `"ns\x1b]0;x\a"`, `"eni\xff"`} {
		if !strings.Contains(out, want) {
			t.Errorf("list output %q lacks %s", out, want)
		}
	}
}
