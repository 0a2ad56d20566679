package integration

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/gc/crifake"
	"github.com/eni-cni/eni-cni/netsetup"
)

// TestGCVerbLibcni drives the CNI 1.1 GC verb the way a runtime does, with
// libcni's GCNetworkList and a list of valid attachments. libcni first DELs
// every attachment it has cached that is not valid, then calls the plugin's
// GC; pods ADDed by exec'ing the binary directly are not in libcni's cache,
// so only the plugin's GC can free them. Every case records the verbs libcni
// ran, to tell the two apart.
func TestGCVerbLibcni(t *testing.T) {
	cases := []struct {
		name       string
		grace      float64
		viaLibcni  []bool // per pod: ADD through libcni (cached) or exec'd directly
		valid      []int  // indices of the pods passed as valid; nil is sent as null
		wantFreed  []int
		wantLibDel []int // the subset libcni DELs itself (cached and not valid)
	}{
		{
			name: "unlisted attachments are freed", grace: 60,
			viaLibcni: []bool{true, true, false, false}, valid: []int{0, 2},
			wantFreed: []int{1, 3}, wantLibDel: []int{1},
		},
		{
			name: "null valid attachments free every old attachment", grace: 60,
			viaLibcni: []bool{false, false, false, false}, valid: nil,
			wantFreed: []int{0, 1, 2, 3},
		},
		{
			name: "grace keeps young attachments", grace: 600,
			viaLibcni: []bool{false, false, false, false}, valid: []int{0, 2},
			wantFreed: nil,
		},
		{
			// Not ours to decide: libcni's own DEL of a cached attachment
			// ignores gcGraceSeconds; the grace only guards the plugin's GC.
			name: "grace does not stop libcni's DEL of cached attachments", grace: 600,
			viaLibcni: []bool{true, true, false, false}, valid: []int{0, 2},
			wantFreed: []int{1}, wantLibDel: []int{1},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			nw := newNetwork(t, n, "1.1.0", []string{"10.99.2.0/24"}, map[string]any{"gcGraceSeconds": tc.grace})
			rt := newGCRuntime(t, n)
			list := nw.conflist(t)
			pods := newPods(t, len(tc.viaLibcni))
			atts := make([]attached, len(pods))
			for i, p := range pods {
				if tc.viaLibcni[i] {
					atts[i] = rt.add(t, list, p)
				} else {
					atts[i] = nw.addDirect(t, p)
				}
			}
			var valid []*pod
			for _, i := range tc.valid {
				valid = append(valid, pods[i])
			}
			rt.exec.take()                      // forget the ADDs
			nw.ageAllocations(t, 5*time.Minute) // past a grace of 60 s, within 600 s

			if err := rt.gc(t, list, valid); err != nil {
				t.Fatalf("GCNetworkList: %v", err)
			}

			calls := rt.exec.take("DEL", "GC")
			var wantCalls []gcCall
			for _, i := range tc.wantLibDel {
				wantCalls = append(wantCalls, gcCall{"DEL", pods[i].containerID})
			}
			wantCalls = append(wantCalls, gcCall{cmd: "GC"})
			if !slices.Equal(calls, wantCalls) {
				t.Errorf("libcni ran %v, want %v", calls, wantCalls)
			}

			l := nw.list(t)
			if got, want := len(l.Allocations), len(pods)-len(tc.wantFreed); got != want {
				t.Errorf("list --json: %d allocations, want %d: %+v", got, want, l.Allocations)
			}
			if got, want := l.Pool.Cooling, len(tc.wantFreed); got != want {
				t.Errorf("list --json: %d addresses cooling, want %d (pool %+v)", got, want, l.Pool)
			}
			for i, a := range atts {
				if slices.Contains(tc.wantFreed, i) {
					assertFreed(t, n, l, a)
				} else {
					assertAlive(t, nw, l, a)
				}
			}
		})
	}
}

