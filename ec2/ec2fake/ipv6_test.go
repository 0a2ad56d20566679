package ec2fake

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

const testSubnet6 = "2600:1f18:abcd:1200::/64"

// IPv6 through the SDK's own serializers and deserializers: a /80 and
// addresses of the subnet's /64, listed by DescribeNetworkInterfaces,
// DescribeSubnets and IMDS, the per-ENI limit, the combinations EC2
// refuses, and a give-back.
func TestIPv6AssignDescribeUnassign(t *testing.T) {
	srv := startServer(t, Config{InstanceType: "t3.micro", Subnets: []SubnetConfig{{CIDR: "10.0.0.0/20", IPv6CIDR: testSubnet6}}}) // 2 slots per ENI
	api, md := newEC2(srv, 1), newIMDS(srv)
	p := srv.PrimaryENI()
	out, err := api.AssignIpv6Addresses(ctxT(t), &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: &p.ID, Ipv6PrefixCount: aws.Int32(1)})
	if err != nil {
		t.Fatal(err)
	}
	block := netip.MustParsePrefix(testSubnet6)
	if len(out.AssignedIpv6Prefixes) != 1 || len(out.AssignedIpv6Addresses) != 0 || aws.ToString(out.NetworkInterfaceId) != p.ID {
		t.Fatalf("reply %+v", out)
	}
	pfx := netip.MustParsePrefix(out.AssignedIpv6Prefixes[0])
	if pfx.Bits() != 80 || !block.Contains(pfx.Addr()) {
		t.Fatalf("prefix %s, want a /80 of %s", pfx, block)
	}
	addrs, err := api.AssignIpv6Addresses(ctxT(t), &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: &p.ID, Ipv6AddressCount: aws.Int32(1)})
	if err != nil || len(addrs.AssignedIpv6Addresses) != 1 || pfx.Contains(netip.MustParseAddr(addrs.AssignedIpv6Addresses[0])) {
		t.Fatalf("assign an address: %+v %v", addrs, err)
	}
	_, err = api.AssignIpv6Addresses(ctxT(t), &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: &p.ID, Ipv6PrefixCount: aws.Int32(1)})
	wantAPIError(t, err, "PrivateIpAddressLimitExceeded", 400)
	_, err = api.AssignIpv6Addresses(ctxT(t), &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: &p.ID, Ipv6PrefixCount: aws.Int32(1), Ipv6AddressCount: aws.Int32(1)})
	wantAPIError(t, err, "InvalidParameterCombination", 400)
	_, err = api.AssignIpv6Addresses(ctxT(t), &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: &p.ID, Ipv6Prefixes: []string{"2600:1f18:abcd:1200:5::/96"}})
	wantAPIError(t, err, "InvalidParameterValue", 400)

	d, err := api.DescribeNetworkInterfaces(ctxT(t), &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: []string{p.ID}})
	if err != nil || len(d.NetworkInterfaces) != 1 {
		t.Fatalf("describe: %v", err)
	}
	ni := d.NetworkInterfaces[0]
	if len(ni.Ipv6Prefixes) != 1 || aws.ToString(ni.Ipv6Prefixes[0].Ipv6Prefix) != pfx.String() ||
		len(ni.Ipv6Addresses) != 1 || aws.ToString(ni.Ipv6Addresses[0].Ipv6Address) != addrs.AssignedIpv6Addresses[0] {
		t.Errorf("describe: prefixes %+v addresses %+v", ni.Ipv6Prefixes, ni.Ipv6Addresses)
	}
	sn, err := api.DescribeSubnets(ctxT(t), &ec2.DescribeSubnetsInput{SubnetIds: []string{p.SubnetID}})
	if err != nil || len(sn.Subnets) != 1 || len(sn.Subnets[0].Ipv6CidrBlockAssociationSet) != 1 ||
		aws.ToString(sn.Subnets[0].Ipv6CidrBlockAssociationSet[0].Ipv6CidrBlock) != testSubnet6 {
		t.Errorf("describe subnets: %+v %v", sn, err)
	}
	base := "network/interfaces/macs/" + p.MAC + "/"
	for path, want := range map[string]string{
		"ipv6-prefix": pfx.String(), "ipv6s": addrs.AssignedIpv6Addresses[0],
		"subnet-ipv6-cidr-blocks": testSubnet6, "vpc-ipv6-cidr-blocks": "2600:1f18:abcd:1200::/56",
	} {
		if got, err := getMeta(ctxT(t), md, base+path); err != nil || got != want {
			t.Errorf("IMDS %s: %q %v, want %q", path, got, err, want)
		}
	}

	un, err := api.UnassignIpv6Addresses(ctxT(t), &ec2.UnassignIpv6AddressesInput{NetworkInterfaceId: &p.ID, Ipv6Prefixes: []string{pfx.String()}})
	if err != nil || !slices.Equal(un.UnassignedIpv6Prefixes, []string{pfx.String()}) {
		t.Fatalf("unassign: %+v %v", un, err)
	}
	_, err = api.UnassignIpv6Addresses(ctxT(t), &ec2.UnassignIpv6AddressesInput{NetworkInterfaceId: &p.ID, Ipv6Prefixes: []string{pfx.String()}})
	wantAPIError(t, err, "InvalidParameterValue", 400)
	if e, _ := srv.ENI(p.ID); len(e.IPv6Prefixes) != 0 || len(e.IPv6s) != 1 {
		t.Errorf("after unassign: %+v", e)
	}
	if _, err := getMeta(ctxT(t), md, base+"ipv6-prefix"); err == nil {
		t.Error("IMDS still lists ipv6-prefix")
	}
}

// A subnet without an IPv6 block: EC2 refuses, and IMDS lists no IPv6
// paths for its ENIs.
func TestIPv6SubnetWithoutBlock(t *testing.T) {
	srv := startServer(t, Config{})
	api, md := newEC2(srv, 1), newIMDS(srv)
	p := srv.PrimaryENI()
	_, err := api.AssignIpv6Addresses(ctxT(t), &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: &p.ID, Ipv6PrefixCount: aws.Int32(1)})
	wantAPIError(t, err, "InvalidParameterValue", 400)
	if err == nil || !strings.Contains(err.Error(), "does not have an IPv6 CIDR block") {
		t.Errorf("error %v", err)
	}
	if _, err := getMeta(ctxT(t), md, "network/interfaces/macs/"+p.MAC+"/subnet-ipv6-cidr-blocks"); err == nil {
		t.Error("IMDS lists subnet-ipv6-cidr-blocks for a subnet without IPv6")
	}
}
