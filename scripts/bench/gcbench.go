package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/eni-cni/eni-cni/atomicfile"
	"github.com/eni-cni/eni-cni/gc/crifake"
)

// phaseGC fills eni-cni's store to gcAllocs allocations (real pods), serves
// a CRI listing of gcSandboxes sandboxes that includes all but gcDead of
// them, and times `eni-cni gc --dry-run` (planning), `eni-cni gc` (planning
// and freeing gcDead), the CNI GC verb doing the same from
// valid-attachments, and `eni-cni list` on the full store. ptp and
// host-local v1.9.1 implement neither GC nor a listing: eni-cni only.
func (b *bench) phaseGC(ctx context.Context) error {
	c, p := b.cfg, b.eni
	pods := p.pods[:c.gcAllocs]
	for i, pd := range pods {
		if err := ctx.Err(); err != nil {
			return err
		}
		r, err := b.add(p, pd)
		if err != nil {
			return err
		}
		b.recordExecFill("gc-fill", p.key, "ADD", i, 0, i, r)
	}
	live, dead := pods[:c.gcAllocs-c.gcDead], pods[c.gcAllocs-c.gcDead:]

	conflist := filepath.Join(b.work, "eni.conflist")
	entry := map[string]any{}
	for k, v := range p.conf {
		if k != "name" && k != "cniVersion" {
			entry[k] = v
		}
	}
	data, _ := json.Marshal(map[string]any{"cniVersion": p.conf["cniVersion"], "name": p.conf["name"], "plugins": []any{entry}})
	if err := os.WriteFile(conflist, data, 0o644); err != nil {
		return err
	}

	// The fake CRI runtime, in this process, on a unix socket the plugin
	// reaches from the node namespace (path sockets ignore netns).
	now := time.Now()
	var sbs []*runtimeapi.PodSandbox
	for _, pd := range live {
		sbs = append(sbs, crifake.PodSandbox(pd.cid, "bench", fmt.Sprintf("pod-%d", pd.index), "uid-"+pd.cid[:16], true, now))
	}
	for i := len(sbs); i < c.gcSandboxes; i++ {
		sum := sha256.Sum256(fmt.Appendf(nil, "other-%d", i))
		id := hex.EncodeToString(sum[:])
		sbs = append(sbs, crifake.PodSandbox(id, "other", fmt.Sprintf("other-%d", i), "uid-"+id[:16], i%3 != 0, now.Add(-time.Hour)))
	}
	srv := &crifake.Server{}
	srv.SetSandboxes(sbs...)
	sock := filepath.Join(b.work, "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(g, srv)
	go g.Serve(lis) //nolint:errcheck // returns when stopped
	defer g.Stop()

	env := []string{"PATH=" + os.Getenv("PATH")} // no CNI_COMMAND: subcommands
	// The minimum grace (--grace cannot go below it); the store is aged
	// past it before each run.
	gcArgs := []string{"gc", "--config", conflist, "--cri-endpoint", "unix://" + sock, "--grace", "60s"}
	run := func(op string, i, round int, args []string, envv []string, stdin []byte) error {
		r, err := b.execIn(p.node.ns, p.bin, args, envv, stdin)
		if err != nil {
			return err
		}
		if r.exit != 0 {
			return fmt.Errorf("eni-cni %s: exit %d: %s %s", op, r.exit, r.stdout, r.stderr)
		}
		b.recordExec("gc", p.key, op, i, round, r)
		return nil
	}
	if err := ageStore(p.stateDir, 2*time.Minute); err != nil {
		return err
	}
	for i := range c.gcReps {
		if err := run("gc --dry-run", i, 0, append(gcArgs, "--dry-run"), env, nil); err != nil {
			return err
		}
		if err := run("list", i, 0, []string{"list", "--config", conflist}, env, nil); err != nil {
			return err
		}
		if err := run("list --json", i, 0, []string{"list", "--config", conflist, "--json"}, env, nil); err != nil {
			return err
		}
	}
	if n, err := countAllocations(p.stateDir); err != nil || n != c.gcAllocs {
		return fmt.Errorf("store holds %d allocations (%v), want %d", n, err, c.gcAllocs)
	}

	// The CNI GC verb: same conf at cniVersion 1.1.0, the minimum grace
	// (60 s; the store is aged past it before each run), and the runtime's
	// list of valid attachments.
	valid := make([]map[string]string, len(live))
	for i, pd := range live {
		valid[i] = map[string]string{"containerID": pd.cid, "ifname": ifName}
	}
	gcStdin := p.stdin(map[string]any{"cniVersion": "1.1.0", "gcGraceSeconds": 60, "cni.dev/valid-attachments": valid})
	gcEnv := []string{"PATH=" + os.Getenv("PATH"), "CNI_COMMAND=GC", "CNI_PATH=" + p.cniPath}

	refill := func() error {
		// Freed addresses cool down before they can be handed out again.
		time.Sleep(time.Duration(c.cooldown*float64(time.Second)) + 100*time.Millisecond)
		for _, pd := range dead {
			if _, err := b.add(p, pd); err != nil { // same sandbox ID: dead again
				return err
			}
		}
		return nil
	}
	for round := range c.gcRounds {
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, v := range []struct {
			op    string
			args  []string
			env   []string
			stdin []byte
		}{
			{"gc (frees)", gcArgs, env, nil},
			{"GC verb (frees)", nil, gcEnv, gcStdin},
		} {
			if err := ageStore(p.stateDir, 2*time.Minute); err != nil {
				return err
			}
			if err := run(v.op, 0, round, v.args, v.env, v.stdin); err != nil {
				return err
			}
			if n, err := countAllocations(p.stateDir); err != nil || n != len(live) {
				return fmt.Errorf("after %s: store holds %d allocations (%v), want %d", v.op, n, err, len(live))
			}
			if err := refill(); err != nil {
				return err
			}
		}
	}
	vc, lc := srv.Calls()
	b.res.CRICalls = fmt.Sprintf("%d Version, %d ListPodSandbox", vc, lc)

	// Empty the node again: DEL every pod (netns present), at a full store.
	for i, pd := range pods {
		r, err := b.del(p, pd, pd.path)
		if err != nil {
			return err
		}
		b.recordExecFill("drain", p.key, "DEL", i, 0, len(pods)-i, r)
	}
	return nil
}

func countAllocations(stateDir string) (int, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, "state.json"))
	if err != nil {
		return 0, err
	}
	var st struct {
		Allocations []json.RawMessage `json:"allocations"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return 0, err
	}
	return len(st.Allocations), nil
}

// ageStore makes every allocation look d older, on the wall-clock and the
// boot-clock stamps (alloc/clock.go), the way time passing would; the
// config cannot set a grace below 60 s. Numbers and unknown fields are kept.
func ageStore(stateDir string, d time.Duration) error {
	path := filepath.Join(stateDir, "state.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var st map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&st); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	allocs, _ := st["allocations"].([]any)
	for _, x := range allocs {
		a, ok := x.(map[string]any)
		if !ok {
			continue
		}
		if s, ok := a["allocatedAt"].(string); ok {
			if at, err := time.Parse(time.RFC3339Nano, s); err == nil {
				a["allocatedAt"] = at.Add(-d).Format(time.RFC3339Nano)
			}
		}
		if n, ok := a["allocatedBootNs"].(json.Number); ok {
			if ns, err := n.Int64(); err == nil {
				a["allocatedBootNs"] = ns - int64(d)
			}
		}
	}
	if data, err = json.Marshal(st); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o600)
}
