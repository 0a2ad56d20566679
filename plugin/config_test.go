package plugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/eni-cni/eni-cni/netconf"
)

func TestParseConfigErrors(t *testing.T) {
	static := `"pool":{"source":"static","ranges":["10.0.0.0/24"]}`
	tests := []struct {
		name, conf string
		code       uint
		msg        string
	}{
		{"malformed", `{"name":`, types.ErrDecodingFailure, "unexpected end"},
		{"wrong type", `{"name":"n","mtu":"big"}`, types.ErrDecodingFailure, "mtu"},
		{"no name", `{` + static + `}`, types.ErrInvalidNetworkConfig, "network name"},
		{"unknown source", `{"name":"n","pool":{"source":"gce"}}`, types.ErrInvalidNetworkConfig, `unknown pool.source "gce"`},
		{"negative warm target", `{"name":"n","pool":{"warmIPTarget":-1}}`, types.ErrInvalidNetworkConfig, "warmIPTarget"},
		{"bad subnet", `{"name":"n","pool":{"source":"ec2","subnetID":"10.0.0.0/24"}}`, types.ErrInvalidNetworkConfig, "subnetID"},
		{"bad sg", `{"name":"n","securityGroupIDs":["default"]}`, types.ErrInvalidNetworkConfig, "securityGroupIDs"},
		{"aws tag", `{"name":"n","pool":{"tags":{"aws:x":"1"}}}`, types.ErrInvalidNetworkConfig, "tag key"},
		{"bad exclude", `{"name":"n","pool":{"excludeIPs":["10.0.0.300"]}}`, types.ErrInvalidNetworkConfig, `excludeIPs entry "10.0.0.300"`},
		{"ipv6 exclude", `{"name":"n","pool":{"excludeIPs":["fd00::1"]}}`, types.ErrInvalidNetworkConfig, "only IPv4"},
		{"exclude type", `{"name":"n","pool":{"excludeIPs":"10.0.0.5"}}`, types.ErrDecodingFailure, "excludeIPs"},
		{"warm target type", `{"name":"n","pool":{"warmIPTarget":"5"}}`, types.ErrDecodingFailure, "warmIPTarget"},
		{"bad range", `{"name":"n","pool":{"source":"static","ranges":["10.0.0.300/24"]}}`, types.ErrInvalidNetworkConfig, "10.0.0.300/24"},
		{"no ranges", `{"name":"n","pool":{"source":"static"}}`, types.ErrInvalidNetworkConfig, "no ranges"},
		{"relative stateDir", `{"name":"n","stateDir":"var/lib",` + static + `}`, types.ErrInvalidNetworkConfig, "absolute"},
		{"root stateDir", `{"name":"n","stateDir":"/",` + static + `}`, types.ErrInvalidNetworkConfig, "root directory"},
		{"root stateDir unclean", `{"name":"n","stateDir":"/tmp/..//",` + static + `}`, types.ErrInvalidNetworkConfig, "root directory"},
		{"ips capability", `{"name":"n","capabilities":{"ips":true},` + static + `}`, types.ErrInvalidNetworkConfig, `capability "ips" is not supported`},
		{"mac capability", `{"name":"n","capabilities":{"mac":true},` + static + `}`, types.ErrInvalidNetworkConfig, `capability "mac" is not supported`},
		{"ips requested", `{"name":"n","runtimeConfig":{"ips":["10.0.0.7/24"]},` + static + `}`, types.ErrInvalidNetworkConfig, "does not honour requested addresses"},
		{"mac requested", `{"name":"n","runtimeConfig":{"mac":"02:00:00:00:00:01"},` + static + `}`, types.ErrInvalidNetworkConfig, "does not honour requested MACs"},
		{"mtu", `{"name":"n","mtu":100,` + static + `}`, types.ErrInvalidNetworkConfig, "mtu 100"},
		{"negative cooldown", `{"name":"n","cooldownSeconds":-1,` + static + `}`, types.ErrInvalidNetworkConfig, "cooldownSeconds"},
		{"zero cooldown", `{"name":"n","cooldownSeconds":0,` + static + `}`, types.ErrInvalidNetworkConfig, "cooldownSeconds 0 is below the minimum of 5"},
		{"short cooldown", `{"name":"n","cooldownSeconds":4.9,` + static + `}`, types.ErrInvalidNetworkConfig, "cooldownSeconds 4.9 is below"},
		{"zero gc grace", `{"name":"n","gcGraceSeconds":0,` + static + `}`, types.ErrInvalidNetworkConfig, "gcGraceSeconds 0 is below the minimum of 60"},
		{"short gc grace", `{"name":"n","gcGraceSeconds":59,` + static + `}`, types.ErrInvalidNetworkConfig, "gcGraceSeconds 59 is below"},
		{"zero lock timeout", `{"name":"n","lockTimeoutSeconds":0,` + static + `}`, types.ErrInvalidNetworkConfig, "lockTimeoutSeconds"},
		{"long prefix", `{"name":"n","hostVethPrefix":"toolong",` + static + `}`, types.ErrInvalidNetworkConfig, "hostVethPrefix"},
		{"prefix chars", `{"name":"n","hostVethPrefix":"e/../",` + static + `}`, types.ErrInvalidNetworkConfig, "hostVethPrefix"},
		{"log level", `{"name":"n","logLevel":"loud",` + static + `}`, types.ErrInvalidNetworkConfig, "logLevel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := netconf.Parse([]byte(tt.conf))
			if err == nil {
				t.Fatal("accepted")
			}
			ce := toCNIError(err)
			if ce.Code != tt.code || !strings.Contains(ce.Msg, tt.msg) {
				t.Errorf("got code %d %q, want code %d containing %q", ce.Code, ce.Msg, tt.code, tt.msg)
			}
		})
	}
}

