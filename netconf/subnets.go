package netconf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// zoneConf is one zone's entry of "subnets".
type zoneConf struct {
	SubnetID         string   `json:"subnetID"`
	SecurityGroupIDs []string `json:"securityGroupIDs"`
}

// isEC2ID reports whether s is an EC2 ID of the given kind: the kind, a
// dash, and 8 (older) or 17 lower-case hexadecimal digits. Written out
// rather than as a regexp, whose compilation at package start every ADD
// would pay.
func isEC2ID(s, kind string) bool {
	digits, ok := strings.CutPrefix(s, kind+"-")
	if !ok || (len(digits) != 8 && len(digits) != 17) {
		return false
	}
	for _, c := range digits {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isZoneName reports whether s is an availability zone's name as IMDS
// placement/availability-zone gives it: two letters, then dash-separated
// lower-case alphanumeric parts (us-east-1a, and Local and Wavelength
// Zones such as us-west-2-lax-1a).
func isZoneName(s string) bool {
	if len(s) < 2 || !isLower(s[0]) || !isLower(s[1]) {
		return false
	}
	parts := strings.Split(s[2:], "-")
	if len(parts) < 2 || parts[0] != "" {
		return false
	}
	for _, p := range parts[1:] {
		if p == "" {
			return false
		}
		for i := 0; i < len(p); i++ {
			if !isLower(p[i]) && !('0' <= p[i] && p[i] <= '9') {
				return false
			}
		}
	}
	return true
}

func isLower(c byte) bool { return 'a' <= c && c <= 'z' }

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
		if !isZoneName(zone) {
			return nil, fmt.Errorf("%w: subnets key %q is not an availability zone name (such as us-east-1a)", ErrInvalidConfig, zone)
		}
		var zc zoneConf
		if err := decodeZone(e, &zc); err != nil {
			return nil, fmt.Errorf("%w: subnets[%q]: %v", ErrInvalidConfig, zone, err)
		}
		if !isEC2ID(zc.SubnetID, "subnet") {
			return nil, fmt.Errorf("%w: subnets[%q].subnetID %q is not a subnet ID (subnet- and 8 or 17 hexadecimal digits)", ErrInvalidConfig, zone, zc.SubnetID)
		}
		for _, sg := range zc.SecurityGroupIDs {
			if !isEC2ID(sg, "sg") {
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
