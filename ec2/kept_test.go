package ec2

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// A kept ENI (its attach throttled) forces no describe: these are the
// ways its later attach can end other than as planned.

// throttledAttachPass runs a pass for n ADDs waiting up to wait with
// every Attach throttled: the ENIs it creates are kept.
func (e *env) throttledAttachPass(t *testing.T, n int, wait time.Duration) {
	t.Helper()
	e.demand(t, n, wait)
	e.fake.Throttle("AttachNetworkInterface", 1000)
	if err := e.w.Run(context.Background()); err == nil {
		t.Fatal("pass with Attach throttled succeeded")
	}
	e.fake.ClearFaults()
}

// newKept is a node with one ENI of 11 addresses an earlier pass created
// and kept unattached (its attach throttled), and the ADDs that need it
// still waiting. With lag, IMDS shows what EC2 attaches that long after.
func newKept(t *testing.T, lag time.Duration) *env {
	t.Helper()
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge", IMDSLag: lag}, section.WarmConfig{WarmIPTarget: 5})
	e.onDisk(t)
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	e.throttledAttachPass(t, 20, 3*time.Minute)
	if _, _, src := e.counts(t); len(keptENIs(src)) != 1 || src.Dirty {
		t.Fatalf("pending %+v dirty %v: want one ENI kept, the store clean\n%s", src.Pending, src.Dirty, e.out)
	}
	e.now = e.now.Add(10 * time.Second)
	e.fake.ResetCalls()
	return e
}

// TestKeptENIAttachKilled: a pass killed at each step of a kept ENI's
// attach leaves the dirty mark (the kept-only batch sets it as any other),
// and the next pass reads EC2 first and ends with the store equal to EC2,
// the kept ENI attached once and no ENI created again.
func TestKeptENIAttachKilled(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill func(*env, *testing.T)
	}{
		{"before the attach", func(e *env, t *testing.T) { e.killedPass(t, newKillAt(e.w.API, "AttachNetworkInterface")) }},
		{"after the attach", func(e *env, t *testing.T) { e.killedPass(t, newKillAfter(e.w.API, "AttachNetworkInterface")) }},
		{"after DeleteOnTermination", func(e *env, t *testing.T) { e.killedPass(t, newKillAfter(e.w.API, "ModifyNetworkInterfaceAttribute")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newKept(t, 0)
			tc.kill(e, t)
			if _, _, src := e.counts(t); !src.Dirty {
				t.Fatalf("killed %s: the store is not marked dirty (pending %+v)", tc.name, src.Pending)
			}
			e.out.Reset()
			e.warm(t)
			_, _, src := e.counts(t)
			if len(src.Pending) != 0 || len(src.ENIs) != 2 || len(e.fake.ENIs()) != 2 {
				t.Errorf("pending %+v, store %d ENIs, EC2 %d: want the kept ENI attached and recorded\n%s", src.Pending, len(src.ENIs), len(e.fake.ENIs()), e.out)
			}
			if c := e.fake.Calls(); c["CreateNetworkInterface"] != 0 || c["DeleteNetworkInterface"] != 0 || c["DescribeNetworkInterfaces"] == 0 {
				t.Errorf("calls %v: want a describe, no Create, no Delete\n%s", c, e.out)
			}
			for _, en := range src.ENIs {
				if en.Created && !en.DeleteOnTermination {
					t.Errorf("%s: DeleteOnTermination not set", en.ID)
				}
			}
			e.assertStoreIsEC2(t)
		})
	}
}

// throttledReply is an API whose AttachNetworkInterface EC2 carries out
// while the caller is told it was throttled: a first attempt whose reply
// was lost, retried by the SDK into a throttle (an attach has no
// idempotency token).
type throttledReply struct{ API }

