package ec2fake

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

func TestDescribeInstanceTypes(t *testing.T) {
	srv := startServer(t, Config{})
	api := newEC2(srv, 1)
	want := map[types.InstanceType][2]int32{
		"t3.medium": {3, 6}, "m5.large": {3, 10}, "m5.xlarge": {4, 15}, "c5.4xlarge": {8, 30},
	}
	out, err := api.DescribeInstanceTypes(ctxT(t), &ec2.DescribeInstanceTypesInput{
		InstanceTypes: []types.InstanceType{"t3.medium", "m5.large", "m5.xlarge", "c5.4xlarge"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.InstanceTypes) != len(want) {
		t.Fatalf("got %d instance types, want %d", len(out.InstanceTypes), len(want))
	}
	for _, it := range out.InstanceTypes {
		ni := it.NetworkInfo
		w := want[it.InstanceType]
		if ni == nil || *ni.MaximumNetworkInterfaces != w[0] || *ni.Ipv4AddressesPerInterface != w[1] {
			t.Errorf("%s: network info %+v, want %v", it.InstanceType, ni, w)
		}
	}
	_, err = api.DescribeInstanceTypes(ctxT(t), &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"x9.huge"}})
	wantAPIError(t, err, "InvalidInstanceType", 400)
}

func TestAssignBeyondLimit(t *testing.T) {
	srv := startServer(t, Config{InstanceType: "m5.large"}) // 10 slots per ENI
	api := newEC2(srv, 1)
	p := srv.PrimaryENI()
	out, err := api.AssignPrivateIpAddresses(ctxT(t), &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, SecondaryPrivateIpAddressCount: aws.Int32(9),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.AssignedPrivateIpAddresses) != 9 || *out.NetworkInterfaceId != p.ID {
		t.Fatalf("reply %+v", out)
	}
	_, err = api.AssignPrivateIpAddresses(ctxT(t), &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, SecondaryPrivateIpAddressCount: aws.Int32(1),
	})
	wantAPIError(t, err, "PrivateIpAddressLimitExceeded", 400)
	if got := srv.PrimaryENI().SecondaryIPs; len(got) != 9 {
		t.Fatalf("EC2 has %d secondaries after the refused call, want 9", len(got))
	}
}

func TestAssignSpecificAndUnassign(t *testing.T) {
	srv := startServer(t, Config{SecurityGroupIDs: []string{"sg-0123456789abcdef0"}})
	api := newEC2(srv, 1)
	p := srv.PrimaryENI()
	ctx := ctxT(t)
	_, err := api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, PrivateIpAddresses: []string{"10.0.3.7", "10.0.3.8"},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, PrivateIpAddresses: []string{"10.0.3.7"},
	})
	wantAPIError(t, err, "InvalidIPAddress.InUse", 400)
	_, err = api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, PrivateIpAddresses: []string{"10.200.0.1"},
	})
	wantAPIError(t, err, "InvalidParameterValue", 400)
	_, err = api.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, PrivateIpAddresses: []string{"10.0.3.7", "10.0.9.9"},
	})
	wantAPIError(t, err, "InvalidParameterValue", 400)
	_, err = api.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, PrivateIpAddresses: []string{p.PrimaryIP},
	})
	wantAPIError(t, err, "InvalidParameterValue", 400)
	_, err = api.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, PrivateIpAddresses: []string{"10.0.3.7"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.PrimaryENI().SecondaryIPs; !slices.Equal(got, []string{"10.0.3.8"}) {
		t.Fatalf("secondaries = %v, want [10.0.3.8]", got)
	}
	_, err = api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String("eni-0000000000000dead")})
	wantAPIError(t, err, "InvalidNetworkInterfaceID.NotFound", 400)
	_, err = api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String("nope")})
	wantAPIError(t, err, "InvalidNetworkInterfaceID.Malformed", 400)
	_, err = api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: &p.ID})
	wantAPIError(t, err, "MissingParameter", 400)
}