// TestGCOtherNetwork collects everything of network A while a second
// eni-cni network B (another name and pool, default hostVethPrefix) has live
// pods on the same node: B's allocations and wiring must survive. A's GC is
// the CNI verb through libcni with no valid attachments, or `eni-cni gc`
// with a runtime that lists only B's sandboxes. B's state dir is either its
// own or A's (the default /var/lib/eni-cni is the same for every network).
func TestGCOtherNetwork(t *testing.T) {
	for _, how := range []string{"CNI GC verb", "eni-cni gc"} {
		for _, shared := range []bool{false, true} {
			name := how + "/own state dir"
			if shared {
				name = how + "/shared state dir"
			}
			t.Run(name, func(t *testing.T) {
				n := newNode(t)
				a := newNetwork(t, n, "1.1.0", []string{"10.99.3.0/24"}, map[string]any{"gcGraceSeconds": 60})
				var extra map[string]any
				if shared {
					extra = map[string]any{"stateDir": a.stateDir}
				}
				b := newNetwork(t, n, "1.1.0", []string{"10.98.3.0/24"}, extra)
				aPods, bPods := newPods(t, 2), newPods(t, 2)
				var aGone, bKept []attached
				var report string

				if how == "CNI GC verb" {
					rt := newGCRuntime(t, n)
					listA, listB := a.conflist(t), b.conflist(t)
					aGone = []attached{rt.add(t, listA, aPods[0]), a.addDirect(t, aPods[1])}
					bKept = []attached{rt.add(t, listB, bPods[0]), b.addDirect(t, bPods[1])}
					rt.exec.take()
					a.ageAllocations(t, 5*time.Minute)
					if err := rt.gc(t, listA, nil); err != nil {
						t.Fatalf("GCNetworkList of %s: %v", a.name, err)
					}
					if calls, want := rt.exec.take("DEL", "GC"), []gcCall{{"DEL", aPods[0].containerID}, {cmd: "GC"}}; !slices.Equal(calls, want) {
						t.Errorf("libcni ran %v, want %v", calls, want)
					}
				} else {
					aGone = []attached{a.addDirect(t, aPods[0]), a.addDirect(t, aPods[1])}
					bKept = []attached{b.addDirect(t, bPods[0]), b.addDirect(t, bPods[1])}
					cri := crifake.Start(t)
					cri.SetSandboxes(readySandboxes(bPods...)...)
					a.ageAllocations(t, 5*time.Minute)
					args := []string{"--cri-endpoint", cri.Endpoint()}
					if !shared {
						// A's own store sees a listing naming none of its
						// allocations: that is what another runtime's socket
						// looks like, so gc refuses until told otherwise.
						o := a.gc(t, args...)
						if o.exit == 0 || !strings.Contains(string(o.stderr), "none of this node's allocations") {
							t.Errorf("gc of %s with a listing naming none of its pods: want a refusal, got %s", a.name, o)
						}
						if l := a.list(t); len(l.Allocations) != len(aPods) {
							t.Fatalf("a refused gc freed something: %+v", l.Allocations)
						}
						args = append(args, "--force")
					}
					o := a.gc(t, args...)
					if o.exit != 0 {
						t.Errorf("gc of %s: want exit 0, got %s", a.name, o)
					}
					report = fmt.Sprintf("\n`eni-cni gc --config <%s>` printed:\n%s", a.name, o.stdout)
				}

				la := a.list(t)
				for _, x := range aGone {
					assertFreed(t, n, la, x)
				}
				lb := b.list(t)
				if len(lb.Allocations) != len(bKept) {
					t.Errorf("network %s: %d allocations after the GC of %s, want %d: %+v", b.name, len(lb.Allocations), a.name, len(bKept), lb.Allocations)
				}
				veths := n.veths(t)
				for _, x := range bKept {
					if _, ok := veths[x.veth]; !ok {
						t.Errorf("GC of network %s deleted host veth %s of %s, a live pod of network %s (still allocated %s in %s's state)%s",
							a.name, x.veth, x.pod.name, b.name, x.ip, b.name, report)
					}
				}
				if t.Failed() {
					return
				}
				for _, x := range bKept {
					assertAlive(t, b, lb, x)
				}
			})
		}
	}
}

