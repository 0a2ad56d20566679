package ec2fake

import (
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

func instanceIMDS(t *testing.T, in *Instance) *imds.Client {
	t.Helper()
	url, err := in.StartIMDS("127.0.0.1:0")
	if err != nil {
		t.Fatalf("StartIMDS of %s: %v", in.ID(), err)
	}
	return imds.New(imds.Options{Endpoint: url, HTTPClient: loopbackHTTPClient(), Retryer: fastRetryer(3),
		EnableFallback: aws.FalseTernary, DisableDefaultMaxBackoff: true})
}

// TestInstancesShareTheWorld: two instances of other types in one VPC each
// see only their own ENIs in their IMDS, take addresses from the shared
// subnet without collisions, and have their own limits and device indexes.
func TestInstancesShareTheWorld(t *testing.T) {
	srv := startServer(t, Config{InstanceType: "t3.medium"})
	api := newEC2(srv, 1)
	first := srv.Instances()[0]
	second, err := srv.AddInstance(InstanceConfig{Type: "t3.nano", PrimaryIP: "10.0.0.200"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.AddInstance(InstanceConfig{ID: second.ID()}); err == nil {
		t.Error("a second instance with the same id was launched")
	}
	if got := srv.Instances(); len(got) != 2 || got[0].ID() != srv.Info().InstanceID || got[1].ID() != second.ID() {
		t.Fatalf("instances %v", got)
	}
	md1, md2 := instanceIMDS(t, first), instanceIMDS(t, second)
	if got := mustMeta(t, md2, "instance-id"); got != second.ID() {
		t.Errorf("second IMDS instance-id %q, want %s", got, second.ID())
	}
	if got := mustMeta(t, md2, "local-ipv4"); got != "10.0.0.200" {
		t.Errorf("second IMDS local-ipv4 %q", got)
	}
	if got := mustMeta(t, md1, "instance-type"); got != "t3.medium" {
		t.Errorf("first IMDS instance-type %q", got)
	}
	if md1url := first.IMDSURL(); md1url == srv.IMDSURL() || second.Info().Limits.MaxENIs != 2 {
		t.Errorf("first instance's own URL %s (world's %s), second's limits %+v", md1url, srv.IMDSURL(), second.Info().Limits)
	}

	// Addresses come from the one subnet: no two instances get the same.
	p1, p2 := first.PrimaryENI(), second.PrimaryENI()
	seen := map[string]string{}
	for _, e := range []ENI{p1, p2} {
		out, err := api.AssignPrivateIpAddresses(ctxT(t), &ec2.AssignPrivateIpAddressesInput{
			NetworkInterfaceId: aws.String(e.ID), SecondaryPrivateIpAddressCount: aws.Int32(1)})
		if err != nil {
			t.Fatalf("assign on %s: %v", e.ID, err)
		}
		for _, a := range append([]string{e.PrimaryIP}, aws.ToString(out.AssignedPrivateIpAddresses[0].PrivateIpAddress)) {
			if o, dup := seen[a]; dup {
				t.Errorf("%s given to %s and %s", a, o, e.ID)
			}
			seen[a] = e.ID
		}
	}
	// t3.nano: 2 slots per ENI, the primary's and the one just assigned.
	_, err = api.AssignPrivateIpAddresses(ctxT(t), &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String(p2.ID), SecondaryPrivateIpAddressCount: aws.Int32(1)})
	wantAPIError(t, err, "PrivateIpAddressLimitExceeded", 400)
	if _, err := api.AssignPrivateIpAddresses(ctxT(t), &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String(p1.ID), SecondaryPrivateIpAddressCount: aws.Int32(1)}); err != nil {
		t.Errorf("t3.medium's primary ENI limited by the nano's limits: %v", err)
	}

	// Device indexes are per instance; the ENI shows in its instance's
	// IMDS only.
	e1, err := first.SeedENI(ENISpec{})
	if err != nil {
		t.Fatal(err)
	}
	created, err := api.CreateNetworkInterface(ctxT(t), &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(p1.SubnetID)})
	if err != nil {
		t.Fatal(err)
	}
	eniID := aws.ToString(created.NetworkInterface.NetworkInterfaceId)
	if _, err := api.AttachNetworkInterface(ctxT(t), &ec2.AttachNetworkInterfaceInput{
		DeviceIndex: aws.Int32(1), InstanceId: aws.String(second.ID()), NetworkInterfaceId: aws.String(eniID)}); err != nil {
		t.Fatalf("attach at device 1 of the second instance (the first has its own device 1 %s): %v", e1.ID, err)
	}
	_, err = api.AttachNetworkInterface(ctxT(t), &ec2.AttachNetworkInterfaceInput{
		DeviceIndex: aws.Int32(2), InstanceId: aws.String(second.ID()), NetworkInterfaceId: aws.String(e1.ID)})
	wantAPIError(t, err, "InvalidParameterValue", 400) // in use by the first
	macs := func(c *imds.Client) string { return mustMeta(t, c, "network/interfaces/macs") }
	second.SyncIMDS()
	mac := aws.ToString(created.NetworkInterface.MacAddress) + "/"
	if got := macs(md2); !strings.Contains(got, mac) || !strings.Contains(got, p2.MAC+"/") {
		t.Errorf("second instance's macs %q, want its primary's and %s", got, mac)
	}
	if got := macs(md1); strings.Contains(got, mac) || strings.Contains(got, p2.MAC) {
		t.Errorf("the first instance's IMDS lists the second's ENIs: %q", got)
	}
	if got := len(second.ENIs()); got != 2 {
		t.Errorf("second.ENIs() has %d", got)
	}
	if got := len(first.ENIs()); got != 2 {
		t.Errorf("first.ENIs() has %d", got)
	}
	if a, b := len(srv.ENIs()), 4; a != b {
		t.Errorf("the world has %d ENIs, want %d", a, b)
	}
}