func TestPrefixes(t *testing.T) {
	srv := startServer(t, Config{InstanceType: "t3.medium"}) // 6 slots per ENI
	api := newEC2(srv, 1)
	p := srv.PrimaryENI()
	ctx := ctxT(t)
	out, err := api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, Ipv4PrefixCount: aws.Int32(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.AssignedIpv4Prefixes) != 2 || len(out.AssignedPrivateIpAddresses) != 0 {
		t.Fatalf("reply %+v", out)
	}
	subnet := netip.MustParsePrefix(p.SubnetCIDR)
	var got []string
	for _, ap := range out.AssignedIpv4Prefixes {
		pfx := netip.MustParsePrefix(*ap.Ipv4Prefix)
		if pfx.Bits() != 28 || pfx.Masked() != pfx || !subnet.Contains(pfx.Addr()) || pfx.Contains(netip.MustParseAddr(p.PrimaryIP)) {
			t.Fatalf("prefix %s is not a free aligned /28 of %s", pfx, subnet)
		}
		got = append(got, pfx.String())
	}
	// Prefixes and addresses share the slots: primary + 2 prefixes + 3 IPs = 6.
	if _, err := api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, SecondaryPrivateIpAddressCount: aws.Int32(3),
	}); err != nil {
		t.Fatal(err)
	}
	_, err = api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, Ipv4PrefixCount: aws.Int32(1),
	})
	wantAPIError(t, err, "PrivateIpAddressLimitExceeded", 400)
	_, err = api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, Ipv4PrefixCount: aws.Int32(1), SecondaryPrivateIpAddressCount: aws.Int32(1),
	})
	wantAPIError(t, err, "InvalidParameterCombination", 400)

	if _, err := api.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, Ipv4Prefixes: got[:1],
	}); err != nil {
		t.Fatal(err)
	}
	if e := srv.PrimaryENI(); !slices.Equal(e.Prefixes, got[1:]) {
		t.Fatalf("prefixes after unassign = %v, want %v", e.Prefixes, got[1:])
	}
	// An explicit prefix; the freed one can be delegated again.
	if _, err := api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, Ipv4Prefixes: got[:1],
	}); err != nil {
		t.Fatal(err)
	}
	_, err = api.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
		NetworkInterfaceId: &p.ID, Ipv4Prefixes: []string{"10.0.8.0/28"},
	})
	wantAPIError(t, err, "InvalidParameterValue", 400)
}

func TestCreateAttachUpToLimit(t *testing.T) {
	srv := startServer(t, Config{InstanceType: "m5.large"}) // 3 ENIs
	api := newEC2(srv, 1)
	info := srv.Info()
	ctx := ctxT(t)
	var ids []string
	for dev := int32(1); dev <= 3; dev++ {
		cr, err := api.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{
			SubnetId: &info.Subnets[0].ID, Groups: info.SecurityGroupIDs, Description: aws.String("eni-cni pool"),
			TagSpecifications: []types.TagSpecification{{
				ResourceType: types.ResourceTypeNetworkInterface,
				Tags:         []types.Tag{{Key: aws.String("cluster"), Value: aws.String("demo")}},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		ni := cr.NetworkInterface
		if !validID(*ni.NetworkInterfaceId, "eni") || !strings.HasPrefix(*ni.MacAddress, "02:") ||
			ni.Status != types.NetworkInterfaceStatusAvailable || *ni.Description != "eni-cni pool" ||
			len(ni.TagSet) != 1 || *ni.TagSet[0].Value != "demo" || len(ni.Groups) != 1 ||
			len(ni.PrivateIpAddresses) != 1 || !*ni.PrivateIpAddresses[0].Primary {
			t.Fatalf("created interface %+v", ni)
		}
		if !netip.MustParsePrefix(info.Subnets[0].CIDR).Contains(netip.MustParseAddr(*ni.PrivateIpAddress)) {
			t.Fatalf("primary %s outside the subnet", *ni.PrivateIpAddress)
		}
		ids = append(ids, *ni.NetworkInterfaceId)
		att, err := api.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{
			DeviceIndex: aws.Int32(dev), InstanceId: &info.InstanceID, NetworkInterfaceId: ni.NetworkInterfaceId,
		})
		if dev == 3 {
			wantAPIError(t, err, "AttachmentLimitExceeded", 400)
			break
		}
		if err != nil || !validID(*att.AttachmentId, "eni-attach") {
			t.Fatalf("attach %d: %v", dev, err)
		}
	}
	_, err := api.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{
		DeviceIndex: aws.Int32(1), InstanceId: &info.InstanceID, NetworkInterfaceId: &ids[0],
	})
	wantAPIError(t, err, "InvalidParameterValue", 400) // already attached
	_, err = api.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{
		DeviceIndex: aws.Int32(1), InstanceId: aws.String("i-0fffffffffffffff0"), NetworkInterfaceId: &ids[2],
	})
	wantAPIError(t, err, "InvalidInstanceID.NotFound", 400)
	if n := len(srv.ENIs()); n != 4 {
		t.Fatalf("EC2 has %d ENIs, want 4 (3 attached, 1 available)", n)
	}
}

