package ec2

import (
	"bytes"
	"maps"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// TestBuiltinLimits: the generated table agrees with EC2's values for the
// types the fake world knows (DescribeInstanceTypes as of 2025), multi-card
// types included (the default card's ENIs, every card listed), and knows
// nothing of a type it does not list.
func TestBuiltinLimits(t *testing.T) {
	for typ, want := range ec2fake.DefaultLimits() {
		lim, ok := BuiltinLimits(typ)
		if !ok {
			t.Errorf("%s: not in the built-in table", typ)
			continue
		}
		enis := want.MaxENIs
		if want.CardENIs > 0 {
			enis = want.CardENIs
		}
		if lim.MaxENIs != enis || lim.IPv4PerENI != want.IPv4PerENI {
			t.Errorf("%s: %+v, want %d ENIs of %d", typ, lim, enis, want.IPv4PerENI)
		}
	}
	p5, _ := BuiltinLimits("p5.48xlarge")
	if p5 == nil || len(p5.Cards) != 32 || p5.Cards[31] != (section.CardLimit{Index: 31, MaxENIs: 2}) {
		t.Errorf("p5.48xlarge: %+v, want 32 cards of 2 ENIs", p5)
	}
	for _, typ := range []string{"", "m5", "x9.huge", "m5.xlarge ", "5.xlarge"} {
		if lim, ok := BuiltinLimits(typ); ok {
			t.Errorf("%q: %+v from the table, want unknown", typ, lim)
		}
	}
}

// TestLimitsNoEC2CallForKnownTypes: a fresh store of a type the table
// knows makes no DescribeInstanceTypes; one it does not know asks EC2
// once per node: the answer is cached in the state directory (root's
// file, 0600) and a fresh store reads it there. A cache that cannot be
// trusted (another type, writable by others, a symlink, torn) is asked
// again of EC2 and rewritten.
func TestLimitsNoEC2CallForKnownTypes(t *testing.T) {
	known := newEnv(t, ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 1})
	known.w.LimitsFile = filepath.Join(t.TempDir(), LimitsCacheName)
	known.warm(t)
	if n := known.fake.Calls()["DescribeInstanceTypes"]; n != 0 {
		t.Errorf("m5.large: %d DescribeInstanceTypes, want 0", n)
	}
	if _, err := os.Stat(known.w.LimitsFile); !os.IsNotExist(err) {
		t.Errorf("cache written for a type the table knows: %v", err)
	}

	dir := t.TempDir()
	cache := filepath.Join(dir, LimitsCacheName)
	cfg := ec2fake.Config{InstanceType: "x.odd", Limits: map[string]ec2fake.Limits{"x.odd": {MaxENIs: 3, IPv4PerENI: 7, VCPUs: 2}}}
	e := newEnv(t, cfg, section.WarmConfig{WarmIPTarget: 1})
	fresh := func(t *testing.T) int {
		t.Helper()
		before := e.fake.Calls()["DescribeInstanceTypes"]
		e2 := newEnvOn(t, e.fake, section.WarmConfig{WarmIPTarget: 1})
		e2.w.LimitsFile = cache
		e2.warm(t)
		if _, _, src := e2.counts(t); src.Limits == nil || src.Limits.MaxENIs != 3 || src.Limits.IPv4PerENI != 7 {
			t.Fatalf("limits %+v, want 3 ENIs of 7", src.Limits)
		}
		return e.fake.Calls()["DescribeInstanceTypes"] - before
	}
	if n := fresh(t); n != 1 {
		t.Fatalf("unknown type, no cache: %d DescribeInstanceTypes, want 1", n)
	}
	if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache %v, %v: want a 0600 file", fi, err)
	}
	if n := fresh(t); n != 0 {
		t.Errorf("unknown type, cached: %d DescribeInstanceTypes, want 0", n)
	}
	good, _ := os.ReadFile(cache)
	untrusted := map[string]func(){
		"another type": func() { os.WriteFile(cache, []byte(strings.Replace(string(good), "x.odd", "x.other", 1)), 0o600) },
		"implausible": func() {
			os.WriteFile(cache, []byte(strings.Replace(string(good), `"ipv4PerENI":7`, `"ipv4PerENI":1`, 1)), 0o600)
		},
		"torn": func() { os.WriteFile(cache, good[:len(good)/2], 0o600) },
		"world-writable": func() {
			os.WriteFile(cache, good, 0o600)
			os.Chmod(cache, 0o666)
		},
		"a symlink": func() {
			other := filepath.Join(dir, "elsewhere")
			os.WriteFile(other, good, 0o600)
			os.Remove(cache)
			os.Symlink(other, cache)
		},
	}
	for _, why := range slices.Sorted(maps.Keys(untrusted)) {
		untrusted[why]()
		if n := fresh(t); n != 1 {
			t.Errorf("cache %s: %d DescribeInstanceTypes, want 1 (the cache not trusted)", why, n)
		}
		if fi, err := os.Lstat(cache); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("cache %s: after the pass %v, %v: want it rewritten", why, fi, err)
		}
	}
}

// newEnvOn is newEnv on an existing world: another store of the same
// instance.
func newEnvOn(t testing.TB, fake *ec2fake.Server, wc section.WarmConfig) *env {
	t.Helper()
	e := &env{fake: fake, st: allocfake.NewStore(), host: &fakeHost{}, out: &bytes.Buffer{}, now: time.Now()}
	e.mgr = &alloc.Manager{Store: e.st, Pool: alloc.StoredPool{}, BootID: "b", Cooldown: 30 * time.Second, Now: e.clock}
	md := NewMetadataClient(fake.URL())
	e.w = &Warmer{Mgr: e.mgr, API: NewAPI(fake.URL(), "us-east-1", md), MD: md, Host: e.host, Cfg: wc, Out: e.out, Now: e.clock}
	return e
}