// TestGCSweepLeftovers puts objects on the node that no allocation
// explains, next to two live pods, and runs the GC through the CRI
// subcommand and through the CNI verb. Only objects of ours are removed: a
// veth named exactly like our host veths, rules at our priorities for pool
// addresses, a /32 route to a pool address through a live pod's veth. A rule
// for an address outside the pool and veths that only resemble ours stay.
func TestGCSweepLeftovers(t *testing.T) {
	for _, how := range []string{"eni-cni gc", "CNI GC verb"} {
		t.Run(how, func(t *testing.T) {
			n := newNode(t)
			nw := newNetwork(t, n, "1.1.0", []string{"10.99.0.0/24"}, map[string]any{"gcGraceSeconds": 60})
			pods := newPods(t, 2)
			live := []attached{nw.addDirect(t, pods[0]), nw.addDirect(t, pods[1])}
			cri := crifake.Start(t)
			cri.SetSandboxes(readySandboxes(pods...)...)

			junk := newPod(t, "junk") // its namespace holds the peers of the veths made here
			ghost := netsetup.HostVethName(vethPrefix, "ghost", "eth0")
			ghostLink := n.addStrayVeth(t, ghost, junk.netNS, "eth0")
			strayTo, strayFrom := netip.MustParseAddr("10.99.0.77"), netip.MustParseAddr("10.99.0.78")
			strayRoute, ghostRoute := netip.MustParseAddr("10.99.0.79"), netip.MustParseAddr("10.99.0.76")
			outside := netip.MustParseAddr("172.16.5.5")
			n.addStrayRoute(t, ghostRoute, ghostLink)
			n.addStrayRule(t, rulePrioToPod, strayTo, false, unix.RT_TABLE_MAIN)
			n.addStrayRule(t, rulePrioFromPod, strayFrom, true, 100)
			n.addStrayRule(t, rulePrioToPod, outside, false, unix.RT_TABLE_MAIN)
			liveLink, ok := n.veths(t)[live[0].veth]
			if !ok {
				t.Fatalf("no host veth %s", live[0].veth)
			}
			n.addStrayRoute(t, strayRoute, liveLink)
			notOurs := []string{
				"eni0", "enifoo",
				"enizzzzzzzzzzzz", // our prefix and length, not hex
				netsetup.HostVethName("enx", "ghost", "eth0"),           // another prefix
				netsetup.HostVethName(vethPrefix, "ghost", "eth0")[:14], // one character short
			}
			for i, name := range notOurs {
				n.addStrayVeth(t, name, junk.netNS, fmt.Sprintf("peer%d", i))
			}

			if how == "eni-cni gc" {
				nw.ageAllocations(t, time.Hour)
				before, state := n.hostState(t), nw.stateBytes(t)
				o := nw.gc(t, "--cri-endpoint", cri.Endpoint(), "--grace", "60s", "--dry-run")
				if o.exit != 0 {
					t.Fatalf("gc --dry-run: want exit 0, got %s", o)
				}
				out := string(o.stdout)
				for _, want := range []string{
					"gc: would remove leftover veth " + ghost + "\n",
					fmt.Sprintf("gc: would remove leftover rule for %s (prio %d, table %d)\n", strayTo, rulePrioToPod, unix.RT_TABLE_MAIN),
					fmt.Sprintf("gc: would remove leftover rule for %s (prio %d, table 100)\n", strayFrom, rulePrioFromPod),
					fmt.Sprintf("gc: would remove leftover route %s dev %s\n", strayRoute, live[0].veth),
					"gc: would free 0, kept 0 young, 2 alive, 4 host leftovers\n",
				} {
					if !strings.Contains(out, want) {
						t.Errorf("gc --dry-run: stdout lacks %q:\n%s", want, out)
					}
				}
				for _, name := range notOurs {
					if strings.Contains(out, "leftover veth "+name+"\n") {
						t.Errorf("gc --dry-run: would remove %s, which is not named like ours:\n%s", name, out)
					}
				}
				if strings.Contains(out, outside.String()) {
					t.Errorf("gc --dry-run: mentions %s, outside the pool:\n%s", outside, out)
				}
				if after := n.hostState(t); after != before {
					t.Errorf("gc --dry-run changed the node:\nbefore:\n%s\nafter:\n%s", before, after)
				}
				if !bytes.Equal(nw.stateBytes(t), state) {
					t.Errorf("gc --dry-run changed the state file")
				}
			}

			var o output
			if how == "eni-cni gc" {
				o = nw.gc(t, "--cri-endpoint", cri.Endpoint(), "--grace", "60s")
				if s := parseSummary(t, o); o.exit != 0 || s != (gcSummary{alive: 2, leftovers: 4}) {
					t.Errorf("gc: want exit 0 and `freed 0, kept 0 young, 2 alive, 4 host leftovers`, got %s", o)
				}
			} else {
				o = nw.gcVerb(t, pods...)
				if o.exit != 0 || len(o.stdout) != 0 {
					t.Errorf("GC verb: want exit 0 and no output, got %s", o)
				}
			}

			veths := n.veths(t)
			if _, ok := veths[ghost]; ok {
				t.Errorf("stray veth %s named like ours is still there", ghost)
			}
			if l := junk.links(t); !slices.Equal(l, []string{"lo", "peer0", "peer1", "peer2", "peer3", "peer4"}) {
				t.Errorf("peer namespace has links %v, want the ghost's eth0 gone and the other peers kept", l)
			}
			for _, name := range notOurs {
				if _, ok := veths[name]; !ok {
					t.Errorf("veth %s, not named like ours, was removed", name)
				}
			}
			if n.hasRuleFor(t, rulePrioToPod, strayTo, false) {
				t.Errorf("stray rule `to %s lookup main prio %d` is still there", strayTo, rulePrioToPod)
			}
			if n.hasRuleFor(t, rulePrioFromPod, strayFrom, true) {
				t.Errorf("stray rule `from %s lookup 100 prio %d` is still there", strayFrom, rulePrioFromPod)
			}
			if !n.hasRuleFor(t, rulePrioToPod, outside, false) {
				t.Errorf("rule `to %s prio %d`, outside the pool, was removed", outside, rulePrioToPod)
			}
			for _, ip := range []netip.Addr{strayRoute, ghostRoute} {
				if _, dev, ok := n.hostRouteTo(t, ip); ok {
					t.Errorf("stray route %s/32 dev %s is still there", ip, dev)
				}
			}
			l := nw.list(t)
			if len(l.Allocations) != 2 || l.Pool.Cooling != 0 {
				t.Errorf("list --json: want the 2 live allocations and nothing cooling, got pool %+v, %+v", l.Pool, l.Allocations)
			}
			for _, a := range live {
				assertAlive(t, nw, l, a)
			}
		})
	}
}

