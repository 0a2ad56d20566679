package integration

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// The EC2 tests run the plugin against the fake IMDS + EC2 server on a
// simulated instance (ec2_helpers_test.go): t3.medium, so an ENI holds 5
// secondary addresses and a second ENI is needed after a handful of pods.

// ec2Pod is one pod after ADD on an ec2 pool, with the ENI EC2 says holds
// its address.
type ec2Pod struct {
	attached
	out []byte // ADD's stdout, the prevResult of a CHECK
	eni ec2fake.ENI
}

// addEC2 runs ADD for p and looks up, in EC2's own view, which ENI holds
// the address it got.
func (en *ec2Node) addEC2(t *testing.T, nw *network, p *pod) ec2Pod {
	t.Helper()
	res, out := nw.add(t, p)
	a := ec2Pod{attached: attached{pod: p, res: res, ip: resultIP(t, res), veth: hostVethOf(t, res)}, out: out}
	e, ok := en.eniOf()[a.ip]
	if !ok {
		t.Fatalf("ADD %s: got %s, which EC2 assigned to no ENI (ENIs: %+v)", p.name, a.ip, en.fake.ENIs())
	}
	a.eni = e
	return a
}

// assertPrimaryPod: the static-mode shape (`to IP lookup main` prio 512,
// host route) and no `from` rule.
func assertPrimaryPod(t *testing.T, n *node, a ec2Pod) {
	t.Helper()
	assertWired(t, n, a.pod, a.ip, a.veth)
	if r, ok := n.fromRule(t, a.ip); ok {
		t.Errorf("pod %s on the primary ENI (%s): unexpected rule %s", a.pod.name, a.ip, r)
	}
}

// assertSecondaryPod: the static-mode shape plus `from IP lookup <dev+1>`
// at priority 1536.
func assertSecondaryPod(t *testing.T, n *node, a ec2Pod) {
	t.Helper()
	assertWired(t, n, a.pod, a.ip, a.veth)
	r, ok := n.fromRule(t, a.ip)
	switch {
	case !ok:
		t.Errorf("pod %s on %s (device %d): no rule `from %s lookup %d` priority %d; rules: %v",
			a.pod.name, a.eni.ID, a.eni.DeviceIndex, a.ip, a.eni.DeviceIndex+1, rulePrioFromPod, n.podRules(t))
	case r.Table != a.eni.DeviceIndex+1 || r.Dst != nil:
		t.Errorf("pod %s: rule %s, want `from %s lookup %d`", a.pod.name, r, a.ip, a.eni.DeviceIndex+1)
	}
}

// assertListedENIs checks `eni-cni list --json` names the ENI of each pod.
func assertListedENIs(t *testing.T, nw *network, pods ...ec2Pod) listing {
	t.Helper()
	l := nw.list(t)
	by := l.byContainer()
	for _, a := range pods {
		got, ok := by[a.pod.containerID]
		switch {
		case !ok:
			t.Errorf("list --json: no allocation for %s (%s)", a.pod.name, a.ip)
		case got.IP != a.ip.String() || got.ENI != a.eni.ID || got.HostVeth != a.veth:
			t.Errorf("list --json: %s has ip %s eni %q veth %s, want %s %s %s", a.pod.name, got.IP, got.ENI, got.HostVeth, a.ip, a.eni.ID, a.veth)
		}
	}
	return l
}

