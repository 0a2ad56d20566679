package ec2

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// Scenarios of the instance changing behind eni-cni's back, each against
// the fake with the real SDK on the wire.

func (e *env) pool(t *testing.T) map[netip.Addr]section.Addr {
	t.Helper()
	_, _, src := e.counts(t)
	m := map[netip.Addr]section.Addr{}
	for _, a := range src.Addrs {
		m[a.IP] = a
	}
	return m
}

// passes runs the warm timer n times, 30 s apart.
func (e *env) passes(t testing.TB, n int) {
	t.Helper()
	for range n {
		e.now = e.now.Add(30 * time.Second)
		e.warm(t)
	}
}

func TestIdentityMismatchDropsRecordsAndNeverTouchesTheOldENIs(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 7})
	e.warm(t) // 5 on the primary ENI, a second ENI with 2
	builder := e.fake.Info().InstanceID
	before := e.fake.ENIs()
	if len(before) != 2 {
		t.Fatalf("setup: %d ENIs", len(before))
	}
	// The disk is baked into an image and boots as another instance.
	if err := e.fake.BecomeInstance("i-0aaaabbbbccccdddd"); err != nil {
		t.Fatal(err)
	}
	e.mgr.BootID = "b2"
	e.fake.ResetCalls()
	e.out.Reset()
	e.warm(t)
	if !strings.Contains(e.out.String(), "WARNING: the store describes instance "+builder+" but this is i-0aaaabbbbccccdddd") {
		t.Errorf("no loud warning:\n%s", e.out)
	}
	_, _, src := e.counts(t)
	if src.InstanceID != "i-0aaaabbbbccccdddd" || src.VerifiedBoot != "b2" {
		t.Errorf("section of %s verified in %q", src.InstanceID, src.VerifiedBoot)
	}
	old := map[string]bool{}
	for _, b := range before {
		old[b.ID] = true
		if now, _ := e.fake.ENI(b.ID); now.InstanceID != builder || len(now.SecondaryIPs) != len(b.SecondaryIPs) {
			t.Errorf("the builder's ENI %s changed: %+v", b.ID, now)
		}
	}
	for _, en := range src.ENIs {
		if old[en.ID] {
			t.Errorf("the builder's ENI %s is still in the store", en.ID)
		}
	}
	mine := map[string]bool{}
	for _, en := range e.fake.ENIs() {
		if en.InstanceID == "i-0aaaabbbbccccdddd" {
			mine[en.ID] = true
		}
	}
	for _, a := range src.Addrs {
		if !mine[a.ENI] {
			t.Errorf("%s of %s in the new instance's pool", a.IP, a.ENI)
		}
	}
	if c, _, _ := e.counts(t); c.Free != 7 {
		t.Errorf("pool not rebuilt on the new instance: %+v\n%s", c, e.out)
	}
}

func TestDetachedENIIsNoticed(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 7})
	e.warm(t)
	_, _, src := e.counts(t)
	second := src.ENIs[1]
	pods := e.addPods(t, 7) // 5 on the primary, 2 on the second ENI
	var onSecond []alloc.Allocation
	for _, p := range pods {
		if p.ENI == second.ID {
			onSecond = append(onSecond, p)
		}
	}
	e.passes(t, 1) // tops up: the second ENI gets more free addresses
	if err := e.fake.DetachENI(second.ID); err != nil {
		t.Fatal(err)
	}
	e.fake.ResetCalls()
	e.out.Reset()
	e.passes(t, 1)
	if !strings.Contains(e.out.String(), second.ID+" was detached from this instance behind eni-cni's back") {
		t.Errorf("the detach was not noticed:\n%s", e.out)
	}
	if n := e.fake.Calls()["DescribeNetworkInterfaces"]; n != 1 {
		t.Errorf("%d describes, want the one IMDS's disagreement called for", n)
	}
	_, _, src = e.counts(t)
	if _, ok := src.ENI(second.ID); ok {
		t.Error("the detached ENI is still in the store")
	}
	lost := src.Lost()
	if len(lost) != len(onSecond) {
		t.Fatalf("lost %v, want the %d allocated addresses of the detached ENI", lost, len(onSecond))
	}
	for _, a := range src.Addrs {
		if a.ENI == second.ID && !a.Lost {
			t.Errorf("free address %s of the detached ENI still in the pool", a.IP)
		}
	}
	for _, l := range lost {
		if !strings.Contains(e.out.String(), "WARNING: "+l.IP.String()) {
			t.Errorf("no warning about %s:\n%s", l.IP, e.out)
		}
	}
	// Never handed out again, even once free: release the pods and fill.
	for _, p := range onSecond {
		if _, _, err := e.mgr.Release(context.Background(), p.Key, p.IP); err != nil {
			t.Fatal(err)
		}
	}
	e.passes(t, 1)
	got := e.pool(t)
	for _, p := range onSecond {
		if _, ok := got[p.IP]; ok {
			t.Errorf("lost %s still in the pool after its pod left", p.IP)
		}
	}
	for _, a := range e.addPods(t, 5) {
		if slices.ContainsFunc(onSecond, func(p alloc.Allocation) bool { return p.IP == a.IP }) {
			t.Errorf("lost address %s handed out again", a.IP)
		}
	}
	// eni-cni created it: left available, it is deleted once past the
	// leak age rather than hold subnet addresses forever.
	if en, _ := e.fake.ENI(second.ID); en.Status != "available" {
		t.Fatalf("detached ENI: %+v", en)
	}
	e.now = e.now.Add(leakAge + sweepEvery)
	e.passes(t, 1)
	if _, ok := e.fake.ENI(second.ID); ok {
		t.Errorf("the detached ENI eni-cni created was not reclaimed:\n%s", e.out)
	}
}

