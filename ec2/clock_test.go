package ec2

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// TestClockJumpBackNeitherBlindsNorLoops: the wall clock was a year ahead
// (an RTC set wrong at boot) while a pass stamped lastDescribe, lastSweep,
// a pending record and an ENI's created-at tag, then NTP put it back. The
// leak sweep must still run and delete the ENI whose Create reply was lost
// (its tag is not "young": it is in the future), the pending record must
// go, the steady state must cost one describe per hour, not one per pass,
// and the hourly safety net must not wait a year.
func TestClockJumpBackNeitherBlindsNorLoops(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 5})
	real := e.now
	e.now = real.Add(365 * 24 * time.Hour)
	e.warm(t)
	e.addPods(t, 5)
	// The pass dies when EC2 has created the ENI but before its reply
	// arrives: cancelled from the hook, not by a deadline, so a slow
	// machine cannot end the pass before it gets that far.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.fake.SetHook("CreateNetworkInterface", func() { cancel(); time.Sleep(100 * time.Millisecond) })
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
	if _, _, src := e.counts(t); leaked == "" || len(src.Pending) != 1 {
		t.Fatalf("leaked %q, pending %+v", leaked, src.Pending)
	}

	e.now = real // NTP corrects the clock
	e.w.Cfg.WarmIPTarget = 0
	e.passes(t, 1)
	if _, ok := e.fake.ENI(leaked); ok {
		t.Errorf("leaked %s (created-at a year ahead of the corrected clock) not swept:\n%s", leaked, e.out)
	}
	if _, _, src := e.counts(t); len(src.Pending) != 0 {
		t.Errorf("pending left after the sweep: %+v", src.Pending)
	}
	e.fake.ResetCalls()
	e.passes(t, 240) // two hours
	if n := e.fake.Calls()["DescribeNetworkInterfaces"]; n < 1 || n > 3 {
		t.Errorf("%d describes in two steady hours after the clock went back, want 2", n)
	}
}

// overrideMD answers some IMDS paths itself, as a broken proxy or IMDS
// stub in front of the real one would, and passes the rest on.
type overrideMD struct {
	Metadata
	paths map[string]string
}

func (o overrideMD) GetMetadata(ctx context.Context, in *imds.GetMetadataInput, opts ...func(*imds.Options)) (*imds.GetMetadataOutput, error) {
	if v, ok := o.paths[in.Path]; ok {
		return &imds.GetMetadataOutput{Content: io.NopCloser(strings.NewReader(v))}, nil
	}
	return o.Metadata.GetMetadata(ctx, in, opts...)
}

// TestBogusInstanceIDKeepsTheStore: IMDS answering 200 with an empty or
// nonsensical instance-id (a proxy's page, a stub) is an IMDS error, not
// another instance: taking it for one would drop every record of this
// instance (pending ENIs, addresses being given back) on the spot.
func TestBogusInstanceIDKeepsTheStore(t *testing.T) {
	for name, id := range map[string]string{"empty": "", "html": "<html><body>proxy</body></html>", "spaces": "i-01 23"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 3})
			e.warm(t)
			_, _, before := e.counts(t)
			e.w.MD = overrideMD{e.w.MD, map[string]string{"instance-id": id}}
			e.now = e.now.Add(30 * time.Second)
			// The ID is read in a boot whose store has not yet checked it
			// (within one boot the instance cannot change).
			e.mgr.BootID = "b2"
			if err := e.w.Run(context.Background()); !errors.Is(err, ErrIMDS) {
				t.Errorf("instance-id %q: err = %v, want ErrIMDS", id, err)
			}
			if _, _, after := e.counts(t); after.InstanceID != before.InstanceID || len(after.Addrs) != len(before.Addrs) {
				t.Errorf("instance-id %q: the store went from %s with %d addresses to %q with %d", id, before.InstanceID, len(before.Addrs), after.InstanceID, len(after.Addrs))
			}
		})
	}
}

// emptyDescribe answers DescribeNetworkInterfaces with nothing, as EC2 in
// the wrong region (a bad region override) or an eventually consistent
// read does, without an error.
type emptyDescribe struct{ API }