// TestEC2PodsOnENIs is the ec2 pool's story on one node: warm fills the
// pool from the primary ENI; pods on it look as in static mode; once it is
// full, warm creates and attaches a second ENI and sets up its link and
// table; pods there also get a `from` rule into that table; a warm without
// churn calls nothing; DEL without netns removes both rules and keeps the
// table.
func TestEC2PodsOnENIs(t *testing.T) {
	en := newEC2Node(t, ec2fake.Config{})
	primaryLink := en.primaryLink(t)
	primary := en.fake.PrimaryENI()
	nw := newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": 3}, nil)
	pods := newPods(t, 7)

	noChurn := func(when string) {
		t.Helper()
		before, state := en.fake.Calls(), nw.stateBytes(t)
		o := nw.mustWarm(t)
		if d := callsDelta(before, en.fake.Calls()); len(d) != 0 {
			t.Errorf("warm %s with no churn made EC2 calls %s; output %q", when, formatCalls(d), o.stdout)
		}
		if l := nw.list(t); l.Pool.Free < 3 {
			t.Errorf("warm %s: pool %+v, want at least warmIPTarget 3 free", when, l.Pool)
		}
		if got := nw.stateBytes(t); !bytes.Equal(got, state) {
			t.Logf("note: warm %s without churn rewrote the state file (same pool)", when)
		}
	}

	// Pass 1: the store is new. IMDS discovery, the type's limits, and 3
	// addresses on the primary ENI.
	// The first pass of a store also reads the ENIs back from EC2 (their
	// tags: no_manage, created by eni-cni): one DescribeNetworkInterfaces.
	// The boot's look for leaked ENIs waits for the node's window of the
	// hour (ec2/spread.go), unless it falls now.
	o := nw.mustWarm(t)
	want := map[string]int{"AssignPrivateIpAddresses": 1, "DescribeNetworkInterfaces": 1}
	if got := en.fake.Calls()["DescribeNetworkInterfaces"]; got == 2 {
		want["DescribeNetworkInterfaces"] = 2 // the node's sweep window is now
	}
	if got := en.fake.Calls(); !maps.Equal(got, want) {
		t.Errorf("first warm: EC2 calls %s, want %s", formatCalls(got), formatCalls(want))
	}
	if e, _ := en.fake.ENI(primary.ID); len(e.SecondaryIPs) != 3 {
		t.Errorf("first warm: primary ENI has secondary addresses %v, want 3", e.SecondaryIPs)
	}
	if l := nw.list(t); l.Pool.Total != 3 || l.Pool.Free != 3 {
		t.Errorf("first warm: pool %+v, want 3 free; warm said %q", l.Pool, o.stdout)
	}
	noChurn("right after the first")

	// Three pods on the primary ENI.
	var all []ec2Pod
	for _, p := range pods[:3] {
		a := en.addEC2(t, nw, p)
		if a.eni.ID != primary.ID {
			t.Errorf("ADD %s: got %s of %s, want an address of the primary ENI %s", p.name, a.ip, a.eni.ID, primary.ID)
		}
		assertPrimaryPod(t, en.node, a)
		all = append(all, a)
	}
	assertListedENIs(t, nw, all...)

	// Pass 2: no free address. The primary ENI takes 2 more (5 is its
	// limit), then warm creates an ENI for the last one, attaches it at
	// device 1 and waits for its link, which "the hypervisor" adds now.
	before := en.fake.Calls()
	o, made := en.warmAttaching(t, nw)
	if o.exit != 0 {
		t.Fatalf("second warm: want exit 0, got %s", o)
	}
	enis := en.attached()
	if len(enis) != 2 || len(made) != 1 {
		t.Fatalf("second warm: attached ENIs %+v, links made %v; want the primary and one new ENI", enis, made)
	}
	sec := enis[1]
	secLink, table := made[0], sec.DeviceIndex+1
	t.Logf("second warm: %s", bytes.TrimSpace(o.stdout))
	want = map[string]int{"AssignPrivateIpAddresses": 1, "CreateNetworkInterface": 1, "AttachNetworkInterface": 1, "ModifyNetworkInterfaceAttribute": 1}
	if got := callsDelta(before, en.fake.Calls()); !maps.Equal(got, want) {
		t.Errorf("second warm: EC2 calls %s, want %s", formatCalls(got), formatCalls(want))
	}
	if sec.DeviceIndex != 1 || !sec.DeleteOnTermination || sec.SubnetID != primary.SubnetID ||
		sec.Tags["eni-cni/instance-id"] != en.fake.Info().InstanceID || len(sec.SecondaryIPs) != 1 {
		t.Errorf("second warm: new ENI %+v; want device 1, DeleteOnTermination, the primary's subnet, tag eni-cni/instance-id, 1 secondary address", sec)
	}
	if !strings.Contains(string(o.stdout), "created "+sec.ID) {
		t.Errorf("second warm: output %q does not report creating %s", o.stdout, sec.ID)
	}
	subnet := netip.MustParsePrefix(ec2SubnetCIDR)
	en.assertENITable(t, secLink, table, subnet)
	noChurn("right after the second")

	// Three more pods take the rest of the pool: two on the primary ENI,
	// one on the new ENI.
	for _, p := range pods[3:6] {
		a := en.addEC2(t, nw, p)
		all = append(all, a)
		if a.eni.ID == primary.ID {
			assertPrimaryPod(t, en.node, a)
		} else {
			assertSecondaryPod(t, en.node, a)
		}
	}
	var onPrimary, onSecondary []ec2Pod
	for _, a := range all {
		if a.eni.ID == primary.ID {
			onPrimary = append(onPrimary, a)
		} else {
			onSecondary = append(onSecondary, a)
		}
	}
	if len(onPrimary) != 5 || len(onSecondary) != 1 || onSecondary[0].eni.ID != sec.ID {
		t.Fatalf("after 6 ADDs: %d pods on the primary ENI, %d elsewhere (%+v); want 5 and 1 on %s", len(onPrimary), len(onSecondary), onSecondary, sec.ID)
	}

	// Pass 3: 3 more addresses, all on the new ENI (the primary is full),
	// and a 7th pod there: two pods share the ENI's table.
	before = en.fake.Calls()
	nw.mustWarm(t)
	if got, want := callsDelta(before, en.fake.Calls()), map[string]int{"AssignPrivateIpAddresses": 1}; !maps.Equal(got, want) {
		t.Errorf("third warm: EC2 calls %s, want %s", formatCalls(got), formatCalls(want))
	}
	a7 := en.addEC2(t, nw, pods[6])
	if a7.eni.ID != sec.ID {
		t.Fatalf("ADD %s: got %s on %s, want an address of %s", a7.pod.name, a7.ip, a7.eni.ID, sec.ID)
	}
	assertSecondaryPod(t, en.node, a7)
	onSecondary = append(onSecondary, a7)
	all = append(all, a7)
	en.assertENITable(t, secLink, table, subnet)
	l := assertListedENIs(t, nw, all...)
	if l.Pool.Allocated != 7 {
		t.Errorf("list: pool %+v, want 7 allocated", l.Pool)
	}

	// CHECK agrees with the wiring of a pod on the secondary ENI.
	s1 := onSecondary[0]
	check := nw.config(t, func(c map[string]any) { c["prevResult"] = json.RawMessage(s1.out) })
	if o := nw.run(t, cniEnv("CHECK", s1.pod), check); o.exit != 0 {
		t.Errorf("CHECK of %s on %s: want exit 0, got %s", s1.pod.name, sec.ID, o)
	}

	// The point of the `from` rule: traffic of a pod on the secondary ENI
	// leaves through that ENI, a primary pod's through the main table.
	outside := netip.MustParseAddr("192.0.2.10")
	gw := subnet.Addr().Next().String()
	if r := en.routeGet(t, outside, s1.ip, s1.veth); !strings.Contains(r, "via "+gw+" dev "+secLink+" table "+strconv.Itoa(table)) {
		t.Errorf("route of %s -> %s: %q, want via %s dev %s table %d", s1.ip, outside, r, gw, secLink, table)
	}
	p1 := onPrimary[0]
	if r := en.routeGet(t, outside, p1.ip, p1.veth); !strings.Contains(r, "via "+gw+" dev "+primaryLink) || strings.Contains(r, "table") {
		t.Errorf("route of %s -> %s: %q, want via %s dev %s in main", p1.ip, outside, r, gw, primaryLink)
	}

	// Traffic between a pod on each ENI and from the node, all via the node.
	for _, c := range []struct {
		from string
		to   netip.Addr
	}{{p1.pod.path(), s1.ip}, {s1.pod.path(), p1.ip}, {en.path(), s1.ip}, {a7.pod.path(), p1.ip}} {
		if err := ping(t.Context(), c.from, c.to); err != nil {
			t.Error(err)
		}
	}

	// DEL with CNI_NETNS="": the pod's rules and veth go, the address
	// cools down, the ENI's table stays for the other pod on it.
	nw.del(t, s1.pod, "")
	en.assertNoHostSide(t, s1.ip, s1.veth)
	l = nw.list(t)
	if _, still := l.byContainer()[s1.pod.containerID]; still || l.Pool.Cooling != 1 || l.Pool.Allocated != 6 {
		t.Errorf("after DEL of %s: pool %+v (allocation still listed: %t), want 6 allocated, 1 cooling", s1.pod.name, l.Pool, still)
	}
	en.assertENITable(t, secLink, table, subnet)
	assertSecondaryPod(t, en.node, a7)
	nw.del(t, s1.pod, "") // twice is fine

	nw.del(t, p1.pod, "")
	en.assertNoHostSide(t, p1.ip, p1.veth)

	for _, a := range all {
		if a.pod != s1.pod && a.pod != p1.pod {
			nw.del(t, a.pod, "")
		}
	}
	en.assertNoPods(t)
	if l := nw.list(t); l.Pool.Allocated != 0 || l.Pool.Cooling != 7 || len(l.Allocations) != 0 {
		t.Errorf("after DEL of every pod: pool %+v, %d allocations; want 0 allocated, 7 cooling", l.Pool, len(l.Allocations))
	}
	// The table outlives its last pod: the ENI is still attached and warm
	// may hand its addresses out again.
	en.assertENITable(t, secLink, table, subnet)
}

