package integration

import (
	"encoding/json"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// TestCNIVersions runs ADD, CHECK and DEL with each config version the
// contract names; ADD's result must be in that version.
func TestCNIVersions(t *testing.T) {
	for _, v := range []string{"0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			n := newNode(t)
			nw := newNetwork(t, n, v, []string{"10.99.8.0/24"}, nil)
			p := newPod(t, "pod-v"+v)

			o := nw.addOut(t, p)
			if o.exit != 0 {
				t.Fatalf("ADD with cniVersion %s: want exit 0, got %s", v, o)
			}
			var hdr struct {
				CNIVersion string `json:"cniVersion"`
			}
			if err := json.Unmarshal(o.stdout, &hdr); err != nil || hdr.CNIVersion != v {
				t.Errorf("ADD result cniVersion %q (%v), want %q:\n%s", hdr.CNIVersion, err, v, o.stdout)
			}
			r, err := version.NewResult(v, o.stdout)
			if err != nil {
				t.Fatalf("ADD result does not parse as a %s result: %v\n%s", v, err, o.stdout)
			}
			res, err := current.NewResultFromResult(r)
			if err != nil {
				t.Fatal(err)
			}
			ip := resultIP(t, res)
			assertWired(t, n, p, ip, hostVethOf(t, res))
			if l := nw.list(t); len(l.Allocations) != 1 || l.Allocations[0].IP != ip.String() {
				t.Errorf("list --json: allocations %+v, want one holding %s", l.Allocations, ip)
			}

			withPrev := nw.config(t, func(c map[string]any) { c["prevResult"] = json.RawMessage(o.stdout) })
			if o := nw.run(t, cniEnv("CHECK", p), withPrev); o.exit != 0 {
				t.Errorf("CHECK with cniVersion %s: want exit 0, got %s", v, o)
			}
			if o := nw.run(t, cniEnv("DEL", p), withPrev); o.exit != 0 {
				t.Errorf("DEL with cniVersion %s: want exit 0, got %s", v, o)
			}
			n.assertNoAttachments(t)
		})
	}
}
