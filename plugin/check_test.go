package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
)

// TestCheckPrevResultRequired: from cniVersion 1.0.0 on CHECK needs the
// ADD result (code 7 without it); 0.4.0 runtimes may leave it out.
func TestCheckPrevResultRequired(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    bool
	}{{"0.4.0", false}, {"1.0.0", true}, {"1.1.0", true}} {
		cfg, err := netconf.Parse([]byte(`{"cniVersion":"` + tc.version + `","name":"pods","pool":{"source":"static","ranges":["10.99.0.0/24"]}}`))
		if err != nil {
			t.Fatal(err)
		}
		_, err = prevResult(cfg)
		if got := err != nil; got != tc.want {
			t.Errorf("cniVersion %s without prevResult: %v, want error=%v", tc.version, err, tc.want)
		}
		if tc.want && (toCNIError(err).Code != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "prevResult")) {
			t.Errorf("cniVersion %s: %v (code %d), want code 7 naming prevResult", tc.version, err, toCNIError(err).Code)
		}
	}
}

// TestCheckPrevResultMismatches: every way a prevResult can disagree with
// the allocation is code 101 with a message that says which.
func TestCheckPrevResultMismatches(t *testing.T) {
	p, _, _ := newTestPlugin(t, "10.99.0.0/24")
	ctx := context.Background()
	res, err := p.add(ctx, att("c1"))
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(r *current.Result)) *current.Result {
		b, _ := json.Marshal(res)
		var r current.Result
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		f(&r)
		return &r
	}
	for _, tc := range []struct {
		name string
		f    func(r *current.Result)
		msg  string
	}{
		{"other address", func(r *current.Result) { r.IPs[0].Address.IP = net.ParseIP("10.99.0.77") }, "no address 10.99.0.1/32"},
		{"not a /32", func(r *current.Result) { r.IPs[0].Address.Mask = net.CIDRMask(24, 32) }, "prefix /24"},
		{"address on the host veth", func(r *current.Result) { r.IPs[0].Interface = current.Int(0) }, "on interface 0"},
		{"no pod interface", func(r *current.Result) { r.Interfaces = r.Interfaces[:1] }, "no interface eth0 in a sandbox"},
		{"other sandbox", func(r *current.Result) { r.Interfaces[1].Sandbox = "/run/netns/elsewhere" }, "is in /run/netns/elsewhere"},
		{"other host veth", func(r *current.Result) { r.Interfaces[0].Name = "enideadbeef0000" }, "no host interface"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.check(ctx, att("c1"), mutate(tc.f))
			if ce := toCNIError(err); ce.Code != codeCheckPrevResult || !strings.Contains(ce.Msg, tc.msg) {
				t.Errorf("CHECK: code %d %q, want %d containing %q", ce.Code, ce.Msg, codeCheckPrevResult, tc.msg)
			}
		})
	}
	// Added to by a later plugin of the chain: still ours.
	extended := mutate(func(r *current.Result) {
		r.Interfaces = append(r.Interfaces, &current.Interface{Name: "tap0"})
		r.IPs = append(r.IPs, &current.IPConfig{Address: net.IPNet{IP: net.ParseIP("192.0.2.1"), Mask: net.CIDRMask(24, 32)}})
	})
	if err := p.check(ctx, att("c1"), extended); err != nil {
		t.Errorf("a prevResult extended by a later plugin: %v", err)
	}
}

// TestCheckCodes: the side that differs decides the code, and an address
// whose ENI the store does not describe fails CHECK (it used to skip the
// from-rule check silently).
func TestCheckCodes(t *testing.T) {
	errs := map[error]uint{
		fmt.Errorf("x: %w: no host route", netsetup.ErrHostMismatch):   codeCheckHost,
		fmt.Errorf("x: %w: no neighbour", netsetup.ErrPodMismatch):     codeCheckPod,
		fmt.Errorf("x: %w: unknown eni", errCheckRouting):              codeCheckRouting,
		fmt.Errorf("x: %w: 10.0.0.1", errPrevResult):                   codeCheckPrevResult,
		fmt.Errorf("check: %w", errNoAllocation):                       types.ErrUnknownContainer,
		fmt.Errorf("check: %w", netsetup.ErrNetNS):                     types.ErrInvalidNetNS,
		fmt.Errorf("check: %w: cniVersion 1.0.0 ...", errNoPrevResult): types.ErrInvalidNetworkConfig,
	}
	for err, want := range errs {
		if got := toCNIError(err).Code; got != want {
			t.Errorf("%v: code %d, want %d", err, got, want)
		}
	}

	p, _ := newEC2Plugin(t, "http://127.0.0.1:1")
	ctx := context.Background()
	err := p.Mgr.Update(ctx, func(st *alloc.State) (bool, error) {
		st.Allocations = append(st.Allocations, alloc.Allocation{Key: att("c1").Key, IP: netip.MustParseAddr("10.0.1.5"), ENI: "eni-gone", HostVeth: "enic1"})
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = p.check(ctx, att("c1"), nil)
	if ce := toCNIError(err); ce.Code != codeCheckRouting || !strings.Contains(ce.Msg, "eni-gone") {
		t.Errorf("CHECK of an address on an unknown ENI: %v (code %d), want %d naming the ENI", err, ce.Code, codeCheckRouting)
	}
	if !errors.Is(err, errCheckRouting) {
		t.Errorf("not errCheckRouting: %v", err)
	}
}

// TestCheckPrevResultNulls: a prevResult with a null in interfaces, ips or
// routes is a decoding error (code 6) naming the entry; CHECK used to
// follow the nil pointer and panic (exit 2, a stack trace, nothing on
// stdout).
func TestCheckPrevResultNulls(t *testing.T) {
	p, _, _ := newTestPlugin(t, "10.99.0.0/24")
	ctx := context.Background()
	res, err := p.add(ctx, att("c1"))
	if err != nil {
		t.Fatal(err)
	}
	good, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]string{"interfaces": "interfaces[0] is null", "ips": "ips[0] is null", "routes": "routes[0] is null"} {
		t.Run(field, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(good, &m); err != nil {
				t.Fatal(err)
			}
			m[field] = append([]any{nil}, m[field].([]any)...)
			conf, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "pods", "prevResult": m,
				"pool": map[string]any{"source": "static", "ranges": []string{"10.99.0.0/24"}}})
			cfg, err := netconf.Parse(conf)
			if err != nil {
				t.Fatal(err)
			}
			prev, err := prevResult(cfg)
			if err == nil {
				err = p.check(ctx, att("c1"), prev)
			}
			if ce := toCNIError(err); ce.Code != types.ErrDecodingFailure || !strings.Contains(ce.Msg, want) {
				t.Errorf("CHECK with a null in %s: %v, want code 6 saying %q", field, err, want)
			}
		})
	}
}
