package ec2fake

import (
	"maps"
	"slices"
	"strings"
)

// The types below mirror the element names the SDK's ec2query deserializers
// look for (lowerCamel, lists as <fooSet><item>…</item></fooSet>). The SDK
// skips elements it does not know, but numbers and booleans must be valid
// when present, so they are never emitted empty.

// set renders a list the EC2 way; the wrapper is always emitted, so an
// empty list is <fooSet></fooSet> as real EC2 sends it.
type set[T any] struct {
	Items []T `xml:"item"`
}

type xmlGroup struct {
	GroupID   string `xml:"groupId"`
	GroupName string `xml:"groupName"`
}

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type xmlPrivateIP struct {
	PrivateIPAddress string `xml:"privateIpAddress"`
	PrivateDNSName   string `xml:"privateDnsName"`
	Primary          bool   `xml:"primary"`
}

type xmlPrefix struct {
	IPv4Prefix string `xml:"ipv4Prefix"`
}

type xmlAssignedIP struct {
	PrivateIPAddress string `xml:"privateIpAddress"`
}

type xmlAttachment struct {
	AttachmentID        string `xml:"attachmentId"`
	InstanceID          string `xml:"instanceId"`
	InstanceOwnerID     string `xml:"instanceOwnerId"`
	DeviceIndex         int    `xml:"deviceIndex"`
	NetworkCardIndex    int    `xml:"networkCardIndex"`
	Status              string `xml:"status"`
	AttachTime          string `xml:"attachTime"`
	DeleteOnTermination bool   `xml:"deleteOnTermination"`
}

type xmlENI struct {
	NetworkInterfaceID    string              `xml:"networkInterfaceId"`
	SubnetID              string              `xml:"subnetId"`
	VpcID                 string              `xml:"vpcId"`
	AvailabilityZone      string              `xml:"availabilityZone"`
	Description           string              `xml:"description"`
	OwnerID               string              `xml:"ownerId"`
	RequesterManaged      bool                `xml:"requesterManaged"`
	Status                string              `xml:"status"`
	MacAddress            string              `xml:"macAddress"`
	PrivateIPAddress      string              `xml:"privateIpAddress,omitempty"`
	PrivateDNSName        string              `xml:"privateDnsName,omitempty"`
	SourceDestCheck       bool                `xml:"sourceDestCheck"`
	GroupSet              set[xmlGroup]       `xml:"groupSet"`
	Attachment            *xmlAttachment      `xml:"attachment,omitempty"`
	TagSet                set[xmlTag]         `xml:"tagSet"`
	PrivateIPAddressesSet set[xmlPrivateIP]   `xml:"privateIpAddressesSet"`
	IPv4PrefixSet         *set[xmlPrefix]     `xml:"ipv4PrefixSet,omitempty"`
	IPv6AddressesSet      set[xmlIPv6Address] `xml:"ipv6AddressesSet"`
	IPv6PrefixSet         *set[xmlIPv6Prefix] `xml:"ipv6PrefixSet,omitempty"`
	InterfaceType         string              `xml:"interfaceType"`
}

func xmlTags(tags map[string]string) set[xmlTag] {
	var out set[xmlTag]
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out.Items = append(out.Items, xmlTag{Key: k, Value: tags[k]})
	}
	return out
}

// attachTimeFormat is how EC2 writes timestamps (milliseconds, Z).
const attachTimeFormat = "2006-01-02T15:04:05.000Z"

func (s *Server) xmlENILocked(e *eni) xmlENI {
	sn := s.subnets[e.subnetID]
	x := xmlENI{
		NetworkInterfaceID: e.id, SubnetID: sn.id, VpcID: s.cfg.VPCID, AvailabilityZone: sn.az,
		Description: e.description, OwnerID: s.cfg.AccountID, Status: e.status(),
		MacAddress: e.mac, SourceDestCheck: true, TagSet: xmlTags(e.tags), InterfaceType: "interface",
	}
	for _, g := range e.sgs {
		x.GroupSet.Items = append(x.GroupSet.Items, xmlGroup{GroupID: g, GroupName: g})
	}
	for i, a := range e.privateIPs() {
		x.PrivateIPAddressesSet.Items = append(x.PrivateIPAddressesSet.Items, xmlPrivateIP{
			PrivateIPAddress: a.String(), PrivateDNSName: s.dnsName(a), Primary: i == 0 && a == e.primary,
		})
	}
	if e.primary.IsValid() {
		x.PrivateIPAddress, x.PrivateDNSName = e.primary.String(), s.dnsName(e.primary)
	}
	if len(e.prefixes) > 0 {
		x.IPv4PrefixSet = &set[xmlPrefix]{}
		for _, p := range e.prefixes {
			x.IPv4PrefixSet.Items = append(x.IPv4PrefixSet.Items, xmlPrefix{IPv4Prefix: p.String()})
		}
	}
	for _, a := range e.ipv6s {
		x.IPv6AddressesSet.Items = append(x.IPv6AddressesSet.Items, xmlIPv6Address{IPv6Address: a.String()})
	}
	if len(e.prefixes6) > 0 {
		x.IPv6PrefixSet = &set[xmlIPv6Prefix]{}
		for _, p := range e.prefixes6 {
			x.IPv6PrefixSet.Items = append(x.IPv6PrefixSet.Items, xmlIPv6Prefix{IPv6Prefix: p.String()})
		}
	}
	if a := e.att; a != nil {
		x.Attachment = &xmlAttachment{
			AttachmentID: a.id, InstanceID: a.instanceID, InstanceOwnerID: s.cfg.AccountID,
			DeviceIndex: a.device, NetworkCardIndex: a.card, Status: "attached", AttachTime: a.at.Format(attachTimeFormat),
			DeleteOnTermination: a.deleteOnTermination,
		}
	}
	return x
}