func TestParseCNIArgs(t *testing.T) {
	kv, err := parseCNIArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=u-1;K8S_POD_INFRA_CONTAINER_ID=abc;")
	if err != nil {
		t.Fatal(err)
	}
	if kv["K8S_POD_NAMESPACE"] != "default" || kv["K8S_POD_NAME"] != "web-0" || kv["K8S_POD_UID"] != "u-1" {
		t.Errorf("parsed %v", kv)
	}
	for _, bad := range []string{"novalue", "=x", "K8S_POD_NAME=a\nb", "K8S_POD_NAME=" + strings.Repeat("a", 300),
		"K8S_POD_NAME=a\u009bb",      // C1: CSI, a terminal escape on its own
		"K8S_POD_NAME=a\x9b[31mb",    // the same byte, not UTF-8
		"K8S_POD_NAMESPACE=\xff\xfe", // not UTF-8
		"K8S_POD_NAME=a\x7fb"} {
		_, err := parseCNIArgs(bad)
		if !errors.Is(err, errInvalidArgs) || toCNIError(err).Code != types.ErrInvalidEnvironmentVariables {
			t.Errorf("parseCNIArgs(%q) = %v, want an invalid-args error", bad, err)
		}
	}
}

func TestPreflight(t *testing.T) {
	env := map[string]string{"CNI_COMMAND": "ADD"}
	e := Preflight(func(k string) string { return env[k] })
	if e == nil || e.Code != types.ErrInvalidEnvironmentVariables {
		t.Fatalf("missing container ID: %v", e)
	}
	env["CNI_CONTAINERID"] = "abc"
	if e := Preflight(func(k string) string { return env[k] }); e != nil {
		t.Fatal(e)
	}
	if e := Preflight(func(k string) string { return map[string]string{"CNI_COMMAND": "STATUS"}[k] }); e != nil {
		t.Fatalf("STATUS needs no container ID: %v", e)
	}
}

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
			_, err := netconf.Parse([]byte(tt.conf))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, netconf.ErrUnknownKey) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want one naming %s", err, tt.want)
			}
			if e := toCNIError(err); e.Code != types.ErrInvalidNetworkConfig {
				t.Errorf("code %d, want %d", e.Code, types.ErrInvalidNetworkConfig)
			}
		})
	}
}