func TestENILifecycle(t *testing.T) {
	srv := startServer(t, Config{})
	api := newEC2(srv, 1)
	ctx := ctxT(t)
	e, err := srv.SeedENI(ENISpec{SecondaryIPCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{
		NetworkInterfaceId: &e.ID,
		Attachment:         &types.NetworkInterfaceAttachmentChanges{AttachmentId: &e.AttachmentID, DeleteOnTermination: aws.Bool(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := api.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{e.ID}})
	if err != nil {
		t.Fatal(err)
	}
	ni := d.NetworkInterfaces[0]
	if a := ni.Attachment; a == nil || !*a.DeleteOnTermination || *a.DeviceIndex != 1 || *a.InstanceId != srv.Info().InstanceID ||
		a.Status != types.AttachmentStatusAttached || a.AttachTime == nil || len(ni.PrivateIpAddresses) != 3 {
		t.Fatalf("described %+v attachment %+v", ni, ni.Attachment)
	}
	_, err = api.DeleteNetworkInterface(ctx, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: &e.ID})
	wantAPIError(t, err, "InvalidNetworkInterface.InUse", 400)
	p := srv.PrimaryENI()
	_, err = api.DetachNetworkInterface(ctx, &ec2.DetachNetworkInterfaceInput{AttachmentId: &p.AttachmentID})
	wantAPIError(t, err, "OperationNotPermitted", 400)
	if _, err = api.DetachNetworkInterface(ctx, &ec2.DetachNetworkInterfaceInput{AttachmentId: &e.AttachmentID}); err != nil {
		t.Fatal(err)
	}
	if got, _ := srv.ENI(e.ID); got.Status != "available" || got.DeviceIndex != -1 {
		t.Fatalf("after detach: %+v", got)
	}
	_, err = api.DetachNetworkInterface(ctx, &ec2.DetachNetworkInterfaceInput{AttachmentId: &e.AttachmentID})
	wantAPIError(t, err, "InvalidAttachmentID.NotFound", 400)
	if _, err = api.DeleteNetworkInterface(ctx, &ec2.DeleteNetworkInterfaceInput{NetworkInterfaceId: &e.ID}); err != nil {
		t.Fatal(err)
	}
	_, err = api.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{e.ID}})
	wantAPIError(t, err, "InvalidNetworkInterfaceID.NotFound", 400)
	// The deleted ENI's addresses are free again.
	if _, err := srv.SeedENI(ENISpec{PrimaryIP: e.PrimaryIP, SecondaryIPs: e.SecondaryIPs}); err != nil {
		t.Fatalf("addresses of the deleted ENI not released: %v", err)
	}
}