func TestUnassignedBehindBack(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 4, TrimAfter: time.Hour})
	e.warm(t)
	pods := e.addPods(t, 1)
	e.w.Cfg.WarmIPTarget = 0 // no top-up: EC2 would hand the same low addresses back
	taken := pods[0].IP
	var free netip.Addr
	for ip := range e.pool(t) {
		if ip != taken {
			free = ip
			break
		}
	}
	primary := e.fake.PrimaryENI().ID
	if err := e.fake.UnassignIPs(primary, taken.String(), free.String()); err != nil {
		t.Fatal(err)
	}
	e.out.Reset()
	e.passes(t, 1) // younger than the IMDS grace: not a disagreement yet
	e.now = e.now.Add(section.IMDSGrace)
	e.passes(t, 1)
	got := e.pool(t)
	if a, ok := got[taken]; !ok || !a.Lost {
		t.Errorf("allocated %s unassigned behind our back: %+v, want flagged lost", taken, a)
	}
	if _, ok := got[free]; ok {
		t.Errorf("free %s unassigned behind our back is still in the pool", free)
	}
	if !strings.Contains(e.out.String(), "WARNING: "+taken.String()+" (pod") {
		t.Errorf("no warning about %s:\n%s", taken, e.out)
	}
	// The same disagreement does not cost a call per pass: EC2 has spoken.
	e.fake.ResetCalls()
	e.passes(t, 10)
	if n := totalCalls(e.fake.Calls()); n != 0 {
		t.Errorf("a settled disagreement cost %d calls: %v", n, e.fake.Calls())
	}
}

func TestForeignAddressesUsedButNeverTrimmed(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 2, TrimAfter: time.Minute,
		ExcludeIPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.201/32")}})
	e.mgr.Pool = alloc.StoredPool{Exclude: e.w.Cfg.ExcludeIPs}
	primary := e.fake.PrimaryENI().ID
	// A launch template's secondary, and a VIP the operator excluded.
	if err := e.fake.AssignIPs(primary, "10.0.0.200", "10.0.0.201"); err != nil {
		t.Fatal(err)
	}
	e.warm(t)
	got := e.pool(t)
	if got[netip.MustParseAddr("10.0.0.200")].Origin != section.OriginFound || got[netip.MustParseAddr("10.0.0.201")].Origin != section.OriginFound {
		t.Fatalf("found addresses: %+v", got)
	}
	c, st, _ := e.counts(t)
	if c.Total != 2 || c.Free != 2 || e.mgr.Pool.Contains(st, netip.MustParseAddr("10.0.0.201")) {
		t.Errorf("counts %+v: the found address serves, the excluded one does not, and warm needs nothing more", c)
	}
	// Push the pool up, then let trim take the surplus back.
	e.w.Cfg.WarmIPTarget = 6
	e.warm(t)
	e.w.Cfg.WarmIPTarget = 0
	e.now = e.now.Add(2 * time.Minute)
	e.warm(t)
	eni, _ := e.fake.ENI(primary)
	if !slices.Contains(eni.SecondaryIPs, "10.0.0.200") || !slices.Contains(eni.SecondaryIPs, "10.0.0.201") || len(eni.SecondaryIPs) != 2 {
		t.Errorf("trim gave back %v: want only what warm assigned gone, the found addresses kept", eni.SecondaryIPs)
	}
	for _, a := range e.addPods(t, 1) {
		if a.IP.String() == "10.0.0.201" {
			t.Error("an excluded address went to a pod")
		}
	}
}

