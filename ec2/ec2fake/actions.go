package ec2fake

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The EC2 actions. Each runs with s.mu held (see dispatch), reads its
// parameters in the ec2query encoding and returns a reply or an *apiError.
// Changes EC2 makes are published to IMDS with the configured lag.

type assignResponse struct {
	meta
	NetworkInterfaceID string             `xml:"networkInterfaceId"`
	AssignedPrivateIPs set[xmlAssignedIP] `xml:"assignedPrivateIpAddressesSet"`
	AssignedPrefixes   set[xmlPrefix]     `xml:"assignedIpv4PrefixSet"`
	Return             bool               `xml:"return"`
}

// assignNames are the parameter names an action uses for explicit addresses
// and prefixes: AssignPrivateIpAddresses has PrivateIpAddress.N and
// Ipv4Prefix.N, CreateNetworkInterface has PrivateIpAddresses.N.PrivateIpAddress
// and Ipv4Prefix.N.Ipv4Prefix.
type assignNames struct{ ipList, ipMember, prefixMember string }

// readAssign parses the addresses and prefixes asked for and rejects the
// combinations EC2 rejects.
func readAssign(p params, names assignNames) (assignRequest, error) {
	var r assignRequest
	var err error
	var hasCount, hasPrefixCount bool
	if r.count, hasCount, err = p.optInt("SecondaryPrivateIpAddressCount"); err != nil {
		return r, err
	}
	if r.prefixCount, hasPrefixCount, err = p.optInt("Ipv4PrefixCount"); err != nil {
		return r, err
	}
	if (hasCount && r.count < 1) || (hasPrefixCount && r.prefixCount < 1) {
		return r, apiErr("InvalidParameterValue", "Address and prefix counts must be at least 1")
	}
	if r.ips, err = parseAddrs(p.list(names.ipList, names.ipMember)); err != nil {
		return r, apiErr("InvalidParameterValue", "%v", err)
	}
	if r.prefixes, err = parsePrefixes(p.list("Ipv4Prefix", names.prefixMember)); err != nil {
		return r, apiErr("InvalidParameterValue", "%v", err)
	}
	addrs := r.count > 0 || len(r.ips) > 0
	pfx := r.prefixCount > 0 || len(r.prefixes) > 0
	switch {
	case addrs && pfx:
		return r, apiErr("InvalidParameterCombination",
			"You may specify either secondary IPv4 addresses or IPv4 prefixes, but not both.")
	case r.count > 0 && len(r.ips) > 0:
		return r, apiErr("InvalidParameterCombination",
			"Specify either SecondaryPrivateIpAddressCount or PrivateIpAddress, not both.")
	case r.prefixCount > 0 && len(r.prefixes) > 0:
		return r, apiErr("InvalidParameterCombination", "Specify either Ipv4PrefixCount or Ipv4Prefix, not both.")
	}
	return r, nil
}

func (s *Server) assignPrivateIPAddresses(p params) (response, error) {
	e, err := s.lookupENILocked(p.Get("NetworkInterfaceId"))
	if err != nil {
		return nil, err
	}
	r, err := readAssign(p, assignNames{ipList: "PrivateIpAddress"})
	if err != nil {
		return nil, err
	}
	if r.slots() == 0 {
		return nil, apiErr("MissingParameter",
			"Either SecondaryPrivateIpAddressCount, PrivateIpAddress, Ipv4PrefixCount or Ipv4Prefix must be specified")
	}
	ips, pfx, err := s.assignLocked(e, r)
	if err != nil {
		return nil, err
	}
	s.publishENILocked(e, true)
	resp := &assignResponse{NetworkInterfaceID: e.id, Return: true}
	for _, a := range ips {
		resp.AssignedPrivateIPs.Items = append(resp.AssignedPrivateIPs.Items, xmlAssignedIP{a.String()})
	}
	for _, q := range pfx {
		resp.AssignedPrefixes.Items = append(resp.AssignedPrefixes.Items, xmlPrefix{q.String()})
	}
	return resp, nil
}

