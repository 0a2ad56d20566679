package alloc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/eni-cni/eni-cni/alloc"
)

func newDiskManager(t testing.TB, dir, pool string) *Manager {
	t.Helper()
	s, err := NewDiskStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ParseRanges([]string{pool})
	if err != nil {
		t.Fatal(err)
	}
	return &Manager{Store: s, Pool: rs, BootID: "boot-1", Cooldown: 30 * time.Second, LockTimeout: 10 * time.Second}
}

func TestDiskStoreRoundTripAndModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	m := newDiskManager(t, dir, "10.0.0.0/24")
	ctx := context.Background()
	r := req("abc")
	r.PodNamespace, r.PodName, r.PodUID, r.Netns = "kube-system", "coredns-1", "uid-1", "/var/run/netns/x"
	a, _, err := m.Allocate(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	m2 := newDiskManager(t, dir, "10.0.0.0/24")
	got, found, err := m2.Get(ctx, key("abc"))
	if err != nil || !found {
		t.Fatalf("Get from a second store: %v %v", found, err)
	}
	if got.IP != a.IP || got.PodName != "coredns-1" || got.Netns != "/var/run/netns/x" || !got.AllocatedAt.Equal(a.AllocatedAt) {
		t.Errorf("round trip lost data: %+v vs %+v", got, a)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, StateFileName): 0o600, filepath.Join(dir, LockFileName): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %o, want %o", path, fi.Mode().Perm(), want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("state dir holds %d entries, want state and lock only", len(entries))
	}
	data, _ := os.ReadFile(filepath.Join(dir, StateFileName))
	for _, field := range []string{fmt.Sprintf(`"version":%d`, SchemaVersion), `"bootID":"boot-1"`, `"podNamespace":"kube-system"`, `"hostVeth":"eniabc"`} {
		if !bytes.Contains(data, []byte(field)) {
			t.Errorf("state file lacks %s:\n%s", field, data)
		}
	}
}