func TestNoManageENIIsLeftAlone(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 7, TrimAfter: time.Minute})
	other, err := e.fake.SeedENI(ec2fake.ENISpec{SecondaryIPCount: 2, Tags: map[string]string{TagNoManage: "true"}})
	if err != nil {
		t.Fatal(err)
	}
	e.warm(t)
	_, st, src := e.counts(t)
	en, _ := src.ENI(other.ID)
	if !en.Unmanaged || en.Unverified {
		t.Errorf("tagged ENI %+v", en)
	}
	for ip := range e.mgr.Pool.Addrs(st) {
		if slices.Contains(other.SecondaryIPs, ip.String()) {
			t.Errorf("address %s of the no_manage ENI is usable", ip)
		}
	}
	e.w.Cfg.WarmIPTarget = 0
	e.now = e.now.Add(2 * time.Minute)
	e.warm(t)
	if now, _ := e.fake.ENI(other.ID); len(now.SecondaryIPs) != 2 {
		t.Errorf("the no_manage ENI's addresses changed: %v", now.SecondaryIPs)
	}
	e.host.mu.Lock()
	defer e.host.mu.Unlock()
	for _, h := range e.host.enis {
		if h.ID == other.ID {
			t.Error("the host side of the no_manage ENI was re-asserted")
		}
	}
}

// killAt plays a pass killed at the moment it calls an EC2 action (or,
// with after, once EC2 has carried it out): the call never returns while
// the test runs, so the pass does nothing after it, as the process would
// not, and none of its cleanup runs. (The pass runs the creations of ENIs
// on goroutines of their own: ending just the calling goroutine would not
// stop the pass.) At the test's end the call fails and the stalled pass
// runs out.
type killAt struct {
	API
	action string
	after  bool
	hit    chan struct{} // closed when the pass reaches the call
	stall  chan struct{} // closed at the test's end
	once   *sync.Once
}

func newKillAt(api API, action string) killAt {
	return killAt{API: api, action: action, hit: make(chan struct{}), stall: make(chan struct{}), once: &sync.Once{}}
}

// newKillAfter is newKillAt once EC2 has carried the action out.
func newKillAfter(api API, action string) killAt {
	k := newKillAt(api, action)
	k.after = true
	return k
}

var errKilled = errors.New("killed")

// kills stalls the call of action, after running call if k.after, and
// reports whether it did (the pass is then killed at that call).
func (k killAt) kills(action string, call func()) bool {
	if k.action != action {
		return false
	}
	if k.after {
		call()
	}
	k.once.Do(func() { close(k.hit) })
	<-k.stall
	return true
}

func (k killAt) AttachNetworkInterface(ctx context.Context, in *ec2.AttachNetworkInterfaceInput, o ...func(*ec2.Options)) (*ec2.AttachNetworkInterfaceOutput, error) {
	call := func() { _, _ = k.API.AttachNetworkInterface(ctx, in, o...) }
	if k.kills("AttachNetworkInterface", call) {
		return nil, errKilled
	}
	return k.API.AttachNetworkInterface(ctx, in, o...)
}

func (k killAt) ModifyNetworkInterfaceAttribute(ctx context.Context, in *ec2.ModifyNetworkInterfaceAttributeInput, o ...func(*ec2.Options)) (*ec2.ModifyNetworkInterfaceAttributeOutput, error) {
	call := func() { _, _ = k.API.ModifyNetworkInterfaceAttribute(ctx, in, o...) }
	if k.kills("ModifyNetworkInterfaceAttribute", call) {
		return nil, errKilled
	}
	return k.API.ModifyNetworkInterfaceAttribute(ctx, in, o...)
}

func (e *env) killedPass(t *testing.T, k killAt) {
	t.Helper()
	w := &Warmer{Mgr: e.w.Mgr, API: k, MD: e.w.MD, Host: e.w.Host, Cfg: e.w.Cfg, Out: e.w.Out, Log: e.w.Log, Now: e.w.Now}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(context.Background())
	}()
	t.Cleanup(func() {
		close(k.stall)
		<-done
	})
	select {
	case <-k.hit:
	case <-done:
		t.Fatalf("the pass ended without calling %s", k.action)
	}
}