func (s *Server) unassignPrivateIPAddresses(p params) (response, error) {
	e, err := s.lookupENILocked(p.Get("NetworkInterfaceId"))
	if err != nil {
		return nil, err
	}
	ips, err := parseAddrs(p.list("PrivateIpAddress", ""))
	if err != nil {
		return nil, apiErr("InvalidParameterValue", "%v", err)
	}
	pfx, err := parsePrefixes(p.list("Ipv4Prefix", ""))
	if err != nil {
		return nil, apiErr("InvalidParameterValue", "%v", err)
	}
	if len(ips)+len(pfx) == 0 {
		return nil, apiErr("MissingParameter", "Either PrivateIpAddress or Ipv4Prefix must be specified")
	}
	if err := s.unassignLocked(e, ips, pfx); err != nil {
		return nil, err
	}
	s.publishENILocked(e, true)
	return &returnResponse{Return: true}, nil
}

type createENIResponse struct {
	meta
	NetworkInterface xmlENI `xml:"networkInterface"`
	ClientToken      string `xml:"clientToken,omitempty"`
}

// readTagSpecs returns the tags of the network-interface TagSpecifications.
func readTagSpecs(p params) (map[string]string, error) {
	tags := map[string]string{}
	for _, n := range p.indices("TagSpecification") {
		prefix := fmt.Sprintf("TagSpecification.%d", n)
		if rt := p.Get(prefix + ".ResourceType"); rt != "network-interface" {
			return nil, apiErr("InvalidParameterValue",
				"'%s' is not a valid taggable resource type for this operation.", rt)
		}
		t, err := p.tags(prefix + ".Tag")
		if err != nil {
			return nil, err
		}
		maps.Copy(tags, t)
	}
	return tags, nil
}

func (s *Server) createNetworkInterface(p params) (response, error) {
	req := createRequest{subnetID: p.Get("SubnetId"), sgs: p.list("SecurityGroupId", ""), description: p.Get("Description")}
	tags, err := readTagSpecs(p)
	if err != nil {
		return nil, err
	}
	req.tags = tags
	ar, err := readAssign(p, assignNames{"PrivateIpAddresses", ".PrivateIpAddress", ".Ipv4Prefix"})
	if err != nil {
		return nil, err
	}
	if req.primary, ar.ips, err = createPrimary(p, ar.ips); err != nil {
		return nil, err
	}
	e, err := s.createENILocked(req)
	if err != nil {
		return nil, err
	}
	if _, _, err := s.assignLocked(e, ar); err != nil {
		_ = s.deleteENILocked(e)
		return nil, err
	}
	return &createENIResponse{NetworkInterface: s.xmlENILocked(e), ClientToken: p.Get("ClientToken")}, nil
}

// createPrimary picks the primary address CreateNetworkInterface asks for:
// PrivateIpAddress, or the PrivateIpAddresses.N entry marked Primary, which
// then is not also a secondary.
func createPrimary(p params, ips []netip.Addr) (netip.Addr, []netip.Addr, error) {
	if v := p.Get("PrivateIpAddress"); v != "" {
		a, err := netip.ParseAddr(v)
		if err != nil || !a.Is4() {
			return netip.Addr{}, nil, apiErr("InvalidParameterValue", "Invalid private IP address %q", v)
		}
		return a, ips, nil
	}
	for i, n := range p.indices("PrivateIpAddresses") {
		if p.Get(fmt.Sprintf("PrivateIpAddresses.%d.Primary", n)) == "true" && i < len(ips) {
			return ips[i], slices.Delete(slices.Clone(ips), i, i+1), nil
		}
	}
	return netip.Addr{}, ips, nil
}

type attachResponse struct {
	meta
	AttachmentID     string `xml:"attachmentId"`
	NetworkCardIndex int    `xml:"networkCardIndex"`
}