// TestEC2Status runs STATUS (CNI 1.1) on an ec2 pool: an empty pool with
// IMDS unreachable cannot serve ADD (50); an empty pool with IMDS up can
// (warm will fill it), and so can a non-empty pool without IMDS. ADD on an
// empty pool reads IMDS once: without addresses there it is "try again
// later" (11) naming `eni-cni warm`, with addresses it succeeds.
func TestEC2Status(t *testing.T) {
	en := newEC2Node(t, ec2fake.Config{})
	en.primaryLink(t)
	primary := en.fake.PrimaryENI()
	// addWaitSeconds 0: ADD on the empty pool fails at once rather than
	// starting warm and waiting for it (TestEC2DryPool* test that).
	// readyWhenFilled off: STATUS as before issue 20 (its default is
	// TestEC2StatusNotReadyUntilFilled's).
	nw := newEC2Network(t, en, "1.1.0", map[string]any{"warmIPTarget": 2, "addWaitSeconds": 0, "readyWhenFilled": false}, map[string]any{"imdsEndpoint": ec2Unreachable})
	status := func() output { return nw.run(t, cniEnv("STATUS", nil), nw.config(t)) }
	setIMDS := func(url string) { nw.setConf(t, func(c map[string]any) { c["imdsEndpoint"] = url }) }

	start := time.Now()
	o := status()
	e := wantCNIError(t, "STATUS with an empty pool and IMDS unreachable", o, 50, "cannot serve ADD", "pool is empty")
	// The reason must say what failed (docs/ARCHITECTURE.md, Errors): IMDS.
	if m := strings.ToLower(e.Msg); !strings.Contains(m, "instance metadata") && !strings.Contains(m, "imds") {
		t.Errorf("STATUS with IMDS unreachable: message %q does not say that IMDS failed", e.Msg)
	}
	t.Logf("STATUS with IMDS unreachable took %s: %s", time.Since(start).Round(time.Millisecond), o.stdout)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("STATUS with IMDS unreachable took %s; it must give up within a few seconds", d)
	}

	// IMDS that accepts the connection but does not answer: STATUS gives
	// up after its 3 s and still has to say that IMDS failed.
	setIMDS(en.url())
	en.fake.SetIMDSLatency(20 * time.Second)
	start = time.Now()
	o = status()
	en.fake.SetIMDSLatency(0)
	e = wantCNIError(t, "STATUS with an empty pool and IMDS not answering", o, 50, "cannot serve ADD", "pool is empty")
	t.Logf("STATUS with IMDS not answering took %s: %s", time.Since(start).Round(time.Millisecond), o.stdout)
	if m := strings.ToLower(e.Msg); !strings.Contains(m, "instance metadata") && !strings.Contains(m, "imds") {
		t.Errorf("STATUS with IMDS not answering: message %q does not say that IMDS failed", e.Msg)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("STATUS with IMDS not answering took %s; it must give up within a few seconds", d)
	}

	if o := status(); o.exit != 0 {
		t.Errorf("STATUS with an empty pool and IMDS up: want exit 0, got %s", o)
	}
	if c := en.fake.Calls(); len(c) != 0 {
		t.Errorf("STATUS made EC2 calls %s; it may only read IMDS", formatCalls(c))
	}

	empty := newPod(t, "pod-empty")
	o = nw.addOut(t, empty)
	wantCNIError(t, "ADD on an empty pool, IMDS listing nothing", o, 11, "eni-cni warm")
	empty.assertUnwired(t)

	seeded, err := en.fake.SeedIPs(primary.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	p := newPod(t, "pod-imds")
	a := en.addEC2(t, nw, p)
	if a.eni.ID != primary.ID || (a.ip.String() != seeded[0] && a.ip.String() != seeded[1]) {
		t.Errorf("ADD after addresses appeared in IMDS: got %s on %s, want one of %v on %s", a.ip, a.eni.ID, seeded, primary.ID)
	}
	assertPrimaryPod(t, en.node, a)
	assertListedENIs(t, nw, a)
	if c := en.fake.Calls(); len(c) != 0 {
		t.Errorf("ADD made EC2 calls %s; only warm may", formatCalls(c))
	}

	setIMDS(ec2Unreachable)
	if o := status(); o.exit != 0 {
		t.Errorf("STATUS with addresses in the pool and IMDS unreachable: want exit 0, got %s", o)
	}
	nw.del(t, p, "")
}

