package ec2fake

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

func TestDriftDetachUnassignAssign(t *testing.T) {
	srv := startServer(t, Config{InstanceType: "t3.medium"})
	md, api := newIMDS(srv), newEC2(srv, 1)
	eni, err := srv.SeedENI(ENISpec{SecondaryIPCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	primary := srv.PrimaryENI()
	if err := srv.AssignIPs(primary.ID, "10.0.0.200"); err != nil {
		t.Fatal(err)
	}
	base := "network/interfaces/macs/" + primary.MAC + "/local-ipv4s"
	if got := mustMeta(t, md, base); !strings.Contains(got, "10.0.0.200") {
		t.Errorf("IMDS lacks the VIP: %q", got)
	}
	if err := srv.AssignIPs(primary.ID, "10.0.0.200"); err == nil {
		t.Error("an address in use assigned twice")
	}
	if err := srv.UnassignIPs(eni.ID, eni.SecondaryIPs[0]); err != nil {
		t.Fatal(err)
	}
	if got, _ := srv.ENI(eni.ID); len(got.SecondaryIPs) != 1 {
		t.Errorf("after unassign: %v", got.SecondaryIPs)
	}
	if err := srv.DetachENI(eni.ID); err != nil {
		t.Fatal(err)
	}
	if err := srv.DetachENI(primary.ID); err == nil {
		t.Error("the primary ENI detached")
	}
	macs := mustMeta(t, md, "network/interfaces/macs/")
	if strings.Contains(macs, eni.MAC) {
		t.Errorf("IMDS still lists the detached ENI: %q", macs)
	}
	out, err := api.DescribeNetworkInterfaces(ctxT(t), &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{eni.ID}})
	if err != nil || out.NetworkInterfaces[0].Status != types.NetworkInterfaceStatusAvailable {
		t.Errorf("detached ENI: %+v %v", out, err)
	}
	if n := len(srv.Calls()); n != 1 {
		t.Errorf("drift counted as EC2 calls: %v", srv.Calls())
	}
}

func TestBecomeInstance(t *testing.T) {
	srv := startServer(t, Config{})
	md, api := newIMDS(srv), newEC2(srv, 1)
	old := srv.Info().InstanceID
	oldPrimary := srv.PrimaryENI()
	if err := srv.BecomeInstance("i-0fedcba9876543210"); err != nil {
		t.Fatal(err)
	}
	if got := mustMeta(t, md, "instance-id"); got != "i-0fedcba9876543210" {
		t.Errorf("IMDS instance-id %q", got)
	}
	if p := srv.PrimaryENI(); p.ID == oldPrimary.ID || p.InstanceID != "i-0fedcba9876543210" {
		t.Errorf("new primary %+v", p)
	}
	if got, _ := srv.ENI(oldPrimary.ID); got.InstanceID != old {
		t.Errorf("the old instance's ENI moved: %+v", got)
	}
	_, err := api.AttachNetworkInterface(ctxT(t), &ec2.AttachNetworkInterfaceInput{
		DeviceIndex: aws.Int32(1), InstanceId: aws.String(old), NetworkInterfaceId: aws.String(srv.PrimaryENI().ID),
	})
	wantAPIError(t, err, "InvalidInstanceID.NotFound", 400)
	if err := srv.BecomeInstance(old); err == nil {
		t.Error("became a former instance again")
	}
}

func TestHookHoldsReply(t *testing.T) {
	srv := startServer(t, Config{})
	api := newEC2(srv, 1)
	release := make(chan struct{})
	srv.SetHook("CreateNetworkInterface", func() { <-release })
	done := make(chan error, 1)
	go func() {
		_, err := api.CreateNetworkInterface(ctxT(t), &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(srv.Info().Subnets[0].ID)})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(srv.ENIs()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if len(srv.ENIs()) != 2 {
		t.Fatal("the ENI was not created before the hook ran")
	}
	select {
	case <-done:
		t.Fatal("the reply was not held")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	srv.SetHook("CreateNetworkInterface", nil)
}

func TestNetworkCards(t *testing.T) {
	srv := startServer(t, Config{InstanceType: "x.cards", Limits: map[string]Limits{"x.cards": {MaxENIs: 4, IPv4PerENI: 4, CardENIs: 2}}})
	md, api := newIMDS(srv), newEC2(srv, 1)
	it, err := api.DescribeInstanceTypes(ctxT(t), &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"x.cards"}})
	if err != nil {
		t.Fatal(err)
	}
	ni := it.InstanceTypes[0].NetworkInfo
	if aws.ToInt32(ni.MaximumNetworkCards) != 2 || len(ni.NetworkCards) != 2 || aws.ToInt32(ni.NetworkCards[1].MaximumNetworkInterfaces) != 2 {
		t.Fatalf("network info %+v", ni)
	}
	subnet := srv.Info().Subnets[0].ID
	attach := func(dev, card int) error {
		c, err := api.CreateNetworkInterface(ctxT(t), &ec2.CreateNetworkInterfaceInput{SubnetId: aws.String(subnet)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = api.AttachNetworkInterface(ctxT(t), &ec2.AttachNetworkInterfaceInput{
			DeviceIndex: aws.Int32(int32(dev)), NetworkCardIndex: aws.Int32(int32(card)),
			InstanceId: aws.String(srv.Info().InstanceID), NetworkInterfaceId: c.NetworkInterface.NetworkInterfaceId,
		})
		return err
	}
	if err := attach(0, 1); err != nil {
		t.Fatalf("device 0 of card 1: %v", err)
	}
	if err := attach(1, 1); err != nil {
		t.Fatalf("device 1 of card 1: %v", err)
	}
	wantAPIError(t, attach(2, 1), "AttachmentLimitExceeded", 400)
	wantAPIError(t, attach(1, 2), "InvalidParameterValue", 400)
	if err := attach(1, 0); err != nil {
		t.Fatalf("device 1 of card 0: %v", err)
	}
	var onCard1 int
	for _, e := range srv.ENIs() {
		if e.NetworkCard == 1 {
			onCard1++
			if got := mustMeta(t, md, "network/interfaces/macs/"+e.MAC+"/network-card"); got != "1" {
				t.Errorf("IMDS network-card of %s: %q", e.ID, got)
			}
		}
	}
	if onCard1 != 2 {
		t.Errorf("%d ENIs on card 1", onCard1)
	}
}