func (s *Server) attachNetworkInterface(p params) (response, error) {
	dev, ok, err := p.optInt("DeviceIndex")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apiErr("MissingParameter", "The request must contain the parameter DeviceIndex")
	}
	card, _, err := p.optInt("NetworkCardIndex")
	if err != nil {
		return nil, err
	}
	e, err := s.lookupENILocked(p.Get("NetworkInterfaceId"))
	if err != nil {
		return nil, err
	}
	att, err := s.attachLocked(e, p.Get("InstanceId"), dev, card, false)
	if err != nil {
		return nil, err
	}
	s.publishENILocked(e, true)
	s.scheduleLinkLocked(e)
	return &attachResponse{AttachmentID: att.id, NetworkCardIndex: card}, nil
}

func (s *Server) detachNetworkInterface(p params) (response, error) {
	in, err := s.detachLocked(p.Get("AttachmentId"))
	if err != nil {
		return nil, err
	}
	if in != nil {
		s.publishLocked(in, true)
	}
	return &returnResponse{Return: true}, nil
}

func (s *Server) deleteNetworkInterface(p params) (response, error) {
	e, err := s.lookupENILocked(p.Get("NetworkInterfaceId"))
	if err != nil {
		return nil, err
	}
	if err := s.deleteENILocked(e); err != nil {
		return nil, err
	}
	return &returnResponse{Return: true}, nil
}

// modifyNetworkInterfaceAttribute changes one attribute per call, as EC2
// requires: the attachment's DeleteOnTermination, the description, the
// security groups or SourceDestCheck (accepted and ignored).
func (s *Server) modifyNetworkInterfaceAttribute(p params) (response, error) {
	e, err := s.lookupENILocked(p.Get("NetworkInterfaceId"))
	if err != nil {
		return nil, err
	}
	attID, desc, sgs := p.Get("Attachment.AttachmentId"), p.Get("Description.Value"), p.list("SecurityGroupId", "")
	given := 0
	for _, b := range []bool{attID != "", p.Has("Description.Value"), len(sgs) > 0, p.Has("SourceDestCheck.Value")} {
		if b {
			given++
		}
	}
	switch {
	case given == 0:
		return nil, apiErr("MissingParameter", "You must specify an attribute to modify")
	case given > 1:
		return nil, apiErr("InvalidParameterCombination", "Fields for multiple attribute types specified")
	case attID != "":
		if e.att == nil || e.att.id != attID {
			return nil, apiErr("InvalidAttachmentID.NotFound", "The attachment ID '%s' does not exist", attID)
		}
		dot, ok, err := p.optBool("Attachment.DeleteOnTermination")
		if err != nil {
			return nil, err
		}
		if ok {
			e.att.deleteOnTermination = dot
		}
	case p.Has("Description.Value"):
		e.description = desc
	case len(sgs) > 0:
		for _, sg := range sgs {
			if !slices.Contains(s.cfg.SecurityGroupIDs, sg) {
				return nil, apiErr("InvalidGroup.NotFound", "The security group '%s' does not exist", sg)
			}
		}
		e.sgs = sgs
		s.publishENILocked(e, true)
	}
	return &returnResponse{Return: true}, nil
}

// taggable resolves a resource id for CreateTags/DeleteTags to its tag map;
// the instance, VPC and security groups accept tags that are not kept.
func (s *Server) taggableLocked(id string) (map[string]string, error) {
	kind, _, _ := strings.Cut(id, "-")
	switch kind {
	case "eni":
		e, err := s.lookupENILocked(id)
		if err != nil {
			return nil, err
		}
		return e.tags, nil
	case "subnet":
		sn, err := s.lookupSubnetLocked(id)
		if err != nil {
			return nil, err
		}
		return sn.tags, nil
	case "i", "vpc", "sg":
		return map[string]string{}, nil
	}
	return nil, apiErr("InvalidID", "The ID '%s' is not valid", id)
}

func (s *Server) createTags(p params) (response, error) {
	return s.changeTags(p, func(dst, tags map[string]string) { maps.Copy(dst, tags) })
}