func TestDiskStoreBadFiles(t *testing.T) {
	valid := `{"version":1,"bootID":"boot-1","allocations":[],"cooling":[]}`
	alloc := func(cid, ip string) string {
		return fmt.Sprintf(`{"network":"pods","containerID":%q,"ifname":"eth0","ip":%q}`, cid, ip)
	}
	tests := []struct {
		name, content string
		want          error
		msg           string
	}{
		{"empty", "", ErrCorrupt, "empty"},
		{"garbage", "not json at all", ErrCorrupt, "invalid character"},
		{"truncated", valid[:len(valid)/2], ErrCorrupt, "unexpected end"},
		{"no version", `{"allocations":[]}`, ErrCorrupt, "no version"},
		{"future version", `{"version":99,"allocations":[]}`, ErrUnsupportedVersion, "version 99"},
		{"bad ip", `{"version":1,"allocations":[` + alloc("a", "10.0.0.500") + `]}`, ErrCorrupt, "10.0.0.500"},
		{"missing ip", `{"version":1,"allocations":[{"network":"pods","containerID":"a","ifname":"eth0"}]}`, ErrCorrupt, "no valid IPv4"},
		{"duplicate ip", `{"version":1,"allocations":[` + alloc("a", "10.0.0.5") + `,` + alloc("b", "10.0.0.5") + `]}`, ErrCorrupt, "allocated to both"},
		{"duplicate key", `{"version":1,"allocations":[` + alloc("a", "10.0.0.5") + `,` + alloc("a", "10.0.0.6") + `]}`, ErrCorrupt, "appears twice"},
		{"empty key", `{"version":1,"allocations":[{"network":"pods","ifname":"eth0","ip":"10.0.0.5"}]}`, ErrCorrupt, "empty network"},
		{"wrong type", `{"version":"1"}`, ErrCorrupt, "cannot unmarshal"},
		{"wrong type deep", `{"version":1,"allocations":{"a":1}}`, ErrCorrupt, "cannot unmarshal"},
		{"wrong type of time", `{"version":1,"allocations":[{"network":"pods","containerID":"a","ifname":"eth0","ip":"10.0.0.5","allocatedAt":17}]}`, ErrCorrupt, "not a JSON string"},
		{"not an object", `[1,2,3]`, ErrCorrupt, "cannot unmarshal"},
		{"null", `null`, ErrCorrupt, "no version"},
		{"negative version", `{"version":-1}`, ErrUnsupportedVersion, "version -1"},
		{"loopback ip", `{"version":1,"allocations":[` + alloc("a", "127.0.0.1") + `]}`, ErrCorrupt, "loopback"},
		{"gateway ip", `{"version":1,"allocations":[` + alloc("a", "169.254.1.1") + `]}`, ErrCorrupt, "169.254.1.1"},
		{"broadcast ip", `{"version":1,"allocations":[` + alloc("a", "255.255.255.255") + `]}`, ErrCorrupt, "broadcast"},
		{"veth path", `{"version":1,"allocations":[{"network":"pods","containerID":"a","ifname":"eth0","ip":"10.0.0.5","hostVeth":"../eth0"}]}`, ErrCorrupt, "not an interface name"},
		{"veth too long", `{"version":1,"allocations":[{"network":"pods","containerID":"a","ifname":"eth0","ip":"10.0.0.5","hostVeth":"eni0123456789abcdef"}]}`, ErrCorrupt, "not an interface name"},
		{"pool twice", `{"version":1,"pool":[{"ip":"10.0.0.5","eni":"eni-1"},{"ip":"10.0.0.5","eni":"eni-2"}]}`, ErrCorrupt, "in the pool twice"},
		{"trailing garbage", `{"version":1}{"version":1}`, ErrCorrupt, "invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, StateFileName)
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			m := newDiskManager(t, dir, "10.0.0.0/24")
			_, _, err := m.Allocate(context.Background(), req("new"))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("message %q should name %s and say %q", err, path, tt.msg)
			}
			after, _ := os.ReadFile(path)
			if string(after) != tt.content {
				t.Errorf("bad file was rewritten: %q", after)
			}
		})
	}
}

func TestDiskStoreUnreadable(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, StateFileName), 0o700); err != nil {
		t.Fatal(err)
	}
	m := newDiskManager(t, dir, "10.0.0.0/24")
	_, _, err := m.Allocate(context.Background(), req("a"))
	if err == nil || !strings.Contains(err.Error(), StateFileName) {
		t.Fatalf("err = %v, want a read error naming the file", err)
	}
}

func TestDiskStoreSaveFailureLeavesNoTemp(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	dir := t.TempDir()
	m := newDiskManager(t, dir, "10.0.0.0/24")
	m.Allocate(context.Background(), req("a"))
	before, _ := os.ReadFile(filepath.Join(dir, StateFileName))
	os.Chmod(dir, 0o500)
	defer os.Chmod(dir, 0o700)
	if _, _, err := m.Allocate(context.Background(), req("b")); err == nil {
		t.Fatal("save into a read-only directory succeeded")
	}
	after, _ := os.ReadFile(filepath.Join(dir, StateFileName))
	if !bytes.Equal(before, after) {
		t.Error("state changed although the save failed")
	}
}

// TestConcurrentGoroutines uses one DiskStore per goroutine: each has its
// own open file description, so flock excludes them as it would processes.
func TestConcurrentGoroutines(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := newDiskManager(t, dir, "10.0.0.1-10.0.0.25")
			_, _, err := m.Allocate(context.Background(), req(fmt.Sprintf("g%d", i)))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	ok, exhausted := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrPoolExhausted):
			exhausted++
		default:
			t.Error(err)
		}
	}
	assertDistinct(t, dir, 25)
	if ok != 25 || exhausted != 5 {
		t.Errorf("%d ok, %d exhausted; want 25 and 5", ok, exhausted)
	}
}