type xmlSubnet struct {
	SubnetID                    string                      `xml:"subnetId"`
	SubnetArn                   string                      `xml:"subnetArn"`
	State                       string                      `xml:"state"`
	VpcID                       string                      `xml:"vpcId"`
	OwnerID                     string                      `xml:"ownerId"`
	CidrBlock                   string                      `xml:"cidrBlock"`
	AvailableIPAddressCount     int                         `xml:"availableIpAddressCount"`
	AvailabilityZone            string                      `xml:"availabilityZone"`
	DefaultForAz                bool                        `xml:"defaultForAz"`
	MapPublicIPOnLaunch         bool                        `xml:"mapPublicIpOnLaunch"`
	AssignIpv6AddressOnCreation bool                        `xml:"assignIpv6AddressOnCreation"`
	Ipv6CidrBlockAssociationSet set[xmlIPv6CidrAssociation] `xml:"ipv6CidrBlockAssociationSet"`
	TagSet                      set[xmlTag]                 `xml:"tagSet"`
}

func (s *Server) xmlSubnet(sn *subnet) xmlSubnet {
	x := xmlSubnet{
		SubnetID:  sn.id,
		SubnetArn: "arn:aws:ec2:" + s.region + ":" + s.cfg.AccountID + ":subnet/" + sn.id,
		State:     "available", VpcID: s.cfg.VPCID, OwnerID: s.cfg.AccountID, CidrBlock: sn.cidr.String(),
		AvailableIPAddressCount: sn.available(), AvailabilityZone: sn.az, TagSet: xmlTags(sn.tags),
	}
	if sn.v6 != nil {
		a := xmlIPv6CidrAssociation{IPv6CidrBlock: sn.v6.cidr.String(), AssociationID: "subnet-cidr-assoc-" + strings.TrimPrefix(sn.id, "subnet-")}
		a.IPv6CidrBlockState.State = "associated"
		x.Ipv6CidrBlockAssociationSet.Items = append(x.Ipv6CidrBlockAssociationSet.Items, a)
	}
	return x
}

type xmlNetworkCard struct {
	NetworkCardIndex         int    `xml:"networkCardIndex"`
	NetworkPerformance       string `xml:"networkPerformance"`
	MaximumNetworkInterfaces int    `xml:"maximumNetworkInterfaces"`
}

type xmlNetworkInfo struct {
	NetworkPerformance        string              `xml:"networkPerformance"`
	MaximumNetworkInterfaces  int                 `xml:"maximumNetworkInterfaces"`
	MaximumNetworkCards       int                 `xml:"maximumNetworkCards"`
	DefaultNetworkCardIndex   int                 `xml:"defaultNetworkCardIndex"`
	NetworkCards              set[xmlNetworkCard] `xml:"networkCards"`
	IPv4AddressesPerInterface int                 `xml:"ipv4AddressesPerInterface"`
	IPv6AddressesPerInterface int                 `xml:"ipv6AddressesPerInterface"`
	IPv6Supported             bool                `xml:"ipv6Supported"`
	EnaSupport                string              `xml:"enaSupport"`
	EfaSupported              bool                `xml:"efaSupported"`
}

type xmlVCpuInfo struct {
	DefaultVCpus int `xml:"defaultVCpus"`
}

type xmlInstanceType struct {
	InstanceType      string         `xml:"instanceType"`
	CurrentGeneration bool           `xml:"currentGeneration"`
	Hypervisor        string         `xml:"hypervisor"`
	VCpuInfo          *xmlVCpuInfo   `xml:"vCpuInfo,omitempty"`
	NetworkInfo       xmlNetworkInfo `xml:"networkInfo"`
}

func xmlInstanceTypeInfo(name string, l Limits) xmlInstanceType {
	const perf = "Up to 10 Gigabit"
	cards := []xmlNetworkCard{{NetworkPerformance: perf, MaximumNetworkInterfaces: l.cardENIs()}}
	// Other cards take the rest, as on real multi-card types.
	for rest, i := l.MaxENIs-l.cardENIs(), 1; rest > 0; i++ {
		n := min(rest, l.cardENIs())
		cards = append(cards, xmlNetworkCard{NetworkCardIndex: i, NetworkPerformance: perf, MaximumNetworkInterfaces: n})
		rest -= n
	}
	var vcpu *xmlVCpuInfo
	if l.VCPUs > 0 {
		vcpu = &xmlVCpuInfo{DefaultVCpus: l.VCPUs}
	}
	return xmlInstanceType{
		InstanceType: name, CurrentGeneration: true, Hypervisor: "nitro", VCpuInfo: vcpu,
		NetworkInfo: xmlNetworkInfo{
			NetworkPerformance: perf, MaximumNetworkInterfaces: l.MaxENIs, MaximumNetworkCards: len(cards),
			NetworkCards:              set[xmlNetworkCard]{Items: cards},
			IPv4AddressesPerInterface: l.IPv4PerENI, IPv6AddressesPerInterface: l.IPv4PerENI,
			IPv6Supported: true, EnaSupport: "required",
		},
	}
}