// TestEC2WarmFailures feeds `eni-cni warm` bad EC2 and IMDS replies through
// the binary: each time it must exit non-zero with a one-line reason on
// stderr and leave the state file as it was but for the section's growth
// record, which readyWhenFilled keeps of how the pass ended (and EC2
// without a stray ENI).
func TestEC2WarmFailures(t *testing.T) {
	en := newEC2Node(t, ec2fake.Config{})
	en.primaryLink(t)
	primary := en.fake.PrimaryENI()
	nw := newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": 3}, nil)
	nw.mustWarm(t)
	for _, p := range newPods(t, 2) {
		en.addEC2(t, nw, p)
	}
	// The pool is short by 2 now: the next warm must call EC2.

	failing := func(t *testing.T, nw *network, what string, wantStderr ...string) (output, map[string]int) {
		t.Helper()
		state, before := nw.stateBytes(t), en.fake.Calls()
		enisBefore := en.fake.ENIs()
		start := time.Now()
		o := nw.warm(t)
		calls := callsDelta(before, en.fake.Calls())
		// (calls are the fake's, so the concurrent throttled case's show up
		// in the refused one's window too; only the callers that own the
		// fake's endpoint check them.)
		t.Logf("%s: exit %d after %s, stderr %q", what, o.exit, time.Since(start).Round(time.Millisecond), o.stderr)
		if o.exit == 0 {
			t.Errorf("%s: warm exited 0; want non-zero. %s", what, o)
		}
		if cause, ok := strings.CutPrefix(what, sameCause); ok {
			// The node's once-a-boot sweep for leaked ENIs runs in the
			// node's window of the hour (spread.go): a pass inside it
			// meets the same failure there too, on a line of its own.
			causeLines(t, what, o, cause, wantStderr...)
		} else {
			oneLine(t, what, o, wantStderr...)
		}
		if got := nw.stateBytes(t); !bytes.Equal(withoutGrowth(t, got), withoutGrowth(t, state)) {
			t.Errorf("%s: warm changed the state file beyond the growth record\nbefore: %s\nafter:  %s", what, state, got)
		}
		if got := en.fake.ENIs(); len(got) != len(enisBefore) {
			t.Errorf("%s: EC2 has %d ENIs after the failed warm, had %d: %+v", what, len(got), len(enisBefore), got)
		}
		return o, calls
	}

	t.Run("EC2 denies the call", func(t *testing.T) {
		en.fake.InjectFault("AssignPrivateIpAddresses", ec2fake.Fault{Code: "UnauthorizedOperation", Message: "You are not authorized to perform this operation."})
		defer en.fake.ClearFaults()
		_, calls := failing(t, nw, "AssignPrivateIpAddresses denied", "UnauthorizedOperation", "assign addresses to "+primary.ID)
		if calls["AssignPrivateIpAddresses"] != 1 {
			t.Errorf("a denied call was retried: %s", formatCalls(calls))
		}
	})

	// The SDK retries these with backoff (MaxAttempts 6, ec2/clients.go):
	// each takes ~15-20 s to give up. They run one after the other: warm
	// passes on one node never overlap (the second would skip). Neither
	// changes anything; the refused one uses its own copy of the config.
	t.Run("retries exhausted", func(t *testing.T) {
		t.Run("EC2 throttles every call", func(t *testing.T) {
			en.fake.Throttle(ec2fake.AllActions, 1000)
			_, calls := failing(t, nw, sameCause+"RequestLimitExceeded", "RequestLimitExceeded", "assign addresses to "+primary.ID)
			t.Logf("throttled: EC2 calls %s", formatCalls(calls))
			if n := calls["AssignPrivateIpAddresses"]; n < 2 || n > 6 {
				t.Errorf("throttled: AssignPrivateIpAddresses called %d times, want a bounded retry (2-6)", n)
			}
		})
		t.Run("EC2 endpoint refuses connections", func(t *testing.T) {
			en.fake.ClearFaults()
			refused := nw.withConf(t, func(c map[string]any) { c["ec2Endpoint"] = ec2Unreachable })
			failing(t, refused, sameCause+"connection refused", "connection refused", "assign addresses to "+primary.ID)
		})
	})
	en.fake.ClearFaults()

	t.Run("EC2 throttles twice then answers", func(t *testing.T) {
		en.fake.Throttle("AssignPrivateIpAddresses", 2)
		defer en.fake.ClearFaults()
		before := en.fake.Calls()
		nw.mustWarm(t)
		if got := callsDelta(before, en.fake.Calls()); got["AssignPrivateIpAddresses"] != 3 {
			t.Errorf("warm through 2 throttled replies: calls %s, want 3 AssignPrivateIpAddresses", formatCalls(got))
		}
		if l := nw.list(t); l.Pool.Free != 3 {
			t.Errorf("warm through throttling: pool %+v, want 3 free", l.Pool)
		}
	})

	p := newPod(t, "pod-3")
	en.addEC2(t, nw, p) // short by one again

	t.Run("attach fails: the new ENI is deleted again", func(t *testing.T) {
		// The primary ENI is full (5 addresses), so warm must create one.
		if e, _ := en.fake.ENI(primary.ID); len(e.SecondaryIPs) != 5 {
			t.Fatalf("primary ENI has %d secondary addresses, want 5 (full)", len(e.SecondaryIPs))
		}
		en.fake.InjectFault("AttachNetworkInterface", ec2fake.Fault{Code: "AttachmentLimitExceeded", Message: "Interface count 3 exceeds the limit for t3.medium"})
		_, calls := failing(t, nw, "AttachNetworkInterface failing", "AttachmentLimitExceeded", "attach")
		en.fake.ClearFaults()
		if calls["CreateNetworkInterface"] != 1 || calls["DeleteNetworkInterface"] != 1 {
			t.Errorf("attach failure: calls %s, want the created ENI deleted again", formatCalls(calls))
		}
		o, made := en.warmAttaching(t, nw)
		if o.exit != 0 || len(made) != 1 {
			t.Fatalf("warm after the fault cleared: %s, links made %v; want exit 0 and one new ENI", o, made)
		}
	})

	t.Run("IMDS fails on a new node", func(t *testing.T) {
		// A node of its own: on this one, a network without a state file
		// next to pods of ours looks like a lost state, and is refused.
		en := newEC2Node(t, ec2fake.Config{})
		fresh := newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": 3}, nil)
		en.fake.FailIMDS(1000, 500)
		defer en.fake.ClearFaults()
		before := en.fake.Calls()
		o := fresh.warm(t)
		if o.exit == 0 {
			t.Fatalf("warm with IMDS failing: exit 0; want non-zero. %s", o)
		}
		oneLine(t, "IMDS failing", o, "instance metadata")
		if d := callsDelta(before, en.fake.Calls()); len(d) != 0 {
			t.Errorf("warm called EC2 (%s) without knowing the instance", formatCalls(d))
		}
		if l := fresh.list(t); l.Pool.Total != 0 {
			t.Errorf("warm with IMDS failing: pool %+v, want empty", l.Pool)
		}
	})
}

