package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestUnknownKeysAreConfigErrors(t *testing.T) {
	tests := []struct{ name, conf, want string }{
		{"typo at the top", `{"name":"n","warmIPTargt":3}`, `"warmIPTargt" (did you mean "warmIPTarget"?)`},
		{"typo in pool", `{"name":"n","pool":{"source":"ec2","warmIPTargt":3}}`, `"pool.warmIPTargt" (did you mean "warmIPTarget"?)`},
		{"case", `{"name":"n","MTU":1500}`, `"MTU" (did you mean "mtu"?)`},
		{"far from anything", `{"name":"n","frobnicate":true}`, `"frobnicate" in the eni-cni plugin entry`},
		{"pool range typo", `{"name":"n","pool":{"source":"static","range":["10.0.0.0/24"],"ranges":["10.0.0.0/24"]}}`, `"pool.range" (did you mean "ranges"?)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig([]byte(tt.conf))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, errUnknownKey) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want one naming %s", err, tt.want)
			}
			if e := toCNIError(err); e.Code != types.ErrInvalidNetworkConfig {
				t.Errorf("code %d, want %d", e.Code, types.ErrInvalidNetworkConfig)
			}
		})
	}
}

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
	if _, err := parseConfig([]byte(conf)); err != nil {
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
	// decodeConfig (what DEL uses) accepts the entry parseConfig refuses.
	conf := []byte(`{"name":"n","warmIPTargt":3,"pool":{"source":"static","ranges":["10.0.0.0/30"]}}`)
	if _, err := parseConfig(conf); err == nil {
		t.Fatal("parseConfig accepted an unknown key")
	}
	if _, err := decodeConfig(conf); err != nil {
		t.Fatalf("decodeConfig: %v", err)
	}
}

func TestReadOnlyCommandsCreateNothing(t *testing.T) {
	root := t.TempDir()
	confDir, stateDir := filepath.Join(root, "net.d"), filepath.Join(root, "state", "eni-cni")
	os.Mkdir(confDir, 0o700)
	conf := `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"eni-cni","stateDir":"` + stateDir +
		`","pool":{"source":"static","ranges":["10.99.0.0/29"]}}]}`
	os.WriteFile(filepath.Join(confDir, "10.conflist"), []byte(conf), 0o600)
	for _, args := range [][]string{{"list"}, {"list", "--json"}, {"status"}, {"status", "--json"}} {
		code, out, errs := run(append(args, "--conf-dir", confDir)...)
		if code != 0 {
			t.Errorf("%v: exit %d: %s %s", args, code, out, errs)
		}
		if _, err := os.Stat(filepath.Join(root, "state")); !os.IsNotExist(err) {
			t.Fatalf("%v created %s", args, filepath.Join(root, "state"))
		}
	}
}