func TestPassKilledBetweenCreateAndAttach(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 5})
	e.warm(t)
	e.addPods(t, 5)
	e.killedPass(t, newKillAt(e.w.API, "AttachNetworkInterface"))
	var created ec2fake.ENI
	for _, en := range e.fake.ENIs() {
		if en.Status == "available" {
			created = en
		}
	}
	if created.ID == "" {
		t.Fatal("the killed pass created no ENI")
	}
	_, _, src := e.counts(t)
	if len(src.Pending) != 1 || src.Pending[0].ID != created.ID || !src.Dirty {
		t.Fatalf("pending %+v dirty %v: the record must be saved before the ENI is attached", src.Pending, src.Dirty)
	}
	e.out.Reset()
	e.passes(t, 1)
	if _, ok := e.fake.ENI(created.ID); ok {
		t.Errorf("the unattached %s was not deleted:\n%s", created.ID, e.out)
	}
	_, _, src = e.counts(t)
	if len(src.Pending) != 0 || len(e.fake.ENIs()) != 2 || len(src.ENIs) != 2 {
		t.Errorf("pending %+v, EC2 ENIs %d, store ENIs %d:\n%s", src.Pending, len(e.fake.ENIs()), len(src.ENIs), e.out)
	}
}

func TestCreateReplyLostIsSweptLater(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 5})
	e.fake.SetHook("CreateNetworkInterface", func() { time.Sleep(300 * time.Millisecond) })
	e.warm(t)
	e.addPods(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := e.w.Run(ctx); err == nil {
		t.Fatal("a pass whose Create reply never came succeeded")
	}
	e.fake.SetHook("CreateNetworkInterface", nil)
	var leaked string
	for _, en := range e.fake.ENIs() {
		if en.Status == "available" {
			leaked = en.ID
		}
	}
	_, _, src := e.counts(t)
	if leaked == "" || len(src.Pending) != 1 || src.Pending[0].ID != "" {
		t.Fatalf("leaked %q, pending %+v", leaked, src.Pending)
	}
	e.w.Cfg.WarmIPTarget = 0 // no new ENI: watch only the cleanup
	e.passes(t, 1)
	if _, ok := e.fake.ENI(leaked); !ok {
		t.Fatal("an ENI younger than the leak age was deleted")
	}
	e.now = e.now.Add(leakAge)
	e.fake.ResetCalls()
	e.passes(t, 1)
	if _, ok := e.fake.ENI(leaked); ok {
		t.Errorf("leaked %s not swept after %s", leaked, leakAge)
	}
	if _, _, src := e.counts(t); len(src.Pending) != 0 {
		t.Errorf("pending left: %+v", src.Pending)
	}
}

func TestLeakedENIsOfThisInstanceOnly(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 1})
	me := e.fake.Info().InstanceID
	old := e.now.Add(-time.Hour).UTC().Format(time.RFC3339)
	seed := func(tags map[string]string) string {
		en, err := e.fake.SeedENI(ec2fake.ENISpec{Detached: true, Tags: tags})
		if err != nil {
			t.Fatal(err)
		}
		return en.ID
	}
	leaked := seed(map[string]string{TagInstanceID: me, TagCreatedAt: old})
	young := seed(map[string]string{TagInstanceID: me, TagCreatedAt: e.now.UTC().Format(time.RFC3339)})
	others := seed(map[string]string{TagInstanceID: "i-0999999999999999a", TagCreatedAt: old})
	untagged := seed(nil)
	e.warm(t) // the first pass of a boot looks for leaks
	for id, want := range map[string]bool{leaked: false, young: true, others: true, untagged: true} {
		if _, ok := e.fake.ENI(id); ok != want {
			t.Errorf("%s: exists %v, want %v", id, ok, want)
		}
	}
	e.passes(t, 20) // the young one ages past leakAge: the next sweep takes it
	if _, ok := e.fake.ENI(young); ok {
		t.Errorf("%s still there %s later", young, 20*30*time.Second)
	}
	e.fake.ResetCalls()
	e.passes(t, 20) // nothing left to look for in this boot
	if n := e.fake.Calls()["DescribeNetworkInterfaces"]; n != 0 {
		t.Errorf("%d sweeps in the same boot once nothing was left", n)
	}
}