func TestDescribeNetworkInterfacesFilters(t *testing.T) {
	srv := startServer(t, Config{InstanceType: "c5.4xlarge"})
	api := newEC2(srv, 1)
	ctx := ctxT(t)
	for i := range 6 {
		spec := ENISpec{Detached: i%2 == 1, Tags: map[string]string{"cluster": "demo"}}
		if i == 0 {
			spec.Tags = map[string]string{"cluster": "other", "owner": "me"}
		}
		if _, err := srv.SeedENI(spec); err != nil {
			t.Fatal(err)
		}
	}
	count := func(fs ...types.Filter) int {
		t.Helper()
		out, err := api.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{Filters: fs})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.NetworkInterfaces)
	}
	f := func(name string, values ...string) types.Filter { return types.Filter{Name: &name, Values: values} }
	inst := srv.Info().InstanceID
	cases := []struct {
		fs   []types.Filter
		want int
	}{
		{nil, 7},
		{[]types.Filter{f("attachment.instance-id", inst)}, 4},
		{[]types.Filter{f("tag:cluster", "demo")}, 5},
		{[]types.Filter{f("tag:cluster", "demo", "other")}, 6},
		{[]types.Filter{f("tag:cluster", "d*")}, 5},
		{[]types.Filter{f("tag:cluster", "demo"), f("status", "available")}, 3},
		{[]types.Filter{f("tag-key", "owner")}, 1},
		{[]types.Filter{f("attachment.device-index", "0")}, 1},
		{[]types.Filter{f("private-ip-address", srv.PrimaryENI().PrimaryIP)}, 1},
	}
	for _, c := range cases {
		if got := count(c.fs...); got != c.want {
			t.Errorf("filters %v: %d interfaces, want %d", c.fs, got, c.want)
		}
	}
	_, err := api.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{Filters: []types.Filter{f("no-such-filter", "x")}})
	wantAPIError(t, err, "InvalidParameterValue", 400)

	// The SDK paginator follows NextToken to the end.
	pg := ec2.NewDescribeNetworkInterfacesPaginator(api, &ec2.DescribeNetworkInterfacesInput{MaxResults: aws.Int32(5)})
	pages, total := 0, 0
	for pg.HasMorePages() {
		out, err := pg.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		total += len(out.NetworkInterfaces)
	}
	if pages != 2 || total != 7 {
		t.Fatalf("paginated %d interfaces in %d pages, want 7 in 2", total, pages)
	}
}

func TestSubnetsAndTags(t *testing.T) {
	srv := startServer(t, Config{
		VPCCIDRs: []string{"10.1.0.0/16"},
		Subnets: []SubnetConfig{
			{CIDR: "10.1.0.0/24", Tags: map[string]string{"role": "nodes"}},
			{CIDR: "10.1.1.0/24", Tags: map[string]string{"role": "pods"}},
		},
	})
	api := newEC2(srv, 1)
	ctx := ctxT(t)
	out, err := api.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{
		Filters: []types.Filter{{Name: aws.String("tag:role"), Values: []string{"pods"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Subnets) != 1 || *out.Subnets[0].CidrBlock != "10.1.1.0/24" || *out.Subnets[0].AvailableIpAddressCount != 251 {
		t.Fatalf("subnets %+v", out.Subnets)
	}
	pods := *out.Subnets[0].SubnetId
	e, err := srv.SeedENI(ENISpec{SubnetID: pods, PrefixCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.PrimaryIP, "10.1.1.") || !strings.HasPrefix(e.Prefixes[0], "10.1.1.") {
		t.Fatalf("ENI in the pods subnet got %s and %v", e.PrimaryIP, e.Prefixes)
	}
	out, err = api.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{pods}})
	if err != nil || *out.Subnets[0].AvailableIpAddressCount != 251-1-16 {
		t.Fatalf("available after one address and one prefix: %v %v", out, err)
	}
	_, err = api.CreateTags(ctx, &ec2.CreateTagsInput{
		Resources: []string{e.ID, pods}, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := srv.ENI(e.ID); got.Tags["k"] != "v" {
		t.Fatalf("tags %v", got.Tags)
	}
	_, err = api.CreateTags(ctx, &ec2.CreateTagsInput{
		Resources: []string{"eni-0000000000000dead"}, Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}},
	})
	wantAPIError(t, err, "InvalidNetworkInterfaceID.NotFound", 400)
	_, err = api.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{"subnet-0000000000000dead"}})
	wantAPIError(t, err, "InvalidSubnetID.NotFound", 400)
}

