package integration

import (
	"os"
	"strings"
	"testing"

	"github.com/eni-cni/eni-cni/gc/crifake"
)

// TestSharedStateDirLostForOneNetwork: two conflists (networks "a" and
// "b", disjoint pools) share one stateDir; b has live pods. The state file
// is lost. Whichever of a's calls comes first (an ADD, which writes a
// fresh file, or only look-ups, which must write nothing), or when only
// b's records are gone from the file (a with a live pod), b's loss is
// still detected: b's ADD and STATUS refuse pointing at
// `eni-cni repair`, b's gc leaves its live veths alone, and after repair
// b's next ADD gets a free address, never a live pod's.
func TestSharedStateDirLostForOneNetwork(t *testing.T) {
	for _, first := range []string{"a adds first", "a only looks up first", "only b's records removed"} {
		t.Run(first, func(t *testing.T) {
			n := newNode(t)
			a := newNetwork(t, n, "1.1.0", []string{"10.99.12.0/29"}, nil)
			b := newNetwork(t, n, "1.1.0", []string{"10.99.13.0/29"}, map[string]any{"stateDir": a.stateDir})
			b.stateDir = a.stateDir
			pods := newPods(t, 4)
			live := []attached{b.addDirect(t, pods[0]), b.addDirect(t, pods[1])}
			if first == "only b's records removed" {
				aLive := a.addDirect(t, pods[2])
				a.rewriteState(t, func(st map[string]any) {
					var kept []any
					for _, al := range st["allocations"].([]any) {
						if al.(map[string]any)["network"] != b.name {
							kept = append(kept, al)
						}
					}
					st["allocations"], st["networks"] = kept, []string{a.name}
				})
				wantCNIError(t, "b's ADD with its records removed", b.addOut(t, pods[3]), 5, "does not record network", "eni-cni repair", live[1].ip.String())
				assertWired(t, n, aLive.pod, aLive.ip, aLive.veth)
				if l := a.list(t).byContainer(); l[pods[2].containerID].IP != aLive.ip.String() {
					t.Errorf("a's allocation after b's refusal: %+v", l)
				}
			} else if err := os.Remove(a.statePath()); err != nil {
				t.Fatal(err)
			}

			switch first {
			case "a adds first":
				a.addDirect(t, pods[2])
				if a.stateBytes(t) == nil {
					t.Fatal("a's ADD wrote no state file")
				}
			case "a only looks up first":
				if o := a.delOut(t, pods[2]); o.exit != 0 {
					t.Fatalf("a's DEL of an unknown attachment: %s", o)
				}
				if o := a.run(t, cniEnv("STATUS", nil), a.config(t)); o.exit != 0 {
					t.Fatalf("a's STATUS: %s", o)
				}
				if o := a.cli(t, "list"); o.exit != 0 {
					t.Fatalf("a's list: %s", o)
				}
				if a.stateBytes(t) != nil {
					t.Fatalf("a's look-ups wrote a state file: %s", a.stateBytes(t))
				}
			}

			o := b.addOut(t, pods[3])
			wantCNIError(t, "b's ADD with its state lost", o, 5, "state file lost", "eni-cni repair", `network "`+b.name+`"`, live[0].ip.String())
			pods[3].assertUnwired(t)
			wantCNIError(t, "b's STATUS with its state lost", b.run(t, cniEnv("STATUS", nil), b.config(t)), 50, "eni-cni repair")
			if o := b.cli(t, "gc", "--cri-endpoint", crifake.Start(t).Endpoint(), "--force", "--grace", "60s"); o.exit == 0 || !strings.Contains(string(o.stderr), "state file lost") {
				t.Errorf("b's gc with its state lost: want a refusal (its live veths would look like leftovers), got %s", o)
			}
			// a's gc sweeps only wiring of a's pool: b's live veths are not
			// a's leftovers.
			if o := a.gc(t, "--cri-endpoint", crifake.Start(t).Endpoint(), "--force", "--grace", "60s"); o.exit != 0 {
				t.Errorf("a's gc: %s", o)
			}
			for _, l := range live {
				assertWired(t, n, l.pod, l.ip, l.veth)
			}

			cri := crifake.Start(t)
			cri.SetSandboxes(readySandboxes(live[0].pod, live[1].pod)...)
			if o := b.cli(t, "repair", "--cri-endpoint", cri.Endpoint()); o.exit != 0 {
				t.Fatalf("b's repair: %s", o)
			}
			got := b.list(t).byContainer()
			for _, l := range live {
				if g, ok := got[l.pod.containerID]; !ok || g.IP != l.ip.String() || g.HostVeth != l.veth {
					t.Errorf("repair rebuilt %s as %+v, want %s on %s", l.pod.name, g, l.ip, l.veth)
				}
			}
			res, _ := b.add(t, pods[3])
			for _, l := range live {
				if resultIP(t, res) == l.ip {
					t.Errorf("b's ADD after repair got %s, the address of live pod %s", l.ip, l.pod.name)
				}
				assertWired(t, n, l.pod, l.ip, l.veth)
			}
		})
	}
}
