package gc

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const grace = 10 * time.Minute

// att is an attachment of network "pods" on eth0 allocated age ago.
func att(cid, ip string, age time.Duration) Attachment {
	return Attachment{Network: "pods", ContainerID: cid, IfName: "eth0", IP: netip.MustParseAddr(ip),
		PodNamespace: "default", PodName: "pod-" + cid, PodUID: "uid-" + cid, AllocatedAt: now.Add(-age)}
}

func withNet(a Attachment, network, ifname string) Attachment {
	a.Network, a.IfName = network, ifname
	return a
}

func sb(id, uid string, ready bool) Sandbox {
	return Sandbox{ID: id, PodNamespace: "default", PodName: "pod-" + id, PodUID: uid, Ready: ready}
}

// keys renders attachments as "network/cid/ifname" for comparison.
func keys[T any](xs []T, get func(T) Attachment) []string {
	out := []string{}
	for _, x := range xs {
		a := get(x)
		out = append(out, a.Network+"/"+a.ContainerID+"/"+a.IfName)
	}
	return out
}

func TestMakePlan(t *testing.T) {
	cri := Options{Grace: grace, RefuseEmpty: true}
	criForce := Options{Grace: grace, RefuseEmpty: true, Force: true}
	cniOpts := Options{Grace: grace}
	tests := []struct {
		name        string
		atts        []Attachment
		live        Liveness
		opts        Options
		wantFree    []string
		wantYoung   []string
		wantAlive   []string
		wantOther   int
		wantRefused bool
		wantWarn    []string // substrings, each in some warning; nil means no warnings
	}{
		{
			name:      "READY sandbox listed is alive",
			atts:      []Attachment{att("a", "10.0.0.1", time.Hour)},
			live:      FromSandboxes([]Sandbox{sb("a", "u1", true)}),
			opts:      cri,
			wantAlive: []string{"pods/a/eth0"},
		},
		{
			name:      "NOTREADY sandbox listed is alive",
			atts:      []Attachment{att("a", "10.0.0.1", time.Hour)},
			live:      FromSandboxes([]Sandbox{sb("a", "u1", false)}),
			opts:      cri,
			wantAlive: []string{"pods/a/eth0"},
		},
		{
			name:      "not listed and older than grace is freed",
			atts:      []Attachment{att("a", "10.0.0.1", time.Hour), att("b", "10.0.0.2", time.Hour)},
			live:      FromSandboxes([]Sandbox{sb("a", "u1", true)}),
			opts:      cri,
			wantFree:  []string{"pods/b/eth0"},
			wantAlive: []string{"pods/a/eth0"},
		},
		{
			name:      "not listed but younger than grace is kept (ADD before the sandbox is listed)",
			atts:      []Attachment{att("a", "10.0.0.1", time.Hour), att("b", "10.0.0.2", 2*time.Second)},
			live:      FromSandboxes([]Sandbox{sb("a", "u1", true)}),
			opts:      cri,
			wantYoung: []string{"pods/b/eth0"},
			wantAlive: []string{"pods/a/eth0"},
		},
		{
			name:      "age exactly the grace is collectable",
			atts:      []Attachment{att("a", "10.0.0.1", time.Hour), att("b", "10.0.0.2", grace)},
			live:      FromSandboxes([]Sandbox{sb("a", "u1", true)}),
			opts:      cri,
			wantFree:  []string{"pods/b/eth0"},
			wantAlive: []string{"pods/a/eth0"},
		},
		{
			name:      "age one nanosecond under the grace is kept",
			atts:      []Attachment{att("a", "10.0.0.1", time.Hour), att("b", "10.0.0.2", grace-time.Nanosecond)},
			live:      FromSandboxes([]Sandbox{sb("a", "u1", true)}),
			opts:      cri,
			wantYoung: []string{"pods/b/eth0"},
			wantAlive: []string{"pods/a/eth0"},
		},
		{
			name:      "allocated in the future (clock stepped back) is kept",
			atts:      []Attachment{att("a", "10.0.0.1", time.Hour), att("b", "10.0.0.2", -time.Hour)},
			live:      FromSandboxes([]Sandbox{sb("a", "u1", true)}),
			opts:      cri,
			wantYoung: []string{"pods/b/eth0"},
			wantAlive: []string{"pods/a/eth0"},
		},
		{
			name: "unknown allocation time is freed with a warning",
			atts: []Attachment{att("a", "10.0.0.1", time.Hour), func() Attachment {
				b := att("b", "10.0.0.2", 0)
				b.AllocatedAt = time.Time{}
				return b
			}()},
			live:      FromSandboxes([]Sandbox{sb("a", "u1", true)}),
			opts:      cri,
			wantFree:  []string{"pods/b/eth0"},
			wantAlive: []string{"pods/a/eth0"},
			wantWarn:  []string{"b/eth0 (10.0.0.2) has no allocation time"},
		},
		{
			name:        "empty listing with old attachments is refused",
			atts:        []Attachment{att("a", "10.0.0.1", time.Hour), att("b", "10.0.0.2", time.Second)},
			live:        FromSandboxes(nil),
			opts:        cri,
			wantYoung:   []string{"pods/b/eth0"},
			wantRefused: true,
		},
		{
			name:      "empty listing with old attachments and force frees them",
			atts:      []Attachment{att("a", "10.0.0.1", time.Hour), att("b", "10.0.0.2", time.Second)},
			live:      FromSandboxes([]Sandbox{}),
			opts:      criForce,
			wantFree:  []string{"pods/a/eth0"},
			wantYoung: []string{"pods/b/eth0"},
			wantWarn:  []string{"runtime listed no sandboxes; freeing 1 attachments older than 10m0s because of force"},
		},
		{
			name:      "force does not override the grace",
			atts:      []Attachment{att("b", "10.0.0.2", time.Second)},
			live:      FromSandboxes(nil),
			opts:      criForce,
			wantYoung: []string{"pods/b/eth0"},
		},
		{
			name:      "empty listing with only young attachments is not refused",
			atts:      []Attachment{att("b", "10.0.0.2", time.Second)},
			live:      FromSandboxes(nil),
			opts:      cri,
			wantYoung: []string{"pods/b/eth0"},
		},
		{
			name: "empty listing with no attachments is not refused",
			live: FromSandboxes(nil),
			opts: cri,
		},
		{
			name:        "a listing that names none of ours is refused like an empty one (another runtime's socket)",
			atts:        []Attachment{att("a", "10.0.0.1", time.Hour)},
			live:        FromSandboxes([]Sandbox{sb("zzz", "u9", true)}),
			opts:        cri,
			wantRefused: true,
		},
		{
			name:     "... unless forced",
			atts:     []Attachment{att("a", "10.0.0.1", time.Hour)},
			live:     FromSandboxes([]Sandbox{sb("zzz", "u9", true)}),
			opts:     Options{Grace: grace, RefuseEmpty: true, Force: true},
			wantFree: []string{"pods/a/eth0"},
			wantWarn: []string{"none of this node's allocations"},
		},
		{
			name:      "a listing that names one of ours frees the others",
			atts:      []Attachment{att("a", "10.0.0.1", time.Hour), att("b", "10.0.0.2", time.Hour)},
			live:      FromSandboxes([]Sandbox{sb("zzz", "u9", true), sb("b", "u2", true)}),
			opts:      cri,
			wantFree:  []string{"pods/a/eth0"},
			wantAlive: []string{"pods/b/eth0"},
		},
		{
			name:      "several READY sandboxes of one pod: warning, none freed",
			atts:      []Attachment{att("s1", "10.0.0.1", time.Hour), att("s2", "10.0.0.2", time.Hour), att("gone", "10.0.0.3", time.Hour)},
			live:      FromSandboxes([]Sandbox{sb("s2", "same-uid", true), sb("s1", "same-uid", true)}),
			opts:      cri,
			wantFree:  []string{"pods/gone/eth0"},
			wantAlive: []string{"pods/s1/eth0", "pods/s2/eth0"},
			wantWarn:  []string{"pod default/pod-s2 (uid same-uid) has 2 ready sandboxes: s1, s2"},
		},
		{
			name:      "a READY and a NOTREADY sandbox of one pod is normal: no warning",
			atts:      []Attachment{att("s1", "10.0.0.1", time.Hour), att("s2", "10.0.0.2", time.Hour)},
			live:      FromSandboxes([]Sandbox{sb("s1", "same-uid", false), sb("s2", "same-uid", true)}),
			opts:      cri,
			wantAlive: []string{"pods/s1/eth0", "pods/s2/eth0"},
		},
		{
			name: "CRI liveness judges every network: a gone sandbox owns nothing",
			atts: []Attachment{att("a", "10.0.0.1", time.Hour), withNet(att("a", "10.1.0.1", time.Hour), "other", "net1"),
				withNet(att("b", "10.1.0.2", time.Hour), "other", "net1")},
			live:      FromSandboxes([]Sandbox{sb("b", "u", true)}),
			opts:      cri,
			wantFree:  []string{"pods/a/eth0", "other/a/net1"},
			wantAlive: []string{"other/b/net1"},
		},
		{
			name:      "CNI: valid attachment alive, other ifname of the same container freed",
			atts:      []Attachment{att("a", "10.0.0.1", time.Hour), withNet(att("a", "10.0.0.2", time.Hour), "pods", "net1")},
			live:      FromValidAttachments("pods", []ValidAttachment{{ContainerID: "a", IfName: "eth0"}}),
			opts:      cniOpts,
			wantFree:  []string{"pods/a/net1"},
			wantAlive: []string{"pods/a/eth0"},
		},
		{
			name: "CNI: attachments of other networks are untouched",
			atts: []Attachment{att("a", "10.0.0.1", time.Hour), att("b", "10.0.0.2", time.Hour),
				withNet(att("c", "10.1.0.1", time.Hour), "other", "eth0")},
			live:      FromValidAttachments("pods", []ValidAttachment{{ContainerID: "a", IfName: "eth0"}}),
			opts:      cniOpts,
			wantFree:  []string{"pods/b/eth0"},
			wantAlive: []string{"pods/a/eth0"},
			wantOther: 1,
		},
		{
			name:      "CNI: empty valid attachments free old ones of that network only, no refusal",
			atts:      []Attachment{att("a", "10.0.0.1", time.Hour), att("b", "10.0.0.2", time.Second), withNet(att("c", "10.1.0.1", time.Hour), "other", "eth0")},
			live:      FromValidAttachments("pods", nil),
			opts:      cniOpts,
			wantFree:  []string{"pods/a/eth0"},
			wantYoung: []string{"pods/b/eth0"},
			wantOther: 1,
		},
		{
			name:        "CNI with RefuseEmpty refuses like the CRI path",
			atts:        []Attachment{att("a", "10.0.0.1", time.Hour)},
			live:        FromValidAttachments("pods", nil),
			opts:        Options{Grace: grace, RefuseEmpty: true},
			wantRefused: true,
		},
		{
			name:        "no live set (listing failed) refuses even with force",
			atts:        []Attachment{att("a", "10.0.0.1", time.Hour)},
			live:        nil,
			opts:        criForce,
			wantRefused: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := MakePlan(tc.atts, tc.live, now, tc.opts)
			get := func(a Attachment) Attachment { return a }
			check := func(what string, got, want []string) {
				t.Helper()
				if want == nil {
					want = []string{}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			check("free", keys(p.Free, func(d Dead) Attachment { return d.Attachment }), tc.wantFree)
			check("young", keys(p.Young, func(y Young) Attachment { return y.Attachment }), tc.wantYoung)
			check("alive", keys(p.Alive, get), tc.wantAlive)
			if p.Other != tc.wantOther {
				t.Errorf("other = %d, want %d", p.Other, tc.wantOther)
			}
			if tc.wantRefused != (p.Refused != nil) {
				t.Errorf("refused = %v, want refused %v", p.Refused, tc.wantRefused)
			}
			if tc.wantRefused && tc.live != nil && !errors.Is(p.Refused, ErrEmptyListing) {
				t.Errorf("refusal %v is not ErrEmptyListing", p.Refused)
			}
			if len(p.Warnings) != len(tc.wantWarn) {
				t.Errorf("warnings = %q, want %d matching %q", p.Warnings, len(tc.wantWarn), tc.wantWarn)
			}
			for _, w := range tc.wantWarn {
				if !slices.ContainsFunc(p.Warnings, func(s string) bool { return strings.Contains(s, w) }) {
					t.Errorf("warnings = %q, want one containing %q", p.Warnings, w)
				}
			}
		})
	}
}

func TestPlanReasonsAndTimes(t *testing.T) {
	atts := []Attachment{att("old", "10.0.0.1", 90*time.Minute), att("young", "10.0.0.2", 4*time.Minute), att("x", "10.0.0.3", time.Hour)}
	p := MakePlan(atts, FromSandboxes([]Sandbox{sb("x", "u", true)}), now, Options{Grace: grace, RefuseEmpty: true})
	if len(p.Free) != 1 || len(p.Young) != 1 {
		t.Fatalf("plan %+v", p)
	}
	if d := p.Free[0]; d.Reason != "sandbox not listed by runtime" || d.Age != 90*time.Minute {
		t.Errorf("free = %q age %s, want reason \"sandbox not listed by runtime\" age 1h30m", d.Reason, d.Age)
	}
	if y := p.Young[0]; y.Age != 4*time.Minute || y.Left != 6*time.Minute {
		t.Errorf("young age %s left %s, want 4m and 6m", y.Age, y.Left)
	}

	p = MakePlan(atts, FromValidAttachments("pods", nil), now, Options{Grace: grace})
	if len(p.Free) != 2 || p.Free[0].Reason != "not in valid attachments" {
		t.Errorf("cni plan free = %+v, want reason \"not in valid attachments\"", p.Free)
	}
}

func TestPlanRefusalMessage(t *testing.T) {
	p := MakePlan([]Attachment{att("a", "10.0.0.1", time.Hour), att("b", "10.0.0.2", time.Hour)},
		FromSandboxes(nil), now, Options{Grace: grace, RefuseEmpty: true})
	want := "empty listing: runtime listed no sandboxes, while 2 attachments older than 10m0s exist; refusing to free them without force"
	if p.Refused == nil || !strings.HasPrefix(p.Refused.Error(), want) {
		t.Fatalf("refusal %v, want prefix %q", p.Refused, want)
	}
}

func TestPlanDeterministicAndPure(t *testing.T) {
	var atts []Attachment
	for _, ip := range []string{"10.0.0.10", "10.0.0.9", "10.0.0.100", "10.0.0.2", "10.0.0.1"} {
		atts = append(atts, att("c"+ip, ip, time.Hour))
	}
	// Same IP twice (e.g. two networks of a static pool): tie broken by container ID.
	atts = append(atts, att("zz", "10.0.0.2", time.Hour), att("aa", "10.0.0.2", time.Hour), att("other", "10.0.0.200", time.Hour))
	live := FromSandboxes([]Sandbox{sb("other", "u", true)})
	want := MakePlan(atts, live, now, Options{Grace: grace, RefuseEmpty: true})
	var ips []string
	for _, d := range want.Free {
		ips = append(ips, d.IP.String()+"/"+d.ContainerID)
	}
	wantOrder := []string{"10.0.0.1/c10.0.0.1", "10.0.0.2/aa", "10.0.0.2/c10.0.0.2", "10.0.0.2/zz", "10.0.0.9/c10.0.0.9", "10.0.0.10/c10.0.0.10", "10.0.0.100/c10.0.0.100"}
	if !slices.Equal(ips, wantOrder) {
		t.Fatalf("order %v, want %v", ips, wantOrder)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		r.Shuffle(len(atts), func(i, j int) { atts[i], atts[j] = atts[j], atts[i] })
		shuffled := slices.Clone(atts)
		if got := MakePlan(atts, live, now, Options{Grace: grace, RefuseEmpty: true}); !reflect.DeepEqual(got, want) {
			t.Fatalf("plan depends on input order:\n got %+v\nwant %+v", got, want)
		}
		if !slices.Equal(atts, shuffled) {
			t.Fatal("MakePlan modified its input")
		}
	}
}