// TestConcurrentProcesses runs allocations in separate processes, as the
// plugin runs: the test binary re-executes itself as a worker.
func TestConcurrentProcesses(t *testing.T) {
	if dir := os.Getenv("ALLOC_WORKER_DIR"); dir != "" {
		runWorker(t, dir)
		return
	}
	dir := t.TempDir()
	const procs, each = 8, 5
	var wg sync.WaitGroup
	for p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestConcurrentProcesses$")
			cmd.Env = append(os.Environ(), "ALLOC_WORKER_DIR="+dir, "ALLOC_WORKER_ID="+strconv.Itoa(p), "ALLOC_WORKER_N="+strconv.Itoa(each))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("worker %d: %v\n%s", p, err, out)
			}
		}()
	}
	wg.Wait()
	assertDistinct(t, dir, procs*each)
}

func runWorker(t *testing.T, dir string) {
	id := os.Getenv("ALLOC_WORKER_ID")
	n, _ := strconv.Atoi(os.Getenv("ALLOC_WORKER_N"))
	m := newDiskManager(t, dir, "10.0.0.0/24")
	for i := range n {
		if _, _, err := m.Allocate(context.Background(), req(fmt.Sprintf("p%s-%d", id, i))); err != nil {
			t.Fatal(err)
		}
	}
}

func assertDistinct(t *testing.T, dir string, want int) {
	t.Helper()
	s, _ := NewDiskStore(dir)
	st, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Allocations) != want {
		t.Fatalf("store holds %d allocations, want %d", len(st.Allocations), want)
	}
	seen := map[netip.Addr]bool{}
	for _, a := range st.Allocations {
		if seen[a.IP] {
			t.Fatalf("%s allocated twice", a.IP)
		}
		seen[a.IP] = true
	}
}

func TestCleanTemp(t *testing.T) {
	dir := t.TempDir()
	s, _ := NewDiskStore(dir)
	stale := filepath.Join(dir, StateFileName+".tmp-123")
	os.WriteFile(stale, []byte("half"), 0o600)
	s.CleanTemp()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Error("stale temp file kept")
	}
}