func TestDeleteOnTerminationRetriedUntilSet(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 7})
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	e.fake.InjectFault("ModifyNetworkInterfaceAttribute", ec2fake.Fault{Code: "InternalError", HTTPStatus: 500, Times: 8})
	e.warm(t)
	created := e.fake.ENIs()[1]
	if created.DeleteOnTermination {
		t.Fatal("setup: DeleteOnTermination set despite the faults")
	}
	e.now = e.now.Add(30 * time.Second)
	if err := e.w.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "DeleteOnTermination") {
		t.Errorf("a pass that could not set DeleteOnTermination: %v", err)
	}
	e.passes(t, 1) // succeeds
	if en, _ := e.fake.ENI(created.ID); !en.DeleteOnTermination {
		t.Fatal("DeleteOnTermination never set")
	}
	e.fake.ResetCalls()
	e.passes(t, 5)
	if n := e.fake.Calls()["ModifyNetworkInterfaceAttribute"]; n != 0 {
		t.Errorf("%d more attempts after it was set", n)
	}
}

func TestFailedAttachCleansUpPastTheDeadline(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium", Subnets: []ec2fake.SubnetConfig{{CIDR: "10.0.0.0/20"}, {CIDR: "10.0.16.0/20"}}},
		section.WarmConfig{WarmIPTarget: 5})
	e.warm(t)
	e.addPods(t, 5)
	e.w.Cfg.SubnetID = e.fake.Info().Subnets[1].ID // the pass reads that subnet after Create
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.fake.SetHook("DescribeSubnets", cancel) // the pass's time runs out between Create and Attach
	if err := e.w.Run(ctx); err == nil {
		t.Fatal("the pass succeeded")
	}
	for _, en := range e.fake.ENIs() {
		if en.Status == "available" {
			t.Errorf("%s left behind: cleanup used the expired context\n%s", en.ID, e.out)
		}
	}
	if _, _, src := e.counts(t); len(src.Pending) != 0 || src.Dirty {
		t.Errorf("pending %+v dirty %v after a clean abandon", src.Pending, src.Dirty)
	}
}

// TestSecondNetworkCard: an ENI on another network card (attached by
// something else) is used with its own device index and table (numbered
// as the VPC CNI does); warm itself attaches only on the default card,
// which is what the type's maxPods counts on.
func TestSecondNetworkCard(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "x.cards", Limits: map[string]ec2fake.Limits{"x.cards": {MaxENIs: 4, IPv4PerENI: 4, CardENIs: 2}}},
		section.WarmConfig{WarmIPTarget: 3})
	other, err := e.fake.SeedENI(ec2fake.ENISpec{NetworkCard: 1, SecondaryIPCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.fillTo(t, 20); got != 9 {
		t.Fatalf("%d pods, want 9 (3 on each of the 2 ENIs of card 0, 3 on the ENI of card 1)\n%s", got, e.out)
	}
	_, _, src := e.counts(t)
	s, _ := src.ENI(other.ID)
	if s.NetworkCard != 1 || s.DeviceNumber != 0 || s.Table() != 10100 || s.Unverified {
		t.Errorf("the card-1 ENI in the store: %+v (table %d)", s, s.Table())
	}
	onCard := map[int]int{}
	for _, en := range e.fake.ENIs() {
		onCard[en.NetworkCard]++
		st, _ := src.ENI(en.ID)
		if st.NetworkCard != en.NetworkCard || st.DeviceNumber != en.DeviceIndex {
			t.Errorf("%s: store card %d device %d, EC2 card %d device %d", en.ID, st.NetworkCard, st.DeviceNumber, en.NetworkCard, en.DeviceIndex)
		}
	}
	if onCard[0] != 2 || onCard[1] != 1 {
		t.Errorf("ENIs per card %v, want 2 on card 0 (warm's) and only the seeded one on card 1", onCard)
	}
	inst, err := Discover(context.Background(), e.w.MD)
	if err != nil {
		t.Fatal(err)
	}
	if last := inst.ENIs[len(inst.ENIs)-1]; last.ID != other.ID || last.NetworkCard != 1 || last.DeviceNumber != 0 {
		t.Errorf("IMDS discovery of the card: %+v", inst.ENIs)
	}
}

func TestHostReassertedEveryPass(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 7})
	e.warm(t)
	pods := e.addPods(t, 6)
	e.host.mu.Lock()
	e.host.repair = []string{"ens6 (table 2): default route"}
	e.host.mu.Unlock()
	e.out.Reset()
	e.passes(t, 1)
	e.host.mu.Lock()
	defer e.host.mu.Unlock()
	if len(e.host.enis) != 2 || len(e.host.pods) != len(pods) {
		t.Errorf("re-asserted %d ENIs and %d pods", len(e.host.enis), len(e.host.pods))
	}
	if !strings.Contains(e.out.String(), "WARNING: the node had lost part of its setup, put back: ens6 (table 2): default route") {
		t.Errorf("a repair was not reported:\n%s", e.out)
	}
}