// TestGCCommandCRI runs `eni-cni gc` against an in-process fake CRI runtime
// listening on a unix socket (the binary, in the node network namespace,
// reaches it through the filesystem).
func TestGCCommandCRI(t *testing.T) {
	t.Run("frees sandboxes the runtime no longer lists", func(t *testing.T) {
		n := newNode(t)
		nw := newNetwork(t, n, "1.0.0", []string{"10.99.4.0/24"}, nil)
		pods := newPods(t, 4)
		atts := make([]attached, len(pods))
		for i, p := range pods {
			atts[i] = nw.addDirect(t, p)
		}
		cri := crifake.Start(t)
		// pod 2's sandbox is NOTREADY, which still owns its address; a
		// sandbox without any allocation is listed too.
		stranger := crifake.PodSandbox(randHex(32), "eni-it", "stranger", "", true, time.Now())
		cri.SetSandboxes(sandboxOf(pods[0], true), sandboxOf(pods[2], false), stranger)

		nw.ageAllocations(t, time.Hour)
		o := nw.gc(t, "--cri-endpoint", cri.Endpoint(), "--grace", "60s")
		if o.exit != 0 {
			t.Fatalf("gc: want exit 0, got %s", o)
		}
		lines := splitLines(o.stdout)
		freed := parseFreeLines(lines)
		if len(lines) != 3 || len(freed) != 2 || lines[2] != "gc: freed 2, kept 0 young, 2 alive, 0 host leftovers" {
			t.Errorf("gc stdout: want 2 freed lines and the summary `gc: freed 2, kept 0 young, 2 alive, 0 host leftovers`, got:\n%s", o.stdout)
		}
		for i, want := range []attached{atts[1], atts[3]} {
			if i >= len(freed) {
				break
			}
			got := freed[i]
			w := freeLine{ip: want.ip.String(), cid12: want.pod.containerID[:12], ifName: "eth0", podNS: want.pod.namespace,
				podName: want.pod.name, network: nw.name, age: got.age, reason: "sandbox not listed by runtime"}
			if got != w {
				t.Errorf("freed line %d: got %+v, want %+v", i, got, w)
			}
			// Aged an hour (the store's clocks moved) plus the seconds since ADD.
			if d, err := time.ParseDuration(got.age); err != nil || d < time.Hour || d > time.Hour+time.Minute {
				t.Errorf("freed line %d: age %q is not the hour the store was aged plus the seconds since ADD", i, got.age)
			}
		}

		l := nw.list(t)
		if len(l.Allocations) != 2 || l.Pool.Cooling != 2 {
			t.Errorf("list --json: want 2 allocations and 2 cooling, got pool %+v, %+v", l.Pool, l.Allocations)
		}
		assertAlive(t, nw, l, atts[0])
		assertFreed(t, n, l, atts[1])
		assertAlive(t, nw, l, atts[2])
		assertFreed(t, n, l, atts[3])
		if v, lists := cri.Calls(); v < 1 || lists != 1 {
			t.Errorf("fake runtime saw %d Version and %d ListPodSandbox calls, want >= 1 and 1", v, lists)
		}
		if req := cri.LastListRequest(); req == nil || req.GetFilter() != nil {
			t.Errorf("ListPodSandbox request %v: want no filter (every state owns its address)", req)
		}
	})

	t.Run("a runtime it cannot trust changes nothing", func(t *testing.T) {
		n := newNode(t)
		nw := newNetwork(t, n, "1.0.0", []string{"10.99.5.0/24"}, nil)
		pods := newPods(t, 3)
		atts := make([]attached, len(pods))
		for i, p := range pods {
			atts[i] = nw.addDirect(t, p)
		}
		nw.ageAllocations(t, time.Hour)
		state, host := nw.stateBytes(t), n.hostState(t)

		cases := []struct {
			name     string
			endpoint func(t *testing.T) string
			args     []string
			want     []string // in the one-line reason
		}{
			{"socket missing", func(t *testing.T) string { return crifake.MissingSocket(t) }, nil, []string{"cri runtime unreachable", "no socket at that path"}},
			{"stale socket", func(t *testing.T) string { return crifake.StaleSocket(t) }, nil, []string{"cri runtime unreachable", "nothing listening"}},
			{"another gRPC service", func(t *testing.T) string { return crifake.StartNotCRI(t) }, nil, []string{"not a cri v1 runtime"}},
			{"not gRPC", func(t *testing.T) string { return crifake.StartNotGRPC(t) }, nil, []string{"not a cri v1 runtime"}},
			{"listing fails", func(t *testing.T) string {
				s := crifake.Start(t)
				s.SetSandboxes(readySandboxes(pods...)...)
				s.SetListError(status.Error(codes.Internal, "sandbox store is broken"))
				return s.Endpoint()
			}, nil, []string{"list pod sandboxes", "sandbox store is broken", "nothing changed"}},
			{"listing slower than --timeout", func(t *testing.T) string {
				s := crifake.Start(t)
				s.SetSandboxes(readySandboxes(pods...)...)
				s.SetListDelay(20 * time.Second)
				return s.Endpoint()
			}, []string{"--timeout", "300ms"}, []string{"did not answer in time"}},
			{"socket accepts and never answers", func(t *testing.T) string { return crifake.StartSilent(t) },
				[]string{"--timeout", "300ms"}, []string{"did not answer in time"}},
			{"empty listing", func(t *testing.T) string { return crifake.Start(t).Endpoint() }, nil,
				[]string{"runtime listed no sandboxes", "refusing"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				args := append([]string{"--cri-endpoint", tc.endpoint(t), "--grace", "60s"}, tc.args...)
				o := nw.gc(t, args...)
				if o.exit == 0 {
					t.Errorf("gc: want a non-zero exit, got %s", o)
				}
				oneLineReason(t, o, tc.want...)
				t.Logf("exit %d, stderr: %s", o.exit, o.stderr)
				if f := parseFreeLines(splitLines(o.stdout)); len(f) != 0 {
					t.Errorf("gc claims to have freed %d attachments: %s", len(f), o.stdout)
				}
				if !bytes.Equal(nw.stateBytes(t), state) {
					t.Errorf("gc changed the state file")
				}
				if after := n.hostState(t); after != host {
					t.Errorf("gc changed the node:\nbefore:\n%s\nafter:\n%s", host, after)
				}
			})
		}

		l := nw.list(t)
		for _, a := range atts {
			assertAlive(t, nw, l, a)
		}

		// Told to, it believes the empty listing.
		o := nw.gc(t, "--cri-endpoint", crifake.Start(t).Endpoint(), "--grace", "60s", "--force")
		if o.exit != 0 {
			t.Fatalf("gc --force: want exit 0, got %s", o)
		}
		if f := parseFreeLines(splitLines(o.stdout)); len(f) != 3 {
			t.Errorf("gc --force: want 3 freed lines, got %d:\n%s", len(f), o.stdout)
		}
		if !strings.Contains(string(o.stdout), "gc: warning: runtime listed no sandboxes; freeing 3 attachments") {
			t.Errorf("gc --force: want a warning that the empty listing was believed:\n%s", o.stdout)
		}
		if s := parseSummary(t, o); s != (gcSummary{freed: 3}) {
			t.Errorf("gc --force: summary %+v, want freed 3 and nothing else", s)
		}
		l = nw.list(t)
		if len(l.Allocations) != 0 || l.Pool.Cooling != 3 {
			t.Errorf("list --json after gc --force: want no allocation and 3 cooling, got pool %+v, %+v", l.Pool, l.Allocations)
		}
		for _, a := range atts {
			assertFreed(t, n, l, a)
		}
		n.assertNoAttachments(t)
	})

	// The birth race: containerd runs CNI ADD before the sandbox appears in
	// ListPodSandbox. A pod allocated just now and not listed is young and
	// kept, in the same pass that frees an old unlisted one.
	t.Run("a young unlisted pod is kept", func(t *testing.T) {
		n := newNode(t)
		nw := newNetwork(t, n, "1.0.0", []string{"10.99.6.0/24"}, nil)
		pods := newPods(t, 2)
		old := []attached{nw.addDirect(t, pods[0]), nw.addDirect(t, pods[1])}
		nw.backdate(t, time.Hour, pods...)
		born := newPod(t, "being-born")
		x := nw.addDirect(t, born)
		cri := crifake.Start(t)
		cri.SetSandboxes(sandboxOf(pods[0], true)) // pods[1] is gone, born is not listed yet

		o := nw.gc(t, "--cri-endpoint", cri.Endpoint(), "--grace", "60s")
		if o.exit != 0 {
			t.Fatalf("gc: want exit 0, got %s", o)
		}
		if s := parseSummary(t, o); s != (gcSummary{freed: 1, young: 1, alive: 1}) {
			t.Errorf("gc: summary %+v, want freed 1, kept 1 young, 1 alive:\n%s", s, o.stdout)
		}
		if f := parseFreeLines(splitLines(o.stdout)); len(f) != 1 || f[0].cid12 != pods[1].containerID[:12] {
			t.Errorf("gc: want exactly %s freed, got:\n%s", pods[1].name, o.stdout)
		}
		l := nw.list(t)
		assertAlive(t, nw, l, old[0])
		assertFreed(t, n, l, old[1])
		assertAlive(t, nw, l, x)

		// Only the young pod and a runtime that lists nothing: nothing to
		// lose, so no refusal, and the young pod stays.
		cri.SetSandboxes()
		nw.del(t, pods[0], pods[0].path())
		o = nw.gc(t, "--cri-endpoint", cri.Endpoint(), "--grace", "60s")
		if s := parseSummary(t, o); o.exit != 0 || s != (gcSummary{young: 1}) {
			t.Errorf("gc with an empty listing and one young pod: want exit 0 and kept 1 young, got %s", o)
		}
		assertAlive(t, nw, nw.list(t), x)
	})
}

