package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/netsetup/connmark"
)

// TestNodePortADDWithoutIptables: the first ADD of a boot of a pod on a
// secondary ENI sets up the NodePort marking, which takes iptables. When
// iptables cannot run (not installed, its module missing) or waits on the
// xtables lock (kube-proxy holds it for seconds; a stuck holder for ever)
// the pod must still start, and soon: only NodePort replies to it depend
// on the marking, and warm puts it in place on its next pass.
func TestNodePortADDWithoutIptables(t *testing.T) {
	failing := "#!/bin/sh\necho 'iptables: Table does not exist (do you need to insmod?)' >&2\nexit 3\n"
	for name, c := range map[string]struct {
		script string
		noLink bool // no link carries the primary ENI's MAC (a bridge took it over, a bond)
	}{
		"failing": {script: failing},
		// --version answers (go-iptables asks first), anything else waits as
		// iptables --wait does while another process holds the lock.
		"locked":          {script: "#!/bin/sh\ncase \"$1\" in --version) echo 'iptables v1.8.9 (legacy)'; exit 0;; esac\nexec sleep 20\n"},
		"no primary link": {script: failing, noLink: true},
	} {
		t.Run(name, func(t *testing.T) {
			en := newEC2Node(t, ec2fake.Config{})
			sec, err := en.fake.SeedENI(ec2fake.ENISpec{SecondaryIPCount: 2, DeleteOnTermination: true})
			if err != nil {
				t.Fatal(err)
			}
			if !c.noLink {
				en.primaryLink(t)
			}
			en.addENILink(t, sec)
			nw := newEC2Network(t, en, "1.0.0", map[string]any{"warmIPTarget": 2}, nil)
			nw.mustWarm(t)
			// "Reboot": the store remembers another boot, the marking is
			// gone.
			if err := en.ns.Do(func(ns.NetNS) error { _, err := connmark.Remove(); return err }); err != nil {
				t.Fatalf("connmark.Remove: %v", err)
			}
			var st map[string]any
			if err := json.Unmarshal(nw.stateBytes(t), &st); err != nil {
				t.Fatal(err)
			}
			st["bootID"] = "a-previous-boot"
			b, _ := json.Marshal(st)
			if err := os.WriteFile(nw.statePath(), b, 0o600); err != nil {
				t.Fatal(err)
			}
			bin := t.TempDir()
			if err := os.WriteFile(filepath.Join(bin, "iptables"), []byte(c.script), 0o755); err != nil {
				t.Fatal(err)
			}
			onSecondary := false
			for _, p := range newPods(t, 4) {
				env := cniEnv("ADD", p)
				env["PATH"] = bin + ":" + os.Getenv("PATH")
				start := time.Now()
				o, err := runIn(t.Context(), en.node.path(), env, nw.config(t), pluginBin)
				took := time.Since(start)
				if err != nil {
					t.Fatal(err)
				}
				if o.exit != 0 {
					t.Fatalf("ADD %s with iptables %s: %s", p.name, name, o)
				}
				if took > 10*time.Second {
					t.Errorf("ADD %s with iptables %s took %s", p.name, name, took.Round(time.Millisecond))
				}
				res, err := current.NewResult(o.stdout)
				if err != nil {
					t.Fatal(err)
				}
				ip := resultIP(t, res.(*current.Result))
				if en.eniOf()[ip].ID == sec.ID {
					onSecondary = true
					break
				}
			}
			if !onSecondary {
				t.Fatalf("no pod on the secondary ENI %s", sec.ID)
			}
		})
	}
}