// TestExcludedAddressOnCreatedENINeverTrimmed: every address on an ENI
// eni-cni created counts as its own, but one the operator put there and
// listed in excludeIPs (a VIP, an Elastic IP's private address, as the
// README tells them to) is not eni-cni's to give back.
func TestExcludedAddressOnCreatedENINeverTrimmed(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.210")
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 7, TrimAfter: time.Minute,
		ExcludeIPs: []netip.Prefix{netip.PrefixFrom(vip, 32)}})
	e.mgr.Pool = alloc.StoredPool{Exclude: e.w.Cfg.ExcludeIPs}
	e.warm(t) // 5 on the primary, a created ENI with 2
	var created string
	for _, en := range e.fake.ENIs() {
		if en.ID != e.fake.PrimaryENI().ID {
			created = en.ID
		}
	}
	if err := e.fake.AssignIPs(created, vip.String()); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(2 * time.Hour) // IMDS shows it, the hourly describe confirms it
	e.warm(t)
	e.w.Cfg.WarmIPTarget = 0
	e.now = e.now.Add(2 * time.Minute)
	e.warm(t)
	e.passes(t, 2)
	eni, _ := e.fake.ENI(created)
	if !slices.Contains(eni.SecondaryIPs, vip.String()) {
		t.Errorf("trim gave back the excluded %s of %s: left %v\n%s", vip, created, eni.SecondaryIPs, e.out)
	}
}

// TestLostAddressLeavesTombstoned: an address unassigned behind eni-cni's
// back while a pod holds it is flagged lost; when the pod goes it leaves
// the pool. IMDS, which lags EC2, may still list it then: it must not come
// back as a found address and go to the next pod (EC2 may have given it
// to another instance already).
func TestLostAddressLeavesTombstoned(t *testing.T) {
	var e *env
	start := time.Now()
	clock := func() time.Time {
		if e == nil {
			return start
		}
		return e.now
	}
	e = newEnv(t, ec2fake.Config{InstanceType: "t3.medium", IMDSLag: 5 * time.Minute, Clock: clock}, section.WarmConfig{WarmIPTarget: 3})
	e.warm(t)
	e.passes(t, 20) // IMDS has caught up
	pods := e.addPods(t, 1)
	victim := pods[0]
	e.now = e.now.Add(time.Hour) // the next pass makes the hourly describe
	e.w.Cfg.WarmIPTarget = 0     // and no assign (the fake would hand the address back at once);
	e.w.Cfg.MinimumIPTarget = 2  // one free address stays for the next pod
	if err := e.fake.UnassignIPs(e.fake.PrimaryENI().ID, victim.IP.String()); err != nil {
		t.Fatal(err)
	}
	e.passes(t, 1)
	if a := e.pool(t)[victim.IP]; !a.Lost {
		t.Fatalf("%s not flagged lost: %+v\n%s", victim.IP, a, e.out)
	}
	if _, _, err := e.mgr.Release(context.Background(), alloc.Key{Network: "pods", ContainerID: victim.ContainerID, IfName: "eth0"}, victim.IP); err != nil {
		t.Fatal(err)
	}
	e.passes(t, 4) // within IMDS's lag, past the cooldown
	if a, ok := e.pool(t)[victim.IP]; ok {
		t.Errorf("%s, no longer assigned by EC2 but still listed by a lagging IMDS, is back in the pool: %+v\n%s", victim.IP, a, e.out)
	}
	for _, a := range e.addPods(t, 1) {
		if a.IP == victim.IP {
			t.Fatalf("%s, which EC2 no longer assigns to this instance, went to another pod", a.IP)
		}
	}
}