// TestGCLoopDuringCreation is the whereabouts race: `eni-cni gc --grace 60s`
// (the minimum) runs in a tight loop while 10 pods are ADDed one by one, and the fake
// runtime lists a sandbox only after its ADD has returned, as containerd
// does. Each pod is made to sit through at least one whole GC pass that
// started after its ADD and before its sandbox was listed. No pass may free
// anything; afterwards every pod keeps its address, wiring and traffic.
func TestGCLoopDuringCreation(t *testing.T) {
	const maxPasses = 300
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.7.0/24"}, nil)
	pods := newPods(t, 10)
	cri := crifake.Start(t)

	type pass struct {
		out output
		err error
	}
	var (
		mu              sync.Mutex
		passes          []pass
		started, done   atomic.Int64
		stop, loopEnded = make(chan struct{}), make(chan struct{})
	)
	go func() {
		defer close(loopEnded)
		for range maxPasses {
			select {
			case <-stop:
				return
			default:
			}
			started.Add(1)
			o, err := runIn(t.Context(), n.path(), nil, nil, pluginBin, "gc", "--config", nw.confFile,
				"--cri-endpoint", cri.Endpoint(), "--grace", "60s")
			mu.Lock()
			passes = append(passes, pass{o, err})
			mu.Unlock()
			done.Add(1)
		}
	}()
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); <-loopEnded }
	defer halt()

	// awaitPass waits until a GC pass that starts after this call has ended.
	awaitPass := func(what string) {
		n0 := started.Load()
		waitUntil(t, 30*time.Second, fmt.Sprintf("a gc pass (number %d of at most %d) %s", n0+1, maxPasses, what),
			func() bool { return done.Load() > n0 })
	}

	atts := make([]attached, len(pods))
	for i, p := range pods {
		atts[i] = nw.addDirect(t, p)
		awaitPass("after the ADD of " + p.name + " and before its sandbox is listed")
		cri.SetSandboxes(readySandboxes(pods[:i+1]...)...)
	}
	awaitPass("after every sandbox is listed")
	halt()

	mu.Lock()
	defer mu.Unlock()
	sawYoung := 0
	for i, p := range passes {
		if p.err != nil {
			t.Errorf("gc pass %d: %v", i, p.err)
			continue
		}
		if p.out.exit != 0 {
			t.Errorf("gc pass %d: want exit 0, got %s", i, p.out)
			continue
		}
		if s := parseSummary(t, p.out); s.freed != 0 || s.refused || s.leftovers != 0 {
			t.Errorf("gc pass %d: want exit 0, nothing freed, no leftovers, got %s", i, p.out)
		}
		if parseSummary(t, p.out).young > 0 {
			sawYoung++
		}
	}
	if sawYoung < len(pods) {
		t.Errorf("only %d of %d gc passes saw an unlisted young pod; want at least one per pod", sawYoung, len(passes))
	}
	t.Logf("%d gc passes ran during %d ADDs; %d saw an allocation whose sandbox was not listed yet", len(passes), len(pods), sawYoung)

	l := nw.list(t)
	if len(l.Allocations) != len(pods) || l.Pool.Cooling != 0 {
		t.Errorf("list --json: want %d allocations and nothing cooling, got pool %+v", len(pods), l.Pool)
	}
	for _, a := range atts {
		assertAlive(t, nw, l, a)
	}
}