func (s *Server) deleteTags(p params) (response, error) {
	return s.changeTags(p, func(dst, tags map[string]string) {
		for k, v := range tags {
			if cur, ok := dst[k]; ok && (v == "" || v == cur) {
				delete(dst, k)
			}
		}
	})
}

// changeTags validates every resource first, then applies the change, so a
// bad id leaves all tags untouched as in EC2.
func (s *Server) changeTags(p params, apply func(dst, tags map[string]string)) (response, error) {
	ids := p.list("ResourceId", "")
	if len(ids) == 0 {
		return nil, apiErr("MissingParameter", "The request must contain the parameter resourceIdSet")
	}
	tags, err := p.tags("Tag")
	if err != nil {
		return nil, err
	}
	var dsts []map[string]string
	for _, id := range ids {
		m, err := s.taggableLocked(id)
		if err != nil {
			return nil, err
		}
		dsts = append(dsts, m)
	}
	for _, m := range dsts {
		apply(m, tags)
	}
	return &returnResponse{Return: true}, nil
}

type describeENIsResponse struct {
	meta
	NetworkInterfaceSet set[xmlENI] `xml:"networkInterfaceSet"`
	NextToken           string      `xml:"nextToken,omitempty"`
}

func (s *Server) describeNetworkInterfaces(p params) (response, error) {
	ids := p.list("NetworkInterfaceId", "")
	for _, id := range ids {
		if _, err := s.lookupENILocked(id); err != nil {
			return nil, err
		}
	}
	fs := p.filters()
	// EC2 pages first and filters each page afterwards: a filtered call
	// returns at most MaxResults of the account's ENIs, fewer (even none)
	// matching, and a NextToken while any are left, so a caller that pages
	// pays one call per MaxResults ENIs in the region, not per match.
	all := s.sortedENIsLocked()
	page, next, err := paginate(p, len(all))
	if err != nil {
		return nil, err
	}
	resp := &describeENIsResponse{NextToken: next}
	for _, i := range page {
		e := all[i]
		if len(ids) > 0 && !slices.Contains(ids, e.id) {
			continue
		}
		ok, err := matchFilters(fs, func(name string) ([]string, bool) { return s.eniFilterValuesLocked(e, name) })
		if err != nil {
			return nil, err
		}
		if ok {
			resp.NetworkInterfaceSet.Items = append(resp.NetworkInterfaceSet.Items, s.xmlENILocked(e))
		}
	}
	return resp, nil
}

// paginate applies MaxResults/NextToken (an opaque offset) to n results.
func paginate(p params, n int) ([]int, string, error) {
	start := 0
	if tok := p.Get("NextToken"); tok != "" {
		v, err := strconv.Atoi(tok)
		if err != nil || v < 0 || v > n {
			return nil, "", apiErr("InvalidNextToken", "The token '%s' is invalid", tok)
		}
		start = v
	}
	max, ok, err := p.optInt("MaxResults")
	if err != nil {
		return nil, "", err
	}
	if ok && (max < 5 || max > 1000) {
		return nil, "", apiErr("InvalidParameterValue", "MaxResults must be between 5 and 1000, got %d", max)
	}
	end, next := n, ""
	if ok && start+max < n {
		end, next = start+max, strconv.Itoa(start+max)
	}
	out := make([]int, 0, end-start)
	for i := start; i < end; i++ {
		out = append(out, i)
	}
	return out, next, nil
}

