package alloc_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/state")

// fixtures are state files as earlier versions wrote them, named
// v<version>-<what>.json; v<SchemaVersion>-from-<name> is what this binary
// saves after loading <name>.
const fixtures = "../testdata/state"

// TestEveryEarlierVersionMigrates makes a SchemaVersion bump without a
// migration and an on-disk fixture of the version it replaces fail.
func TestEveryEarlierVersionMigrates(t *testing.T) {
	for v := 1; v < SchemaVersion; v++ {
		if Migrations[v] == nil {
			t.Errorf("no migration from version %d", v)
		}
		if m, _ := filepath.Glob(filepath.Join(fixtures, fmt.Sprintf("v%d-*.json", v))); len(m) == 0 {
			t.Errorf("no fixture of version %d in %s", v, fixtures)
		}
	}
}

func TestMigrateFixtures(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(fixtures, "v*.json"))
	for _, path := range paths {
		name := filepath.Base(path)
		if strings.HasPrefix(name, fmt.Sprintf("v%d-", SchemaVersion)) {
			continue // golden output
		}
		t.Run(name, func(t *testing.T) {
			orig, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			file := filepath.Join(dir, StateFileName)
			if err := os.WriteFile(file, orig, 0o600); err != nil {
				t.Fatal(err)
			}
			s, _ := NewDiskStore(dir)
			st, err := s.Load()
			if err != nil {
				t.Fatalf("load %s: %v", name, err)
			}
			if after, _ := os.ReadFile(file); !bytes.Equal(after, orig) {
				t.Error("loading rewrote the file; only a save may")
			}
			checkMigrated(t, orig, st)
			if err := s.Save(st); err != nil {
				t.Fatal(err)
			}
			saved, _ := os.ReadFile(file)
			golden := filepath.Join(fixtures, fmt.Sprintf("v%d-from-%s", SchemaVersion, name))
			if *update {
				if err := os.WriteFile(golden, saved, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./alloc -run TestMigrateFixtures -update)", err)
			}
			if !bytes.Equal(saved, want) {
				t.Errorf("saved after migration:\n%s\nwant (%s):\n%s", saved, golden, want)
			}
			again, err := s.Load()
			if err != nil {
				t.Fatalf("reload: %v", err)
			}
			if a, b := mustJSON(t, again), mustJSON(t, st); a != b {
				t.Errorf("reload differs:\n%s\n%s", a, b)
			}
		})
	}
}

// checkMigrated compares a migrated state with the version-1 file it came
// from: nothing lost, each field where version 2 keeps it.
func checkMigrated(t *testing.T, orig []byte, st *State) {
	t.Helper()
	var v1 struct {
		Allocations []json.RawMessage `json:"allocations"`
		Cooling     []json.RawMessage `json:"cooling"`
		Pool        []struct {
			IP       netip.Addr `json:"ip"`
			ENI      string     `json:"eni"`
			Unusable bool       `json:"unusable"`
		} `json:"pool"`
		Source *struct {
			InstanceID string            `json:"instanceID"`
			ENIs       []json.RawMessage `json:"enis"`
			Tombstones []json.RawMessage `json:"tombstones"`
		} `json:"source"`
	}
	if err := json.Unmarshal(orig, &v1); err != nil {
		t.Fatal(err)
	}
	if st.Version != SchemaVersion || len(st.Allocations) != len(v1.Allocations) || len(st.Cooling) != len(v1.Cooling) {
		t.Errorf("version %d, %d allocations, %d cooling", st.Version, len(st.Allocations), len(st.Cooling))
	}
	if v1.Source == nil && v1.Pool == nil {
		if st.EC2 != nil {
			t.Errorf("a static node got an ec2 section: %+v", st.EC2)
		}
		return
	}
	sec := st.EC2
	if sec == nil || sec.InstanceID != v1.Source.InstanceID || len(sec.ENIs) != len(v1.Source.ENIs) ||
		len(sec.Addrs) != len(v1.Pool) || len(sec.Tombstones) != len(v1.Source.Tombstones) {
		t.Fatalf("ec2 section %+v", sec)
	}
	if !sec.Dirty {
		t.Error("a migrated section must be dirty: the first warm pass reads EC2 back")
	}
	for i, p := range v1.Pool {
		a := sec.Addrs[i]
		if a.IP != p.IP || a.ENI != p.ENI || a.Unusable != p.Unusable || a.Origin != section.OriginFound {
			t.Errorf("address %d: %+v from %+v", i, a, p)
		}
	}
	for _, e := range sec.ENIs {
		if !e.PrimaryIP.IsValid() || !e.SubnetCIDR.IsValid() || e.MAC == "" {
			t.Errorf("ENI lost fields: %+v", e)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMigratedStillServes: a node upgraded in place keeps its allocations
// and pool and allocates from it at once, before any warm pass.
func TestMigratedStillServes(t *testing.T) {
	orig, err := os.ReadFile(filepath.Join(fixtures, "v1-ec2.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := allocfake.NewStore()
	m.SetBytes(orig)
	mgr := &Manager{Store: m, Pool: StoredPool{}, BootID: "0f6d3c1e-8a9b-4c2d-9e7f-1a2b3c4d5e6f"}
	st, c, err := mgr.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// 5 addresses: 10.0.0.13 is being given back, 10.0.0.11 and .40 are allocated.
	if c.Total != 4 || c.Allocated != 2 || len(st.Allocations) != 2 {
		t.Errorf("counts %+v", c)
	}
	if m.Saves != 0 {
		t.Error("a read saved")
	}
	a, _, err := mgr.Allocate(t.Context(), Request{Key: Key{Network: "pods", ContainerID: "new", IfName: "eth0"}})
	if err != nil || a.IP.String() != "10.0.0.41" {
		t.Errorf("allocate after migration: %+v %v", a, err)
	}
	if !bytes.Contains(m.Bytes(), []byte(fmt.Sprintf(`"version":%d`, SchemaVersion))) || bytes.Contains(m.Bytes(), []byte(`"source"`)) {
		t.Errorf("save after migration:\n%s", m.Bytes())
	}
}

func TestMigrateRejectsBrokenV1(t *testing.T) {
	for name, content := range map[string]string{
		"source not an object": `{"version":1,"allocations":[],"source":[1,2]}`,
		"pool not a list":      `{"version":1,"allocations":[],"pool":{"ip":"10.0.0.1"}}`,
		"bad pool address":     `{"version":1,"allocations":[],"pool":[{"ip":"10.0.0.300","eni":"eni-1"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeState([]byte(content)); err == nil || !strings.Contains(err.Error(), "corrupt") {
				t.Errorf("err = %v, want a corrupt-file error", err)
			}
		})
	}
}