func (emptyDescribe) DescribeNetworkInterfaces(context.Context, *ec2.DescribeNetworkInterfacesInput, ...func(*ec2.Options)) (*ec2.DescribeNetworkInterfacesOutput, error) {
	return &ec2.DescribeNetworkInterfacesOutput{}, nil
}

// TestDescribeWithoutThePrimaryENIChangesNothing: the primary ENI cannot
// be detached, so an answer without it is not about this instance. Taking
// it as the truth dropped every ENI, flagged every pod's address lost and
// tried to create an ENI in no subnet.
func TestDescribeWithoutThePrimaryENIChangesNothing(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 7})
	e.warm(t)
	e.addPods(t, 2)
	_, _, before := e.counts(t)
	real := e.w.API
	e.w.API = emptyDescribe{real}
	e.now = e.now.Add(time.Hour)
	if err := e.w.Run(context.Background()); err == nil {
		t.Error("a pass took an answer without the primary ENI for the truth")
	}
	_, _, after := e.counts(t)
	if len(after.ENIs) != len(before.ENIs) || len(after.Addrs) != len(before.Addrs) || len(after.Lost()) != 0 {
		t.Errorf("ENIs %d -> %d, addresses %d -> %d, lost %v\n%s", len(before.ENIs), len(after.ENIs), len(before.Addrs), len(after.Addrs), after.Lost(), e.out)
	}
	e.w.API = real
	e.passes(t, 1)
	if _, _, src := e.counts(t); len(src.ENIs) != len(before.ENIs) || len(src.Lost()) != 0 || len(e.fake.ENIs()) != len(before.ENIs) {
		t.Errorf("after a sound describe: store ENIs %d, lost %v, EC2 ENIs %d\n%s", len(src.ENIs), src.Lost(), len(e.fake.ENIs()), e.out)
	}
}

// serverErrorAfter forwards EC2 calls to the fake and, for one action,
// replaces the reply with EC2's 500 InternalError: the call was carried out
// (EC2 documents that a 5xx may hide a done request) but the client hears
// a failure.
type serverErrorAfter struct {
	action string
	next   http.RoundTripper
}

func (s serverErrorAfter) RoundTrip(r *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := s.next.RoundTrip(r)
	if err != nil || !strings.Contains(string(body), "Action="+s.action) {
		return resp, err
	}
	resp.Body.Close()
	const reply = `<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>InternalError</Code><Message>An internal error has occurred</Message></Error></Errors><RequestID>x</RequestID></Response>`
	return &http.Response{StatusCode: 500, Status: "500 Internal Server Error", Header: http.Header{"Content-Type": {"text/xml"}},
		Body: io.NopCloser(strings.NewReader(reply)), Request: r, ContentLength: int64(len(reply))}, nil
}

// TestServerErrorIsNotARefusal: a 500 from CreateNetworkInterface may hide
// an ENI EC2 did create. Taking it for a refusal dropped the pending record
// and the dirty mark, so the ENI leaked until the next boot's sweep.
func TestServerErrorIsNotARefusal(t *testing.T) {
	e := newEnv(t, ec2fake.Config{InstanceType: "t3.medium"}, section.WarmConfig{WarmIPTarget: 5})
	e.warm(t)
	e.addPods(t, 5)
	real := e.w.API
	e.w.API = NewAPI(e.fake.URL(), "us-east-1", NewMetadataClient(e.fake.URL()), func(o *ec2.Options) {
		o.HTTPClient = &http.Client{Transport: serverErrorAfter{"CreateNetworkInterface", http.DefaultTransport}}
		o.RetryMaxAttempts = 1
	})
	if err := e.w.Run(context.Background()); err == nil {
		t.Fatal("the pass did not report the failed Create")
	}
	if _, _, src := e.counts(t); len(src.Pending) != 1 || !src.Dirty {
		t.Errorf("pending %+v dirty %v after a 500 that may hide a created ENI", src.Pending, src.Dirty)
	}
	e.w.API = real
	e.w.Cfg.WarmIPTarget = 0
	e.now = e.now.Add(leakAge)
	e.passes(t, 1)
	for _, en := range e.fake.ENIs() {
		if en.Status == "available" {
			t.Errorf("%s, created behind a 500, leaked:\n%s", en.ID, e.out)
		}
	}
}