// TestOnChangeFollowsEC2: each change to an ENI, through the API, seeding
// or drift, reaches the hooks in Seq order with the ENI's new state.
func TestOnChangeFollowsEC2(t *testing.T) {
	srv := startServer(t, Config{})
	api := newEC2(srv, 1)
	var mu sync.Mutex
	var got []Change
	srv.OnChange(func(c Change) { mu.Lock(); got = append(got, c); mu.Unlock() })
	e, err := srv.SeedENI(ENISpec{SecondaryIPCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.AssignPrivateIpAddresses(ctxT(t), &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: aws.String(e.ID), SecondaryPrivateIpAddressCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	if cur, ok := srv.Current(e.ID); !ok || len(cur.ENI.SecondaryIPs) != 3 || cur.Seq != 4 {
		t.Errorf("Current after four changes: %+v %t", cur, ok)
	}
	if err := srv.DetachENI(e.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := api.DeleteNetworkInterface(ctxT(t), &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: aws.String(e.ID)}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	// create, assign (seed), attach, assign, detach, delete
	if len(got) != 6 {
		t.Fatalf("%d changes: %+v", len(got), got)
	}
	for i, c := range got {
		if c.ENI.ID != e.ID || (i > 0 && c.Seq <= got[i-1].Seq) {
			t.Errorf("change %d: %+v", i, c)
		}
	}
	if _, ok := srv.Current(e.ID); ok {
		t.Error("Current of a deleted ENI")
	}
	if last := got[5]; !last.Deleted {
		t.Errorf("last change %+v, want deleted", last)
	}
	if a := got[3].ENI; len(a.SecondaryIPs) != 3 || a.DeviceIndex != 1 {
		t.Errorf("after the assign: %+v", a)
	}
	if d := got[4].ENI; d.DeviceIndex != -1 {
		t.Errorf("after the detach: %+v", d)
	}
}

// BenchmarkWorldOfAThousand launches 1000 instances in one /16, each with
// a second ENI and 5 secondary addresses on both: what issue 20's world
// costs before any call.
func BenchmarkWorldOfAThousand(b *testing.B) {
	for b.Loop() {
		srv, err := New(Config{InstanceType: "t3.medium", VPCCIDRs: []string{"10.0.0.0/16"}, Subnets: []SubnetConfig{{CIDR: "10.0.0.0/16"}}})
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < 1000; i++ {
			in := srv.Instances()[0]
			if i > 0 {
				if in, err = srv.AddInstance(InstanceConfig{}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := srv.SeedIPs(in.PrimaryENI().ID, 5); err != nil {
				b.Fatal(err)
			}
			if _, err := in.SeedENI(ENISpec{SecondaryIPCount: 5}); err != nil {
				b.Fatal(err)
			}
		}
	}
}