func (a throttledReply) AttachNetworkInterface(ctx context.Context, in *ec2.AttachNetworkInterfaceInput, o ...func(*ec2.Options)) (*ec2.AttachNetworkInterfaceOutput, error) {
	if _, err := a.API.AttachNetworkInterface(ctx, in, o...); err != nil {
		return nil, err
	}
	return nil, &smithy.GenericAPIError{Code: "RequestLimitExceeded", Message: "Request limit exceeded."}
}

// TestKeptENIAttachedThoughThrottled: EC2 attached the ENI a pass kept,
// its attach said throttled. While IMDS does not show it yet, the next
// pass's attach of the kept ENI fails (in use) and its delete too: the
// pass must learn from EC2 that the ENI is attached here before it goes
// on, not create another ENI at the device index it holds.
func TestKeptENIAttachedThoughThrottled(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge", IMDSLag: time.Hour}, section.WarmConfig{WarmIPTarget: 5})
	e.onDisk(t)
	plain := NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	e.w.API = throttledReply{plain}
	e.demand(t, 20, 3*time.Minute)
	if err := e.w.Run(context.Background()); err == nil {
		t.Fatal("pass with Attach throttled succeeded")
	}
	_, _, src := e.counts(t)
	if len(keptENIs(src)) != 1 || src.Dirty {
		t.Fatalf("pending %+v dirty %v: want one ENI kept, the store clean\n%s", src.Pending, src.Dirty, e.out)
	}
	e.w.API = plain
	e.now = e.now.Add(10 * time.Second)
	e.fake.ResetCalls()
	e.out.Reset()
	err := e.w.Run(context.Background())
	_, _, src = e.counts(t)
	c := e.fake.Calls()
	t.Logf("pass: %v\ncalls %v\n%s", err, c, e.out)
	if err != nil {
		t.Errorf("the pass after failed: %v", err)
	}
	if c["CreateNetworkInterface"] != 0 || c["DeleteNetworkInterface"] > 1 {
		t.Errorf("calls %v: want no ENI created (the kept one is attached)", c)
	}
	if len(src.ENIs) != 2 || len(e.fake.ENIs()) != 2 {
		t.Errorf("store %d ENIs, EC2 %d: want the kept ENI learnt attached", len(src.ENIs), len(e.fake.ENIs()))
	}
	e.assertStoreIsEC2(t)
}

// TestKeptENIBesidePlainPendingRecord: a store whose pending records
// mix a kept ENI and a plain one (a creation a pass did not finish, as
// the binary before kept ENIs forced no describe left it) still reads
// EC2 first: the plain one's ENI is deleted, the kept one attached, and
// the store ends equal to EC2.
func TestKeptENIBesidePlainPendingRecord(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "m5.xlarge"}, section.WarmConfig{WarmIPTarget: 5})
	e.onDisk(t)
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), fastRetry)
	e.throttledAttachPass(t, 40, 3*time.Minute)
	_, _, src := e.counts(t)
	if len(keptENIs(src)) < 2 {
		t.Fatalf("pending %+v: want ENIs kept\n%s", src.Pending, e.out)
	}
	last := len(src.Pending) - 1
	plain := src.Pending[last].ID
	e.tamper(t, func(s *section.EC2) { s.Pending[last].Unattached = nil })
	e.now = e.now.Add(10 * time.Second)
	e.fake.ResetCalls()
	e.out.Reset()
	e.warm(t)
	if c := e.fake.Calls(); c["DescribeNetworkInterfaces"] == 0 {
		t.Errorf("calls %v: a plain pending record must force the describe\n%s", c, e.out)
	}
	if _, ok := e.fake.ENI(plain); ok {
		if _, _, src := e.counts(t); !slices.ContainsFunc(src.ENIs, func(en section.ENI) bool { return en.ID == plain }) {
			t.Errorf("%s of the plain record neither deleted nor recorded\n%s", plain, e.out)
		}
	}
	_, _, src = e.counts(t)
	if len(src.Pending) != 0 {
		t.Errorf("pending %+v: want every record settled\n%s", src.Pending, e.out)
	}
	e.assertStoreIsEC2(t)
}