// sameCause starts the name of a failing case whose stderr may carry more
// than one line, each naming the cause that follows it (causeLines).
const sameCause = "every call fails with "

// causeLines wants stderr to start "eni-cni: ", contain every one of want,
// and name cause on each of its lines: one failure, whatever calls met it.
func causeLines(t *testing.T, what string, o output, cause string, want ...string) {
	t.Helper()
	s := strings.TrimRight(string(o.stderr), "\n")
	if !strings.HasPrefix(s, "eni-cni: ") {
		t.Errorf("%s: stderr %q, want it to start with \"eni-cni: \"", what, o.stderr)
	}
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, cause) {
			t.Errorf("%s: stderr line %q does not name %q", what, l, cause)
		}
	}
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s: stderr %q does not contain %q", what, s, w)
		}
	}
}

// oneLine wants exactly one line on stderr, "eni-cni: ...", containing
// every one of want.
func oneLine(t *testing.T, what string, o output, want ...string) {
	t.Helper()
	s := strings.TrimRight(string(o.stderr), "\n")
	if strings.Count(s, "\n") != 0 || !strings.HasPrefix(s, "eni-cni: ") {
		t.Errorf("%s: stderr %q, want one line starting with \"eni-cni: \"", what, o.stderr)
	}
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s: stderr %q does not contain %q", what, s, w)
		}
	}
}

