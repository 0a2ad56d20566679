package netconf

import (
	"testing"
)

func TestStandardAndRuntimeKeysAccepted(t *testing.T) {
	conf := `{"cniVersion":"1.1.0","name":"n","type":"eni-cni","capabilities":{"portMappings":true},
		"ipam":{},"dns":{"nameservers":["10.0.0.2"]},"args":{"cni":{"x":"y"}},
		"runtimeConfig":{"portMappings":[]},"prevResult":{"cniVersion":"1.1.0"},
		"cni.dev/valid-attachments":[],"cni.dev/attachments":[],
		"stateDir":"/tmp/s","mtu":1500,"cooldownSeconds":5,"gcGraceSeconds":60,"lockTimeoutSeconds":1,
		"snat":true,"logFile":"/tmp/l","logLevel":"info","hostVethPrefix":"eni","imdsEndpoint":"http://127.0.0.1:1",
		"ec2Endpoint":"http://127.0.0.1:1","warmIPTarget":1,"minimumIPTarget":1,"maxENIs":2,"prefixDelegation":false,
		"subnetID":"subnet-1","securityGroupIDs":["sg-1"],"tags":{"anything":"goes"},
		"pool":{"source":"ec2","warmIPTarget":2,"tags":{"free-form":"x"}}}`
	if _, err := Parse([]byte(conf)); err != nil {
		t.Fatal(err)
	}
}

// The known keys follow the struct: every json tag of netConf (and of the
// embedded CNI PluginConf) is accepted, so keys other issues add need no
// second list.
func TestKnownKeysFollowTheStruct(t *testing.T) {
	for _, k := range []string{"cniVersion", "name", "type", "capabilities", "ipam", "dns", "prevResult", "stateDir", "pool", "warmIPTarget", "maxENIs"} {
		if !knownKeys(typeOfNetConf())[k] {
			t.Errorf("%q is not known", k)
		}
	}
	if knownKeys(typeOfNetConf())["PluginConf"] || knownKeys(typeOfNetConf())["ec2Conf"] {
		t.Error("embedded struct names leaked into the known keys")
	}
}

func TestDELFreesDespiteUnknownKey(t *testing.T) {
	// DEL must not leak addresses because of a typo added while pods run:
	// Decode (what DEL uses) accepts the entry Parse refuses.
	conf := []byte(`{"name":"n","warmIPTargt":3,"pool":{"source":"static","ranges":["10.0.0.0/30"]}}`)
	if _, err := Parse(conf); err == nil {
		t.Fatal("Parse accepted an unknown key")
	}
	if _, err := Decode(conf); err != nil {
		t.Fatalf("Decode: %v", err)
	}
}
