package netconf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// zoneConf is one zone's entry of "subnets".
type zoneConf struct {
	SubnetID         string   `json:"subnetID"`
	SecurityGroupIDs []string `json:"securityGroupIDs"`
}

var (
	// EC2 IDs are the prefix and 8 (older) or 17 hexadecimal digits.
	subnetIDPattern = regexp.MustCompile(`^subnet-([0-9a-f]{8}|[0-9a-f]{17})$`)
	sgIDPattern     = regexp.MustCompile(`^sg-([0-9a-f]{8}|[0-9a-f]{17})$`)
	// zonePattern is an availability zone's name as IMDS
	// placement/availability-zone gives it: us-east-1a, and Local and
	// Wavelength Zones such as us-west-2-lax-1a.
	zonePattern = regexp.MustCompile(`^[a-z]{2}(-[a-z0-9]+)+$`)
)

// parseSubnets reads the pods' own subnets: "subnets" (zone -> subnet and
// security groups) or "subnetDiscovery", each excluding the other and the
// single subnetID. "pool" wins over the top level, as for every ec2 key.
func parseSubnets(w *section.WarmConfig, inPool, top ec2Conf) error {
	raw := inPool.Subnets
	if raw == nil {
		raw = top.Subnets
	}
	w.SubnetDiscovery = pick(inPool.SubnetDiscovery, top.SubnetDiscovery, false)
	if raw != nil && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		zones, err := parseZones(raw)
		if err != nil {
			return err
		}
		w.Subnets = zones
	}
	switch {
	case w.Subnets != nil && w.SubnetDiscovery:
		return fmt.Errorf("%w: subnets and subnetDiscovery exclude each other: give each zone its subnet, or let eni-cni find the subnets tagged %s", ErrInvalidConfig, section.SubnetRoleTag)
	case w.Subnets != nil && w.SubnetID != "":
		return fmt.Errorf("%w: subnetID %q and subnets exclude each other: subnets gives each availability zone its own subnet (put %s under its zone)", ErrInvalidConfig, w.SubnetID, w.SubnetID)
	case w.SubnetDiscovery && w.SubnetID != "":
		return fmt.Errorf("%w: subnetID %q and subnetDiscovery exclude each other: discovery picks the subnets tagged %s in the node's zone", ErrInvalidConfig, w.SubnetID, section.SubnetRoleTag)
	}
	return nil
}

// parseZones decodes and checks the "subnets" map, refusing unknown keys in
// a zone's entry (a typo would silently drop its security groups).
func parseZones(raw json.RawMessage) (map[string]section.ZoneSubnet, error) {
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("%w: subnets must map availability zones to {\"subnetID\": ..., \"securityGroupIDs\": [...]}: %v", ErrInvalidConfig, err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: subnets is empty (leave it out to use the primary ENI's subnet)", ErrInvalidConfig)
	}
	zones := make(map[string]section.ZoneSubnet, len(entries))
	for zone, e := range entries {
		if !zonePattern.MatchString(zone) {
			return nil, fmt.Errorf("%w: subnets key %q is not an availability zone name (such as us-east-1a)", ErrInvalidConfig, zone)
		}
		var zc zoneConf
		if err := decodeZone(e, &zc); err != nil {
			return nil, fmt.Errorf("%w: subnets[%q]: %v", ErrInvalidConfig, zone, err)
		}
		if !subnetIDPattern.MatchString(zc.SubnetID) {
			return nil, fmt.Errorf("%w: subnets[%q].subnetID %q is not a subnet ID (subnet- and 8 or 17 hexadecimal digits)", ErrInvalidConfig, zone, zc.SubnetID)
		}
		for _, sg := range zc.SecurityGroupIDs {
			if !sgIDPattern.MatchString(sg) {
				return nil, fmt.Errorf("%w: subnets[%q].securityGroupIDs entry %q is not a security group ID (sg- and 8 or 17 hexadecimal digits)", ErrInvalidConfig, zone, sg)
			}
		}
		zones[zone] = section.ZoneSubnet{SubnetID: zc.SubnetID, SecurityGroupIDs: zc.SecurityGroupIDs}
	}
	return zones, nil
}

// decodeZone decodes a zone's entry, refusing keys other than its two
// exactly as spelled: encoding/json would take "securityGroupIds" for
// securityGroupIDs, and the unknown-key check of the rest of the entry is
// exact too.
func decodeZone(raw json.RawMessage, zc *zoneConf) error {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return fmt.Errorf("want {\"subnetID\": ..., \"securityGroupIDs\": [...]}: %v", err)
	}
	for k := range keys {
		if k != "subnetID" && k != "securityGroupIDs" {
			return fmt.Errorf("unknown key %q (want subnetID and securityGroupIDs)", k)
		}
	}
	return json.Unmarshal(raw, zc)
}
