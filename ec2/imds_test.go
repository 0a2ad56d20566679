package ec2

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// settledEnv is a node with a second ENI, warmed until a pass changes
// nothing.
func settledEnv(t testing.TB, cfg ec2fake.Config) *env {
	t.Helper()
	e := newEnv(t, cfg, section.WarmConfig{WarmIPTarget: 2})
	if _, err := e.fake.SeedENI(ec2fake.ENISpec{DeleteOnTermination: true}); err != nil {
		t.Fatal(err)
	}
	e.passes(t, 3)
	return e
}

// imdsReadsOfPass is how many metadata paths the next pass reads.
func (e *env) imdsReadsOfPass(t *testing.T) int {
	t.Helper()
	e.fake.ResetCalls()
	e.passes(t, 1)
	return e.fake.IMDSCalls()
}

// tamper changes the store's section behind the pass's back.
func (e *env) tamper(t *testing.T, fn func(*section.EC2)) {
	t.Helper()
	err := e.mgr.Update(context.Background(), func(st *alloc.State) (bool, error) {
		fn(sectionOf(st))
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A settled pass reads from IMDS only what can change while the instance
// and its ENIs stay the same: the ENI list and, per ENI, device, card,
// addresses, prefixes, VPC CIDRs and security groups. A new boot reads
// everything once.
func TestSettledPassReadsOnlyWhatCanChange(t *testing.T) {
	e := settledEnv(t, ec2fake.Config{InstanceType: "t3.medium"})
	const enis = 2
	if n := len(e.fake.ENIs()); n != enis {
		t.Fatalf("%d ENIs, want %d", n, enis)
	}
	if n := e.imdsReadsOfPass(t); n != 1+6*enis {
		t.Errorf("settled pass read %d IMDS paths, want %d", n, 1+6*enis)
	}
	if c := e.fake.Calls(); len(c) != 0 {
		t.Errorf("settled pass made EC2 calls: %v", c)
	}
	e.mgr.BootID = "b2"
	if n := e.imdsReadsOfPass(t); n != 6+9*enis {
		t.Errorf("first pass of a new boot read %d IMDS paths, want all %d", n, 6+9*enis)
	}
	if n := e.imdsReadsOfPass(t); n != 1+6*enis {
		t.Errorf("second pass of a new boot read %d IMDS paths, want %d", n, 1+6*enis)
	}
}

// What the store is trusted for is re-read from IMDS in a new boot and
// for another instance: a store that lies is corrected, not believed.
func TestKnownFactsTrustedOnlyInTheirBootAndInstance(t *testing.T) {
	e := settledEnv(t, ec2fake.Config{InstanceType: "t3.medium"})
	lie := func(src *section.EC2) {
		src.InstanceType, src.AZ, src.Region = "t3.nano", "eu-west-1a", "eu-west-1"
		for i := range src.ENIs {
			src.ENIs[i].SubnetID = "subnet-0000000000000bad"
		}
	}
	e.tamper(t, lie)
	e.mgr.BootID = "b2"
	e.passes(t, 1)
	_, _, src := e.counts(t)
	if src.InstanceType != "t3.medium" || src.AZ != "us-east-1a" || src.Region != "us-east-1" {
		t.Errorf("after a new boot the store says %s in %s (%s), want t3.medium in us-east-1a (us-east-1)", src.InstanceType, src.AZ, src.Region)
	}
	for _, eni := range src.ENIs {
		if want, _ := e.fake.ENI(eni.ID); eni.SubnetID != want.SubnetID {
			t.Errorf("after a new boot %s is in %s, want %s", eni.ID, eni.SubnetID, want.SubnetID)
		}
	}

	// Another instance is another boot: a volume moved, an image baked.
	e.tamper(t, lie)
	if err := e.fake.BecomeInstance("i-0fedcba9876543210"); err != nil {
		t.Fatal(err)
	}
	e.mgr.BootID = "b3"
	e.passes(t, 1)
	_, _, src = e.counts(t)
	if src.InstanceID != "i-0fedcba9876543210" || src.InstanceType != "t3.medium" || src.Region != "us-east-1" {
		t.Errorf("after an instance change the store says %s, %s in %s; want i-0fedcba9876543210, t3.medium in us-east-1", src.InstanceID, src.InstanceType, src.Region)
	}
}

// An ENI detached and attached again at another index between two passes
// is seen by the next pass, hourly describe or not: the device is read
// from IMDS on every pass. A stale one named the wrong table and had
// freeSlots take the wrong index as used, so the next attach failed on an
// index in use for up to an hour.
func TestReattachSeenByTheNextPass(t *testing.T) {
	e := settledEnv(t, ec2fake.Config{InstanceType: "t3.medium"}) // 3 ENIs at most
	var id string
	var old int
	for _, x := range e.fake.ENIs() {
		if x.DeviceIndex > 0 {
			id, old = x.ID, x.DeviceIndex
		}
	}
	const moved = 2
	if id == "" || old == moved {
		t.Fatalf("want a secondary ENI at device 1, have %+v", e.fake.ENIs())
	}
	if err := e.fake.ReattachENI(id, moved); err != nil {
		t.Fatal(err)
	}
	e.passes(t, 1)
	_, _, src := e.counts(t)
	if eni, _ := src.ENI(id); eni.DeviceNumber != moved {
		t.Errorf("%s: device %d in the store after the next pass, want %d", id, eni.DeviceNumber, moved)
	}
	// The index it left is the free one: a third ENI goes there.
	for range 7 { // 14 pods: more than two ENIs' 10 secondaries
		e.addPods(t, 2)
		e.passes(t, 1)
	}
	attached := 0
	for _, x := range e.fake.ENIs() {
		if x.DeviceIndex >= 0 {
			attached++
		}
	}
	if attached != 3 {
		t.Errorf("%d ENIs attached after demand for a third, want 3", attached)
	}
}

// A settled pass still takes in what changes on an ENI it knows: its
// security groups here.
func TestSettledPassSeesSecurityGroupChange(t *testing.T) {
	sgs := []string{"sg-0123456789abcdef0", "sg-0fedcba9876543210"}
	e := settledEnv(t, ec2fake.Config{InstanceType: "t3.medium", SecurityGroupIDs: sgs})
	primary := e.fake.PrimaryENI().ID
	_, err := e.w.API.ModifyNetworkInterfaceAttribute(context.Background(), &ec2.ModifyNetworkInterfaceAttributeInput{
		NetworkInterfaceId: aws.String(primary), Groups: sgs[1:],
	})
	if err != nil {
		t.Fatal(err)
	}
	e.passes(t, 1)
	_, _, src := e.counts(t)
	eni, _ := src.ENI(primary)
	if !slices.Equal(eni.SecurityGroups, sgs[1:]) {
		t.Errorf("primary ENI's security groups in the store: %v, want %v", eni.SecurityGroups, sgs[1:])
	}
}

// BenchmarkSettledPass is one warm pass on a settled node, in process,
// against the fake over loopback (the node side faked): what a pass costs
// beyond process start, with the IMDS paths it reads and the store loads
// it makes. go test -bench SettledPass -cpuprofile cpu.out ./ec2/ shows
// where the time goes.
func BenchmarkSettledPass(b *testing.B) {
	e := settledEnv(b, ec2fake.Config{InstanceType: "t3.medium"})
	loads := &countingStore{Store: e.mgr.Store}
	e.mgr.Store = loads
	e.fake.ResetCalls()
	for b.Loop() {
		if err := e.w.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(e.fake.IMDSCalls())/float64(b.N), "imds-reads/op")
	b.ReportMetric(float64(loads.loads)/float64(b.N), "store-loads/op")
}

// countingStore counts the loads of the store it wraps.
type countingStore struct {
	alloc.Store
	loads int
}

func (s *countingStore) Load() (*alloc.State, error) {
	s.loads++
	return s.Store.Load()
}