// TestSetAsideKeepsTheStateFile: the bad file is kept under a new name and
// stays the state file until a save replaces it; a second set-aside in the
// same second gets its own name; the copy used where hard links fail is the
// same bytes and refuses what is not a regular file.
func TestSetAsideKeepsTheStateFile(t *testing.T) {
	dir := t.TempDir()
	d, err := NewDiskStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	if _, err := d.SetAside(now); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("set aside of no file: %v, want ErrNotExist", err)
	}
	bad := []byte("{truncated")
	if err := os.WriteFile(d.Path(), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	first, err := d.SetAside(now)
	if err != nil {
		t.Fatal(err)
	}
	second, err := d.SetAside(now)
	if err != nil || second == first {
		t.Fatalf("second set aside: %s, %v (first %s)", second, err, first)
	}
	for _, p := range []string{d.Path(), first, second} {
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, bad) {
			t.Errorf("%s: %q, %v; want the bad file", p, got, err)
		}
	}
	cp := filepath.Join(dir, "copy")
	if err := CopyAside(d.Path(), cp); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(cp); !bytes.Equal(got, bad) {
		t.Errorf("copy: %q", got)
	}
	if err := CopyAside(d.Path(), cp); !errors.Is(err, fs.ErrExist) {
		t.Errorf("copy over an existing file: %v, want ErrExist", err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(d.Path(), link)
	if err := CopyAside(link, filepath.Join(dir, "copy2")); err == nil {
		t.Error("copied through a symlink")
	}
	if _, err := os.Lstat(filepath.Join(dir, "copy2")); err == nil {
		t.Error("a failed copy left its file")
	}
}

// TestReadOnlyStoreCreatesNothing: a dry run's store and manager take the
// lock where there is one, create no directory or lock file where there is
// none, and save nothing: not a fn's change (refused) and not the
// housekeeping of a load (a state of another boot).
func TestReadOnlyStoreCreatesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	m := newDiskManager(t, dir, "10.0.0.0/29")
	d := m.Store.(*DiskStore)
	d.SetReadOnly()
	m.ReadOnly = true
	ctx := context.Background()
	if err := m.Update(ctx, func(st *State) (bool, error) { return false, nil }); err != nil {
		t.Fatalf("read-only update of no directory: %v", err)
	}
	if _, err := os.Lstat(dir); err == nil {
		t.Fatal("the state directory was created")
	}
	if err := d.Save(NewState("")); !errors.Is(err, ErrReadOnly) {
		t.Errorf("save: %v, want ErrReadOnly", err)
	}
	// A state of another boot, written by a writer (which made the lock).
	w := newDiskManager(t, dir, "10.0.0.0/29")
	w.BootID = "boot-0"
	if _, _, err := w.Allocate(ctx, Request{Key: Key{Network: "n", ContainerID: "c", IfName: "eth0"}}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(d.Path())
	err := m.Update(ctx, func(st *State) (bool, error) {
		if len(st.Allocations) != 0 {
			t.Error("the previous boot's allocation was not dropped in memory")
		}
		return true, nil
	})
	if !errors.Is(err, ErrReadOnly) {
		t.Errorf("a change under a read-only manager: %v, want ErrReadOnly", err)
	}
	if err := m.Update(ctx, func(st *State) (bool, error) { return false, nil }); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(d.Path()); !bytes.Equal(before, after) {
		t.Error("a read-only update saved")
	}
	// The lock is taken where it exists: a writer waits.
	if err := d.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := w.Store.Lock(short); !errors.Is(err, ErrLockTimeout) {
		t.Errorf("a writer got the lock a read-only store holds: %v", err)
	}
	if err := d.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// assertNoTempFiles fails t if an atomic write left its temporary file in
// dir.
func assertNoTempFiles(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// TestReuseDecodedSeesEveryChange: a store that reuses its last decode
// (a warm pass's) still sees each change another process saves, and a
// caller's change to a loaded state, saved or not, never reaches the
// state the next Load hands out.
func TestReuseDecodedSeesEveryChange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	ctx := context.Background()
	m := newDiskManager(t, dir, "10.0.0.0/24")
	m.Store.(*DiskStore).ReuseDecoded()
	other := newDiskManager(t, dir, "10.0.0.0/24")
	if _, _, err := other.Allocate(ctx, req("first")); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		n := -1
		if err := m.Update(ctx, func(st *State) (bool, error) {
			n = len(st.Allocations)
			st.Allocations = append(st.Allocations, Allocation{}) // changed, not saved
			return false, nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 1 {
		t.Fatalf("first load: %d allocations, want 1", n)
	}
	for range 2 {
		if n := count(); n != 1 {
			t.Fatalf("unchanged file: %d allocations, want 1 (a caller's change leaked into the reused state)", n)
		}
	}
	if _, _, err := other.Allocate(ctx, req("second")); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("after another process's save: %d allocations, want 2", n)
	}
	if _, _, err := m.Allocate(ctx, req("third")); err != nil {
		t.Fatal(err)
	}
	if _, found, err := other.Get(ctx, key("third")); err != nil || !found {
		t.Fatalf("own save not on disk: %v %v", found, err)
	}
	if n := count(); n != 3 {
		t.Fatalf("after its own save: %d allocations, want 3", n)
	}
}

// BenchmarkLoadUnchanged is one look at an unchanged state file of 30
// pods, as a warm pass makes about ten times: decoded each time, and with
// ReuseDecoded (read and compared, then copied).
func BenchmarkLoadUnchanged(b *testing.B) {
	for _, reuse := range []bool{false, true} {
		b.Run(fmt.Sprintf("reuse=%v", reuse), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "state")
			m := newDiskManager(b, dir, "10.0.0.0/24")
			for i := range 30 {
				if _, _, err := m.Allocate(context.Background(), req(fmt.Sprintf("pod-%d", i))); err != nil {
					b.Fatal(err)
				}
			}
			s := m.Store.(*DiskStore)
			if reuse {
				s.ReuseDecoded()
			}
			for b.Loop() {
				if _, err := s.Load(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