func TestThrottlingAndRetries(t *testing.T) {
	srv := startServer(t, Config{})
	p := srv.PrimaryENI()
	in := &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: &p.ID, SecondaryPrivateIpAddressCount: aws.Int32(1)}

	srv.Throttle("AssignPrivateIpAddresses", 2)
	if _, err := newEC2(srv, 3).AssignPrivateIpAddresses(ctxT(t), in); err != nil {
		t.Fatalf("3 attempts should outlast 2 throttles: %v", err)
	}
	if c := srv.Calls()["AssignPrivateIpAddresses"]; c != 3 {
		t.Fatalf("calls = %d, want 3 (2 throttled + 1)", c)
	}
	srv.ResetCalls()
	srv.Throttle("AssignPrivateIpAddresses", 5)
	_, err := newEC2(srv, 2).AssignPrivateIpAddresses(ctxT(t), in)
	wantAPIError(t, err, "RequestLimitExceeded", 503)
	if c := srv.Calls(); c["AssignPrivateIpAddresses"] != 2 || len(c) != 1 {
		t.Fatalf("calls = %v, want 2 AssignPrivateIpAddresses", c)
	}
	if got := len(srv.PrimaryENI().SecondaryIPs); got != 1 {
		t.Fatalf("throttled calls changed state: %d secondaries", got)
	}
	srv.ClearFaults()
	if _, err := newEC2(srv, 1).AssignPrivateIpAddresses(ctxT(t), in); err != nil {
		t.Fatalf("after ClearFaults: %v", err)
	}
}

func TestInjectedFaultsAndLatency(t *testing.T) {
	srv := startServer(t, Config{})
	api := newEC2(srv, 1)
	srv.InjectFault(AllActions, Fault{Code: "UnauthorizedOperation", Times: 1})
	_, err := api.DescribeSubnets(ctxT(t), &ec2.DescribeSubnetsInput{})
	wantAPIError(t, err, "UnauthorizedOperation", 403)
	if _, err := api.DescribeSubnets(ctxT(t), &ec2.DescribeSubnetsInput{}); err != nil {
		t.Fatalf("fault should have been used up: %v", err)
	}
	srv.InjectFault("DescribeSubnets", Fault{Code: "InternalError"})
	for range 2 {
		_, err = api.DescribeSubnets(ctxT(t), &ec2.DescribeSubnetsInput{})
		wantAPIError(t, err, "InternalError", 500)
	}
	srv.ClearFaults()

	srv.SetLatency("DescribeSubnets", 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = api.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a deadline error from the delayed reply, got %v", err)
	}
	start := time.Now()
	if _, err := api.DescribeInstanceTypes(ctxT(t), &ec2.DescribeInstanceTypesInput{}); err != nil || time.Since(start) > 200*time.Millisecond {
		t.Fatalf("latency leaked to another action: %v after %v", err, time.Since(start))
	}
	srv.SetLatency("DescribeSubnets", 0)
	if _, err := api.DescribeSubnets(ctxT(t), &ec2.DescribeSubnetsInput{}); err != nil {
		t.Fatal(err)
	}
}

func TestDryRun(t *testing.T) {
	srv := startServer(t, Config{})
	_, err := newEC2(srv, 1).DescribeSubnets(ctxT(t), &ec2.DescribeSubnetsInput{DryRun: aws.Bool(true)})
	wantAPIError(t, err, "DryRunOperation", 412)
}

func TestConcurrentAssignsAreUnique(t *testing.T) {
	srv := startServer(t, Config{InstanceType: "c5.4xlarge"})
	api := newEC2(srv, 1)
	p := srv.PrimaryENI()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			_, err := api.AssignPrivateIpAddresses(ctxT(t), &ec2.AssignPrivateIpAddressesInput{
				NetworkInterfaceId: &p.ID, SecondaryPrivateIpAddressCount: aws.Int32(1),
			})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ips := srv.PrimaryENI().SecondaryIPs
	slices.Sort(ips)
	if len(ips) != 20 || len(slices.Compact(ips)) != 20 {
		t.Fatalf("secondaries %v: want 20 distinct", ips)
	}
}

// TestLargeRepliesWithoutRetries guards the default EC2BaseLatency: without
// it, loopback replies race the SDK's request-body handling and large replies
// fail now and then with "use of closed network connection".
func TestLargeRepliesWithoutRetries(t *testing.T) {
	srv := startServer(t, Config{})
	api := newEC2(srv, 1)
	for i := range 200 {
		out, err := api.DescribeInstanceTypes(context.Background(), &ec2.DescribeInstanceTypesInput{})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if len(out.InstanceTypes) < 10 {
			t.Fatalf("call %d: %d instance types", i, len(out.InstanceTypes))
		}
	}
}