// TestEC2PreattachedENIWithFakeCommand uses the ec2fake command as the demo
// does: started inside the node namespace, an ENI pre-attached
// (--extra-enis 1) whose link exists before any eni-cni call, endpoints and
// dummy credentials from its --env-file (the SDK's own variables, no config
// keys), call counts from its --describe file. warm does not set up an ENI
// it did not create: the first ADD of an address on it does.
func TestEC2PreattachedENIWithFakeCommand(t *testing.T) {
	n := newNode(t)
	en := &ec2Node{node: n, vpc: newNetNS(t), links: map[string]string{}}
	envFile := filepath.Join(t.TempDir(), "ec2.env")
	f := startEC2FakeCmd(t, n, "--instance-type", ec2Type, "--vpc-cidr", ec2VPCCIDR, "--subnet-cidr", ec2SubnetCIDR,
		"--secondary-ips", "5", "--extra-enis", "1", "--env-file", envFile)
	d := f.read(t)
	if len(d.ENIs) != 2 || d.IMDSURL != f.url {
		t.Fatalf("describe file: %+v, want 2 ENIs and URL %s", d, f.url)
	}
	primary, extra := d.ENIs[0], d.ENIs[1]
	en.addENILink(t, primary)
	extraLink := en.addENILink(t, extra)

	env := map[string]string{}
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		env[k] = v
	}
	if env["AWS_ENDPOINT_URL_EC2"] != f.url || env["AWS_ACCESS_KEY_ID"] == "" {
		t.Fatalf("env file %q", b)
	}
	nw := newNetwork(t, n, "1.0.0", nil, map[string]any{"mtu": ec2MTU, "pool": map[string]any{"source": "ec2", "warmIPTarget": 6}})
	warm := func() output {
		t.Helper()
		o, err := runIn(t.Context(), n.path(), env, nil, pluginBin, "warm", "--config", nw.confFile)
		if err != nil {
			t.Fatal(err)
		}
		if o.exit != 0 {
			t.Fatalf("warm: want exit 0, got %s", o)
		}
		return o
	}

	// Discovery finds 5 addresses on the (full) primary ENI; 1 more goes on
	// the pre-attached ENI once EC2 has shown its tags (no no_manage); one
	// DescribeNetworkInterfaces for that, and one more if the node's window
	// for the boot's look for leaked ENIs is now (ec2/spread.go).
	o := warm()
	d = f.read(t)
	want := map[string]int{"AssignPrivateIpAddresses": 1, "DescribeNetworkInterfaces": 1}
	if d.Calls["DescribeNetworkInterfaces"] == 2 {
		want["DescribeNetworkInterfaces"] = 2
	}
	if !maps.Equal(d.Calls, want) || len(d.ENIs[1].SecondaryIPs) != 1 {
		t.Errorf("warm: describe file calls %s, ENI %s addresses %v; want %s and 1 address; warm said %q",
			formatCalls(d.Calls), extra.ID, d.ENIs[1].SecondaryIPs, formatCalls(want), o.stdout)
	}
	warm()
	if got := f.read(t).Calls; !maps.Equal(got, want) {
		t.Errorf("warm without churn: describe file calls went from %s to %s", formatCalls(want), formatCalls(got))
	}
	// warm sets up (and keeps up) every ENI it manages, found ones too.
	en.assertENITable(t, extraLink, extra.DeviceIndex+1, netip.MustParsePrefix(ec2SubnetCIDR))

	// Six pods: five on the primary ENI, the sixth on the pre-attached one.
	eniOf := map[string]ec2fake.ENI{}
	for _, e := range f.read(t).ENIs {
		for _, ip := range e.SecondaryIPs {
			eniOf[ip] = e
		}
	}
	var onExtra *ec2Pod
	for _, p := range newPods(t, 6) {
		res, out := nw.add(t, p)
		a := ec2Pod{attached: attached{pod: p, res: res, ip: resultIP(t, res), veth: hostVethOf(t, res)}, out: out, eni: eniOf[resultIP(t, res).String()]}
		switch a.eni.ID {
		case primary.ID:
			assertPrimaryPod(t, n, a)
		case extra.ID:
			assertSecondaryPod(t, n, a)
			onExtra = &a
		default:
			t.Fatalf("ADD %s: got %s, which EC2 assigned to no ENI", p.name, a.ip)
		}
	}
	if onExtra == nil {
		t.Fatalf("no pod got the address of %s", extra.ID)
	}
	en.assertENITable(t, extraLink, extra.DeviceIndex+1, netip.MustParsePrefix(ec2SubnetCIDR))
	assertListedENIs(t, nw, *onExtra)
	if err := ping(t.Context(), onExtra.pod.path(), netip.MustParseAddr(strings.TrimSuffix(nodeAddr, "/32"))); err != nil {
		t.Error(err)
	}

	nw.del(t, onExtra.pod, "")
	n.assertNoHostSide(t, onExtra.ip, onExtra.veth)
	en.assertENITable(t, extraLink, extra.DeviceIndex+1, netip.MustParsePrefix(ec2SubnetCIDR))
	if got := f.read(t).Calls; !maps.Equal(got, want) {
		t.Errorf("ADD/DEL made EC2 calls: describe file calls went from %s to %s", formatCalls(want), formatCalls(got))
	}
}