// TestReassignedLostAddressIsUsableAgain: EC2 may hand an address flagged
// lost back to the same instance in a later assign. The reply is the
// truth: the record must follow it, not keep the address lost (a slot EC2
// counts against the ENI, never used, and `list` calling its pod lost).
func TestReassignedLostAddressIsUsableAgain(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 3})
	e.warm(t)
	victim := e.addPods(t, 1)[0]
	e.now = e.now.Add(time.Hour)
	if err := e.fake.UnassignIPs(e.fake.PrimaryENI().ID, victim.IP.String()); err != nil {
		t.Fatal(err)
	}
	e.passes(t, 1) // flagged lost, then the fill asks for one more
	eni, _ := e.fake.ENI(e.fake.PrimaryENI().ID)
	if !slices.Contains(eni.SecondaryIPs, victim.IP.String()) {
		t.Skipf("the fake assigned another address than %s: %v", victim.IP, eni.SecondaryIPs)
	}
	if a := e.pool(t)[victim.IP]; a.Lost || a.ENI != eni.ID {
		t.Errorf("%s, assigned again by EC2, recorded as %+v\n%s", victim.IP, a, e.out)
	}
}

// TestFoundAddressesTakeTheirSlots: addresses assigned behind eni-cni's
// back (found in IMDS) take slots of their ENI. The store must count them,
// or the next fill asks EC2 for more than the ENI holds, is refused, and
// the pool stays short (pods waiting) until the hourly describe.
func TestFoundAddressesTakeTheirSlots(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 3, TrimAfter: time.Hour})
	e.warm(t) // the primary: 3 of its 5 slots
	if err := e.fake.AssignIPs(e.fake.PrimaryENI().ID, "10.0.0.200", "10.0.0.201"); err != nil {
		t.Fatal(err)
	}
	e.passes(t, 1) // found: the primary is full
	if c, _, _ := e.counts(t); c.Total != 5 {
		t.Fatalf("found addresses not in the pool: %+v\n%s", c, e.out)
	}
	e.addPods(t, 5)
	e.out.Reset()
	e.now = e.now.Add(30 * time.Second)
	if err := e.w.Run(context.Background()); err != nil {
		t.Fatalf("the pass after the pods came: %v\n%s", err, e.out)
	}
	if c, _, _ := e.counts(t); c.Free < 3 {
		t.Errorf("pool short: %+v\n%s", c, e.out)
	}
}

// TestRefreshRacingAnAssign: an ADD's refresh may read IMDS between
// warm's Assign call and its record, taking the new addresses in as found.
// The record must still make them warm's (trimmable) and count each slot
// once.
func TestRefreshRacingAnAssign(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 3})
	e.fake.SetHook("AssignPrivateIpAddresses", func() {
		if _, err := Refresh(context.Background(), e.mgr, e.w.MD, e.now); err != nil {
			t.Error(err)
		}
	})
	e.warm(t)
	_, _, src := e.counts(t)
	primary, _ := src.PrimaryENI()
	if primary.Secondary != 3 {
		t.Errorf("primary counts %d secondary addresses, EC2 has 3", primary.Secondary)
	}
	for _, a := range src.Addrs {
		if a.Origin != section.OriginAssigned {
			t.Errorf("%s, assigned by warm, recorded %q", a.IP, a.Origin)
		}
	}
}

// TestRefreshRacingAnAttach: an ADD's refresh (the pool is empty: that is
// why warm creates an ENI) may see the new ENI in IMDS before warm records
// it. The record must merge with what the refresh wrote, not list the ENI
// twice (a store that no longer loads).
func TestRefreshRacingAnAttach(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 7})
	e.fake.SetHook("ModifyNetworkInterfaceAttribute", func() {
		if _, err := Refresh(context.Background(), e.mgr, e.w.MD, e.now); err != nil {
			t.Error(err)
		}
	})
	e.warm(t)
	_, _, src := e.counts(t)
	if err := src.Validate(); err != nil {
		t.Fatalf("store after the race: %v", err)
	}
	if len(src.ENIs) != 2 {
		t.Fatalf("%d ENIs in the store, EC2 has 2", len(src.ENIs))
	}
	for _, en := range src.ENIs {
		if !en.Primary() && (!en.Created || en.Unverified || en.Secondary != 2) {
			t.Errorf("created ENI recorded as %+v", en)
		}
	}
	for _, a := range src.Addrs {
		if a.Origin != section.OriginAssigned {
			t.Errorf("%s recorded %q", a.IP, a.Origin)
		}
	}
}