// eniFilterValuesLocked answers DescribeNetworkInterfaces filters.
func (s *Server) eniFilterValuesLocked(e *eni, name string) ([]string, bool) {
	one := func(v string) ([]string, bool) { return []string{v}, true }
	att := func(f func(a *attachment) string) ([]string, bool) {
		if e.att == nil {
			return nil, true
		}
		return one(f(e.att))
	}
	switch name {
	case "network-interface-id":
		return one(e.id)
	case "attachment.instance-id":
		return att(func(a *attachment) string { return a.instanceID })
	case "attachment.attachment-id":
		return att(func(a *attachment) string { return a.id })
	case "attachment.device-index":
		return att(func(a *attachment) string { return strconv.Itoa(a.device) })
	case "attachment.network-card-index":
		return att(func(a *attachment) string { return strconv.Itoa(a.card) })
	case "attachment.status":
		return att(func(*attachment) string { return "attached" })
	case "attachment.delete-on-termination":
		return att(func(a *attachment) string { return strconv.FormatBool(a.deleteOnTermination) })
	case "status":
		return one(e.status())
	case "subnet-id":
		return one(e.subnetID)
	case "vpc-id":
		return one(s.cfg.VPCID)
	case "availability-zone":
		return one(s.subnets[e.subnetID].az)
	case "mac-address":
		return one(e.mac)
	case "description":
		return one(e.description)
	case "owner-id":
		return one(s.cfg.AccountID)
	case "interface-type":
		return one("interface")
	case "requester-managed":
		return one("false")
	case "group-id":
		return e.sgs, true
	case "private-ip-address", "addresses.private-ip-address":
		return addrStrings(e.privateIPs()), true
	case "ipv4-prefix":
		return prefixStrings(e.prefixes), true
	}
	return tagValues(e.tags, name)
}

type describeSubnetsResponse struct {
	meta
	SubnetSet set[xmlSubnet] `xml:"subnetSet"`
	NextToken string         `xml:"nextToken,omitempty"`
}

func (s *Server) describeSubnets(p params) (response, error) {
	ids := p.list("SubnetId", "")
	for _, id := range ids {
		if _, err := s.lookupSubnetLocked(id); err != nil {
			return nil, err
		}
	}
	fs := p.filters()
	// Paged first and filtered after, as DescribeNetworkInterfaces is.
	page, next, err := paginate(p, len(s.subnetOrder))
	if err != nil {
		return nil, err
	}
	resp := &describeSubnetsResponse{NextToken: next}
	for _, i := range page {
		id := s.subnetOrder[i]
		sn := s.subnets[id]
		if len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		ok, err := matchFilters(fs, func(name string) ([]string, bool) { return s.subnetFilterValues(sn, name) })
		if err != nil {
			return nil, err
		}
		if ok {
			resp.SubnetSet.Items = append(resp.SubnetSet.Items, s.xmlSubnet(sn))
		}
	}
	return resp, nil
}

func (s *Server) subnetFilterValues(sn *subnet, name string) ([]string, bool) {
	switch name {
	case "subnet-id":
		return []string{sn.id}, true
	case "vpc-id":
		return []string{s.cfg.VPCID}, true
	case "availability-zone":
		return []string{sn.az}, true
	case "cidr-block", "cidr", "cidrBlock":
		return []string{sn.cidr.String()}, true
	case "state":
		return []string{"available"}, true
	case "owner-id":
		return []string{s.cfg.AccountID}, true
	}
	return tagValues(sn.tags, name)
}

type describeInstanceTypesResponse struct {
	meta
	InstanceTypeSet set[xmlInstanceType] `xml:"instanceTypeSet"`
}

func (s *Server) describeInstanceTypes(p params) (response, error) {
	names := p.list("InstanceType", "")
	var missing []string
	for _, n := range names {
		if _, ok := s.allTypes[n]; !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, apiErr("InvalidInstanceType",
			"The following supplied instance types do not exist: [%s]", strings.Join(missing, ", "))
	}
	if len(names) == 0 {
		names = slices.Sorted(maps.Keys(s.allTypes))
	}
	fs := p.filters()
	resp := &describeInstanceTypesResponse{}
	for _, n := range names {
		ok, err := matchFilters(fs, func(name string) ([]string, bool) {
			return []string{n}, name == "instance-type"
		})
		if err != nil {
			return nil, err
		}
		if ok {
			resp.InstanceTypeSet.Items = append(resp.InstanceTypeSet.Items, xmlInstanceTypeInfo(n, s.allTypes[n]))
		}
	}
	return resp, nil
}
