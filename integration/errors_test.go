package integration

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestBadInputs feeds the binary inputs a runtime or an operator can get
// wrong. Each must fail with its CNI error code and a message naming the
// problem, and change neither the state file nor the node.
func TestBadInputs(t *testing.T) {
	n := newNode(t)
	nw := newNetwork(t, n, "1.0.0", []string{"10.99.5.0/24"}, nil)
	seed := newPod(t, "pod-seed")
	nw.add(t, seed) // a live allocation the failures must not disturb
	target := newPod(t, "pod-target")
	missingNetns := "/var/run/netns/eni-it-missing-" + randHex(6)

	cases := []struct {
		name  string
		stdin []byte                      // nil: the network's config after conf
		conf  func(map[string]any)        // edits of the config
		env   func(env map[string]string) // edits of the CNI environment
		code  uint
		msg   []string
	}{
		{
			name:  "malformed JSON",
			stdin: []byte(`{"cniVersion":"1.0.0","name":"` + nw.name + `","type":"eni-cni","pool":{`),
			code:  6, msg: []string{"network config"},
		},
		{
			name: "unknown pool.source",
			conf: func(c map[string]any) { c["pool"] = map[string]any{"source": "azure"} },
			code: 7, msg: []string{`pool.source "azure"`},
		},
		{
			name: "bad range",
			conf: func(c map[string]any) {
				c["pool"] = map[string]any{"source": "static", "ranges": []string{"10.0.0.300/24"}}
			},
			code: 7, msg: []string{"10.0.0.300/24"},
		},
		{
			name: "CNI_CONTAINERID missing",
			env:  func(e map[string]string) { delete(e, "CNI_CONTAINERID") },
			code: 4, msg: []string{"CNI_CONTAINERID"},
		},
		{
			name: "CNI_CONTAINERID ../../etc",
			env:  func(e map[string]string) { e["CNI_CONTAINERID"] = "../../etc" },
			code: 4, msg: []string{"containerID"},
		},
		{
			name: "CNI_IFNAME too long",
			env:  func(e map[string]string) { e["CNI_IFNAME"] = "eth0-far-too-long" },
			code: 4, msg: []string{"interface name", "too long"},
		},
		{
			name: "CNI_NETNS missing path",
			env:  func(e map[string]string) { e["CNI_NETNS"] = missingNetns },
			code: 8, msg: []string{missingNetns},
		},
		{
			name: "CNI_NETNS is a file",
			env:  func(e map[string]string) { e["CNI_NETNS"] = "/etc/hostname" },
			code: 8, msg: []string{"/etc/hostname"},
		},
		{
			name: "CNI_NETNS is a directory",
			env:  func(e map[string]string) { e["CNI_NETNS"] = "/etc" },
			code: 8, msg: []string{"/etc"},
		},
		{
			name: "CNI_NETNS is a file of procfs",
			env:  func(e map[string]string) { e["CNI_NETNS"] = "/proc/1/status" },
			code: 8, msg: []string{"/proc/1/status", "not a network namespace"},
		},
		{
			name: "CNI_NETNS is a mount namespace",
			env:  func(e map[string]string) { e["CNI_NETNS"] = "/proc/self/ns/mnt" },
			code: 8, msg: []string{"/proc/self/ns/mnt", "not a network namespace"},
		},
		{
			name: "CNI_IFNAME lo",
			env:  func(e map[string]string) { e["CNI_IFNAME"] = "lo" },
			code: 4, msg: []string{`CNI_IFNAME "lo"`, "loopback"},
		},
		{
			name: "C1 control character in K8S_POD_NAME",
			env: func(e map[string]string) {
				e["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=eni-it;K8S_POD_NAME=web\u009b31m;K8S_POD_UID=u"
			},
			code: 4, msg: []string{"K8S_POD_NAME", "control characters"},
		},
		{
			name: "K8S_POD_NAMESPACE not UTF-8",
			env: func(e map[string]string) {
				e["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAMESPACE=eni\xff;K8S_POD_NAME=web;K8S_POD_UID=u"
			},
			code: 4, msg: []string{"K8S_POD_NAMESPACE", "UTF-8"},
		},
		{
			name: "an address requested through the ips capability",
			conf: func(c map[string]any) {
				c["capabilities"] = map[string]bool{"ips": true}
				c["runtimeConfig"] = map[string]any{"ips": []string{"10.99.5.77/24"}}
			},
			code: 7, msg: []string{`capability "ips"`},
		},
		{
			name: "an address requested without the capability declared",
			conf: func(c map[string]any) { c["runtimeConfig"] = map[string]any{"ips": []string{"10.99.5.77/24"}} },
			code: 7, msg: []string{"10.99.5.77/24", "does not honour"},
		},
		{
			name: "CNI_NETNS is the node's own",
			env:  func(e map[string]string) { e["CNI_NETNS"] = n.path() },
			code: 8, msg: []string{n.path(), "own network namespace"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdin := tc.stdin
			if stdin == nil {
				var mods []func(map[string]any)
				if tc.conf != nil {
					mods = append(mods, tc.conf)
				}
				stdin = nw.config(t, mods...)
			}
			env := cniEnv("ADD", target)
			if tc.env != nil {
				tc.env(env)
			}
			stateBefore, vethsBefore := nw.stateBytes(t), n.vethNames(t)

			o := nw.run(t, env, stdin)
			wantCNIError(t, "ADD with "+tc.name, o, tc.code, tc.msg...)

			if after := nw.stateBytes(t); !bytes.Equal(after, stateBefore) {
				t.Errorf("state file changed:\nbefore %s\nafter  %s", stateBefore, after)
			}
			if after := n.vethNames(t); !slices.Equal(after, vethsBefore) {
				t.Errorf("node veths changed from %v to %v", vethsBefore, after)
			}
			target.assertUnwired(t)
		})
	}
	if l := nw.list(t); len(l.Allocations) != 1 || l.Allocations[0].ContainerID != seed.containerID {
		t.Errorf("after the bad inputs: allocations %+v, want only the seed pod's", l.Allocations)
	}

	t.Run("CNI_IFNAME the pod already has", func(t *testing.T) {
		p := newPod(t, "pod-taken")
		h := openHandle(t, p.path())
		defer h.Close()
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "other0"}); err != nil {
			t.Fatal(err)
		}
		vethsBefore := n.vethNames(t)
		wantCNIError(t, "ADD into a pod that has eth0", nw.run(t, cniEnv("ADD", p), nw.config(t)), 4, "eth0 exists in "+p.path())
		// Found while wiring: the address taken for it is given back
		// (only the round-robin position moves).
		if l := nw.list(t); len(l.Allocations) != 1 || l.Allocations[0].ContainerID != seed.containerID || l.Pool.Cooling != 0 {
			t.Errorf("after the failed ADD: allocations %+v, pool %+v; want only the seed pod's, nothing cooling", l.Allocations, l.Pool)
		}
		if after := n.vethNames(t); !slices.Equal(after, vethsBefore) {
			t.Errorf("node veths changed from %v to %v", vethsBefore, after)
		}
	})

	t.Run("stateDir /", func(t *testing.T) {
		const lock = "/state.lock"
		_, statErr := os.Lstat(lock)
		existed := statErr == nil
		o := nw.run(t, cniEnv("ADD", newPod(t, "pod-root-state")), nw.config(t, func(c map[string]any) { c["stateDir"] = "/" }))
		wantCNIError(t, "ADD with stateDir /", o, 7, "root directory")
		if _, err := os.Lstat(lock); err == nil && !existed {
			os.Remove(lock)
			t.Errorf("ADD with stateDir / created %s before refusing the config", lock)
		}
	})

	t.Run("corrupt state file", func(t *testing.T) {
		nw := newNetwork(t, n, "1.0.0", []string{"10.99.6.0/24"}, nil)
		if err := os.MkdirAll(nw.stateDir, 0o700); err != nil {
			t.Fatal(err)
		}
		corrupt := []byte(`{"version": 1, "allocations": [{"network": "` + nw.name + `", "ip": "10.99.6.`)
		if err := os.WriteFile(nw.statePath(), corrupt, 0o600); err != nil {
			t.Fatal(err)
		}
		vethsBefore := n.vethNames(t)
		p := newPod(t, "pod-corrupt")
		for _, cmd := range []string{"ADD", "DEL"} {
			o := nw.run(t, cniEnv(cmd, p), nw.config(t))
			if cmd == "ADD" {
				wantCNIError(t, cmd+" with a corrupt state file", o, 5, nw.statePath())
			} else if o.exit != 0 {
				// DEL tears down by the derived name and succeeds, so the
				// pod does not stay Terminating (plugin/plugin.go delWithoutStore).
				t.Errorf("DEL with a corrupt state file: want exit 0, got %s", o)
			}
			if got := nw.stateBytes(t); !bytes.Equal(got, corrupt) {
				t.Errorf("%s rewrote the corrupt state file: want it byte-for-byte unchanged, got %q", cmd, got)
			}
		}
		p.assertUnwired(t)
		if after := n.vethNames(t); !slices.Equal(after, vethsBefore) {
			t.Errorf("node veths changed from %v to %v", vethsBefore, after)
		}
	})
}

// TestStatus runs the CNI 1.1 STATUS verb on a good and a corrupt store.
func TestStatus(t *testing.T) {
	n := newNode(t)
	nw := newNetwork(t, n, "1.1.0", []string{"10.99.7.0/24"}, nil)
	status := func() output { return nw.run(t, cniEnv("STATUS", nil), nw.config(t)) }

	if o := status(); o.exit != 0 {
		t.Errorf("STATUS on a new store: want exit 0, got %s", o)
	}
	nw.add(t, newPod(t, "pod-status"))
	if o := status(); o.exit != 0 {
		t.Errorf("STATUS with one allocation: want exit 0, got %s", o)
	}

	corrupt := []byte("this is not JSON\n")
	if err := os.WriteFile(nw.statePath(), corrupt, 0o600); err != nil {
		t.Fatal(err)
	}
	wantCNIError(t, "STATUS with a corrupt state file", status(), 50, nw.statePath())
	if got := nw.stateBytes(t); !bytes.Equal(got, corrupt) {
		t.Errorf("STATUS changed the corrupt state file to %q", got)
	}
}
