package netconf

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/eni-cni/eni-cni/alloc"
)

func TestParseSubnets(t *testing.T) {
	c, err := Parse([]byte(`{"name":"pods","securityGroupIDs":["sg-0123456789abcdef0"],"pool":{"subnets":{
		"us-east-1a":{"subnetID":"subnet-0123456789abcdef0","securityGroupIDs":["sg-01234567"]},
		"us-west-2-lax-1a":{"subnetID":"subnet-89abcdef"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	w := c.Warm
	if !w.CustomSubnets() || w.SubnetDiscovery || len(w.Subnets) != 2 || w.Subnets["us-east-1a"].SubnetID != "subnet-0123456789abcdef0" ||
		w.Subnets["us-east-1a"].SecurityGroupIDs[0] != "sg-01234567" || w.Subnets["us-west-2-lax-1a"].SecurityGroupIDs != nil {
		t.Errorf("subnets: %+v", w)
	}
	if sp, ok := c.Pool.(alloc.StoredPool); !ok || !sp.CreatedOnly {
		t.Errorf("custom subnets, but the pool may hand out the primary ENI's addresses: %#v", c.Pool)
	}
	c, err = Parse([]byte(`{"name":"pods","subnetDiscovery":true}`))
	if err != nil || !c.Warm.SubnetDiscovery || !c.Pool.(alloc.StoredPool).CreatedOnly {
		t.Fatalf("subnetDiscovery at the top level: %v %+v", err, c)
	}
	// Old configurations: one subnetID, or none, as before.
	for _, conf := range []string{`{"name":"pods","pool":{"subnetID":"subnet-1"}}`, `{"name":"pods","subnetDiscovery":false,"subnets":null}`} {
		c, err = Parse([]byte(conf))
		if err != nil || c.Warm.CustomSubnets() || c.Pool.(alloc.StoredPool).CreatedOnly {
			t.Errorf("%s: %v, custom %t", conf, err, err == nil && c.Warm.CustomSubnets())
		}
	}
}

func TestParseSubnetsInvalid(t *testing.T) {
	const sub = `"subnetID":"subnet-0123456789abcdef0"`
	for conf, want := range map[string]string{
		`"subnetID":"subnet-0123456789abcdef0","subnets":{"us-east-1a":{` + sub + `}}`: "subnetID \"subnet-0123456789abcdef0\" and subnets exclude each other",
		`"subnetDiscovery":true,"subnets":{"us-east-1a":{` + sub + `}}`:                "subnets and subnetDiscovery exclude each other",
		`"subnetDiscovery":true,"subnetID":"subnet-0123456789abcdef0"`:                 "subnetID \"subnet-0123456789abcdef0\" and subnetDiscovery exclude each other",
		`"subnets":{}`:                                                                       "subnets is empty",
		`"subnets":["subnet-0123456789abcdef0"]`:                                             "subnets must map availability zones",
		`"subnets":{"US-EAST-1A":{` + sub + `}}`:                                             `subnets key "US-EAST-1A" is not an availability zone name`,
		`"subnets":{"us-east-1a":{}}`:                                                        `subnets["us-east-1a"].subnetID "" is not a subnet ID`,
		`"subnets":{"us-east-1a":{"subnetID":"subnet-1"}}`:                                   `subnets["us-east-1a"].subnetID "subnet-1" is not a subnet ID`,
		`"subnets":{"us-east-1a":{"subnetID":"sg-0123456789abcdef0"}}`:                       "is not a subnet ID",
		`"subnets":{"us-east-1a":{` + sub + `,"securityGroupIDs":["sg-12"]}}`:                `securityGroupIDs entry "sg-12" is not a security group ID`,
		`"subnets":{"us-east-1a":{` + sub + `,"securityGroupIds":["sg-0123456789abcdef0"]}}`: `unknown key "securityGroupIds"`,
	} {
		_, err := Parse([]byte(`{"name":"pods","pool":{` + conf + `}}`))
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", conf, err, want)
		}
	}
}

// FuzzIDsAsTheirPatterns: the written-out checks of EC2 IDs and zone names
// accept exactly what their patterns do.
func FuzzIDsAsTheirPatterns(f *testing.F) {
	ec2ID := map[string]*regexp.Regexp{
		"subnet": regexp.MustCompile(`^subnet-([0-9a-f]{8}|[0-9a-f]{17})$`),
		"sg":     regexp.MustCompile(`^sg-([0-9a-f]{8}|[0-9a-f]{17})$`),
	}
	zone := regexp.MustCompile(`^[a-z]{2}(-[a-z0-9]+)+$`)
	for _, s := range []string{"subnet-0123abcd", "subnet-0123456789abcdef0", "sg-0123abcd", "sg-0123ABCD", "subnet-0123abcd\n",
		"us-east-1a", "us-west-2-lax-1a", "us--east", "us-", "u-s", "us-east-1a-", "us-éast"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for kind, re := range ec2ID {
			if isEC2ID(s, kind) != re.MatchString(s) {
				t.Fatalf("isEC2ID(%q, %s) = %v, pattern says %v", s, kind, isEC2ID(s, kind), re.MatchString(s))
			}
		}
		if isZoneName(s) != zone.MatchString(s) {
			t.Fatalf("isZoneName(%q) = %v, pattern says %v", s, isZoneName(s), zone.MatchString(s))
		}
	})
}