// TestEC2ENIInOtherSubnet configures where new ENIs go: maxENIs caps them
// (warm then reports the shortage and exits 0 without creating one);
// subnetID, securityGroupIDs and tags are used for the ENI warm creates,
// whose table then holds that subnet's route and router (DescribeSubnets).
func TestEC2ENIInOtherSubnet(t *testing.T) {
	sgs := []string{"sg-0aaaa1111bbbb2222", "sg-0cccc3333dddd4444"}
	en := newEC2Node(t, ec2fake.Config{
		Subnets:          []ec2fake.SubnetConfig{{CIDR: ec2SubnetCIDR}, {CIDR: ec2Subnet2CIDR}},
		SecurityGroupIDs: sgs,
	})
	en.primaryLink(t)
	primary := en.fake.PrimaryENI()
	if _, err := en.fake.SeedIPs(primary.ID, 5); err != nil { // the primary ENI is full
		t.Fatal(err)
	}
	subnet2 := en.fake.Info().Subnets[1]
	nw := newEC2Network(t, en, "1.0.0", map[string]any{
		"warmIPTarget": 6, "maxENIs": 1, "subnetID": subnet2.ID,
		"securityGroupIDs": sgs[1:], "tags": map[string]string{"team": "net"},
	}, nil)

	o := nw.mustWarm(t)
	if c := en.fake.Calls(); c["CreateNetworkInterface"] != 0 || len(en.attached()) != 1 {
		t.Errorf("warm with maxENIs 1: calls %s, ENIs %d; want no ENI created", formatCalls(c), len(en.attached()))
	}
	if !strings.Contains(string(o.stdout), "full") {
		t.Errorf("warm with maxENIs 1 and the primary ENI full: output %q does not report the shortage", o.stdout)
	}
	if l := nw.list(t); l.Pool.Total != 5 {
		t.Errorf("warm with maxENIs 1: pool %+v, want the 5 addresses IMDS lists", l.Pool)
	}

	nw.setConf(t, func(c map[string]any) { c["pool"].(map[string]any)["maxENIs"] = 2 })
	before := en.fake.Calls()
	o, made := en.warmAttaching(t, nw)
	if o.exit != 0 || len(made) != 1 {
		t.Fatalf("warm with maxENIs 2: %s, links made %v; want exit 0 and one new ENI", o, made)
	}
	want := map[string]int{"CreateNetworkInterface": 1, "DescribeSubnets": 1, "AttachNetworkInterface": 1, "ModifyNetworkInterfaceAttribute": 1}
	if got := callsDelta(before, en.fake.Calls()); !maps.Equal(got, want) {
		t.Errorf("warm creating an ENI in %s: calls %s, want %s", subnet2.ID, formatCalls(got), formatCalls(want))
	}
	sec := en.attached()[1]
	if sec.SubnetID != subnet2.ID || len(sec.SecurityGroupIDs) != 1 || sec.SecurityGroupIDs[0] != sgs[1] || sec.Tags["team"] != "net" {
		t.Errorf("new ENI %+v: want subnet %s, security groups [%s], tag team=net", sec, subnet2.ID, sgs[1])
	}
	table, subnet := sec.DeviceIndex+1, netip.MustParsePrefix(ec2Subnet2CIDR)
	en.assertENITable(t, made[0], table, subnet)

	// The pool is in address order: the sixth pod gets the new ENI's address.
	var last ec2Pod
	for _, p := range newPods(t, 6) {
		last = en.addEC2(t, nw, p)
	}
	if last.eni.ID != sec.ID || !subnet.Contains(last.ip) {
		t.Fatalf("sixth pod: %s on %s, want an address of %s in %s", last.ip, last.eni.ID, sec.ID, subnet)
	}
	assertSecondaryPod(t, en.node, last)
	if r := en.routeGet(t, netip.MustParseAddr("192.0.2.10"), last.ip, last.veth); !strings.Contains(r, "via "+subnet.Addr().Next().String()+" dev "+made[0]) {
		t.Errorf("route of %s -> 192.0.2.10: %q, want via the router of %s on %s", last.ip, r, subnet, made[0])
	}
	if err := ping(t.Context(), en.path(), last.ip); err != nil {
		t.Error(err)
	}
	nw.del(t, last.pod, "")
	en.assertNoHostSide(t, last.ip, last.veth)

	// The node loses the ENI's set-up (link down, table flushed): the next
	// ADD of an address on it (the same one once it has cooled, the rest
	// is taken) sets it up again before wiring the pod.
	link, err := en.h.LinkByName(made[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := en.h.LinkSetDown(link); err != nil { // takes the table's routes with it
		t.Fatal(err)
	}
	if rs := en.tableRoutes(t, table); len(rs) != 0 {
		t.Fatalf("table %d after %s went down: %v, want empty", table, made[0], rs)
	}
	nw.endCooldowns(t)
	again := en.addEC2(t, nw, newPod(t, "pod-again"))
	if again.eni.ID != sec.ID {
		t.Fatalf("ADD after DEL: got %s on %s, want the address of %s again", again.ip, again.eni.ID, sec.ID)
	}
	assertSecondaryPod(t, en.node, again)
	en.assertENITable(t, made[0], table, subnet)
	if err := ping(t.Context(), en.path(), again.ip); err != nil {
		t.Error(err)
	}
}

// TestEC2PrefixDelegation: with prefixDelegation warm asks for a /28 on the
// primary ENI, every one of its 16 addresses goes into the pool, and a pod
// gets one of them, wired as on the primary ENI.
func TestEC2PrefixDelegation(t *testing.T) {
	en := newEC2Node(t, ec2fake.Config{})
	en.primaryLink(t)
	primary := en.fake.PrimaryENI()
	nw := newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": 3, "prefixDelegation": true}, nil)
	nw.mustWarm(t)
	e, _ := en.fake.ENI(primary.ID)
	if len(e.Prefixes) != 1 || len(e.SecondaryIPs) != 0 {
		t.Fatalf("warm with prefixDelegation: primary ENI has prefixes %v and addresses %v; want one /28 and no single address", e.Prefixes, e.SecondaryIPs)
	}
	prefix := netip.MustParsePrefix(e.Prefixes[0])
	if l := nw.list(t); l.Pool.Total != 16 || l.Pool.Free != 16 {
		t.Errorf("pool %+v, want the prefix's 16 addresses free", l.Pool)
	}
	before := en.fake.Calls()
	nw.mustWarm(t)
	if d := callsDelta(before, en.fake.Calls()); len(d) != 0 {
		t.Errorf("warm with no churn made EC2 calls %s", formatCalls(d))
	}
	p := newPod(t, "pod-prefix")
	res, _ := nw.add(t, p)
	ip, veth := resultIP(t, res), hostVethOf(t, res)
	if !prefix.Contains(ip) {
		t.Fatalf("ADD: got %s, want an address of the delegated prefix %s", ip, prefix)
	}
	a := ec2Pod{attached: attached{pod: p, res: res, ip: ip, veth: veth}, eni: e}
	assertPrimaryPod(t, en.node, a)
	assertListedENIs(t, nw, a)
	if err := ping(t.Context(), en.path(), ip); err != nil {
		t.Error(err)
	}
	nw.del(t, p, "")
	en.assertNoPods(t)
}

// TestEC2ENILinkMissing: an address on an ENI whose link is not (yet) on the
// node, as after a warm that gave up waiting for it. ADD must fail cleanly:
// nothing wired, the address back in the pool without cooldown; once the
// link appears the same ADD succeeds and sets the ENI up.
func TestEC2ENILinkMissing(t *testing.T) {
	en := newEC2Node(t, ec2fake.Config{})
	en.primaryLink(t)
	primary := en.fake.PrimaryENI()
	if _, err := en.fake.SeedIPs(primary.ID, 5); err != nil {
		t.Fatal(err)
	}
	extra, err := en.fake.SeedENI(ec2fake.ENISpec{SecondaryIPCount: 1, DeleteOnTermination: true})
	if err != nil {
		t.Fatal(err)
	}
	nw := newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": 0}, nil)
	nw.mustWarm(t)
	for _, p := range newPods(t, 5) {
		if a := en.addEC2(t, nw, p); a.eni.ID != primary.ID {
			t.Fatalf("ADD %s: got %s on %s, want the primary ENI", p.name, a.ip, a.eni.ID)
		}
	}

	p := newPod(t, "pod-nolink")
	o := nw.addOut(t, p)
	e := cniError(t, "ADD of an address on an ENI without a link", o)
	t.Logf("ADD without the ENI's link: code %d, %q", e.Code, e.Msg)
	if !containsAll(e.Msg, extra.ID, extra.MAC) {
		t.Errorf("ADD without the ENI's link: message %q should name the ENI %s and its MAC %s", e.Msg, extra.ID, extra.MAC)
	}
	p.assertUnwired(t)
	l := nw.list(t)
	if _, ok := l.byContainer()[p.containerID]; ok || l.Pool.Allocated != 5 || l.Pool.Cooling != 0 || l.Pool.Free != 1 {
		t.Errorf("after the failed ADD: pool %+v; want 5 allocated, the address free again, none cooling", l.Pool)
	}
	if r, ok := en.fromRule(t, netip.MustParseAddr(extra.SecondaryIPs[0])); ok {
		t.Errorf("the failed ADD left rule %s", r)
	}

	link := en.addENILink(t, extra)
	a := en.addEC2(t, nw, p)
	if a.eni.ID != extra.ID {
		t.Fatalf("ADD once the link is there: got %s on %s, want %s", a.ip, a.eni.ID, extra.ID)
	}
	assertSecondaryPod(t, en.node, a)
	en.assertENITable(t, link, extra.DeviceIndex+1, netip.MustParsePrefix(ec2SubnetCIDR))
}

// withoutGrowth is a state file without its ec2 section's growth record
// (how the last pass's growing ended), re-encoded for comparison.
func withoutGrowth(t *testing.T, state []byte) []byte {
	t.Helper()
	if state == nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(state, &m); err != nil {
		t.Fatalf("state file: %v", err)
	}
	if sec, ok := m["ec2"].(map[string]any); ok {
		delete(sec, "growth")
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
