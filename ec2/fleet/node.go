package fleet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	ec2pkg "github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/netconf"
)

// node is one instance: its store, its warm pass and its pods' ADDs.
type node struct {
	o     Options
	clock *vclock
	cfg   *netconf.Config
	mgr   *alloc.Manager
	w     *ec2pkg.Warmer
	add   provider.EC2
	busy  sync.Mutex // warm.lock: one pass at a time
	mu    sync.Mutex
	errs  int
	// life is the run's: the passes an ADD starts outlive the ADD (as a
	// spawned process would), not the run, which waits for them (passes)
	// before it closes the world.
	life   context.Context
	passes sync.WaitGroup
	id     int
	trace  *tracer // with Options.Trace
}

// site is where the nodes run: the world, how they reach it, and a
// directory for their lock files.
type site struct {
	fake   *ec2fake.Server
	netw   network
	ec2URL string
	dir    string
}

// openSite serves the world's EC2 API on netw and makes the nodes' parent
// directory; closeSite undoes both.
func openSite(fake *ec2fake.Server, netw network) (s site, closeSite func(), err error) {
	ec2URL, err := netw.serveEC2(fake)
	if err != nil {
		netw.close()
		return site{}, nil, err
	}
	dir, err := os.MkdirTemp("", "eni-cni-fleet-")
	if err != nil {
		netw.close()
		return site{}, nil, err
	}
	return site{fake, netw, ec2URL, dir}, func() { os.RemoveAll(dir); netw.close() }, nil
}

// launch adds the node's instance to the world, with its own IMDS.
func launch(s site, o Options, c *vclock, i int) (*node, error) {
	n, err := launchOn(s, o, c.now, c.real, i)
	if n != nil {
		n.clock = c
		if n.trace != nil {
			n.trace.since = func() time.Duration { return c.now().Sub(c.origin) }
		}
	}
	return n, err
}

// launchOn is launch on any clock: now is virtual time, real how long a
// virtual duration takes.
func launchOn(s site, o Options, now func() time.Time, real func(time.Duration) time.Duration, i int) (*node, error) {
	inst, err := s.fake.AddInstance(ec2fake.InstanceConfig{ID: fmt.Sprintf("i-%017x", 0x0f1ee7000+i)})
	if err != nil {
		return nil, err
	}
	if o.LaunchSecondaries+o.LaunchPrefixes > 0 {
		if err := inst.LaunchTemplate(o.LaunchSecondaries, o.LaunchPrefixes); err != nil {
			return nil, err
		}
	}
	imdsURL, err := s.netw.serveIMDS(inst)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.dir, inst.ID())
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	n := &node{o: o, life: context.Background(), id: i}
	if o.Trace {
		n.trace = &tracer{since: func() time.Duration { return 0 }}
	}
	n.mgr = &alloc.Manager{Store: scaledStore{Store: allocfake.NewStore(), real: real, dir: dir, memo: &decoded{}}, Pool: alloc.StoredPool{}, BootID: "boot", Cooldown: 30 * time.Second, Now: now}
	n.cfg = &netconf.Config{Network: "pods", Provider: netconf.EC2, StateDir: dir, IMDSEndpoint: imdsURL, EC2Endpoint: s.ec2URL, AddWait: o.AddWait, Warm: o.Warm}
	// A few connections per node and client: a thousand nodes in one
	// process would otherwise open one per concurrent request, on both
	// ends, past the process's file limit.
	md := ec2pkg.NewMetadataClient(imdsURL, func(io *imds.Options) { io.HTTPClient = s.netw.client(2) })
	retry := ec2pkg.Backoff{Base: real(ec2pkg.DefaultBackoff.Base), Cap: real(ec2pkg.DefaultBackoff.Cap)}
	api := ec2pkg.NewAPI(s.ec2URL, "us-east-1", md, func(eo *ec2.Options) {
		eo.Retryer, eo.HTTPClient = ec2pkg.NewRetryer(retry), s.netw.client(4)
		if n.trace != nil {
			eo.APIOptions = append(eo.APIOptions, n.trace.option)
		}
	})
	n.w = &ec2pkg.Warmer{Mgr: n.mgr, API: api, MD: md, Host: nopHost{}, Cfg: o.Warm, Out: io.Discard, Now: now, Spread: true, Throttles: &ec2pkg.MemThrottles{}}
	if n.trace != nil {
		n.w.Out = n.trace
	}
	n.add = provider.EC2{Cfg: n.cfg, Mgr: n.mgr, Full: nodeIMDS{md: md, now: now}, Warm: n, Now: now, Alive: func(int) bool { return true }}
	return n, nil
}

// StartWarm is the node's WarmStarter: a pass of its own, skipped when one
// runs (warm.lock).
func (n *node) StartWarm(context.Context, *netconf.Config, bool) (string, error) {
	n.passes.Go(func() { n.pass(n.life) })
	return "fleet", nil
}

func (n *node) pass(ctx context.Context) {
	if !n.busy.TryLock() {
		n.note("pass skipped: one runs")
		return
	}
	defer n.busy.Unlock()
	n.note("pass begins")
	ctx, cancel := context.WithTimeout(ctx, n.clock.real(ec2pkg.WarmTimeout))
	defer cancel()
	err := n.w.Run(ctx)
	n.note(fmt.Sprintf("pass ends: %v", err))
	if err != nil {
		n.mu.Lock()
		n.errs++
		n.mu.Unlock()
	}
}

// note adds to the node's story (Options.Trace).
func (n *node) note(what string) {
	if n.trace != nil {
		n.trace.note(what)
	}
}

// idle is what the node's pool holds that no pod uses (free or cooling).
func (n *node) idle() int {
	st, c, err := n.mgr.Peek()
	if err != nil || st == nil {
		return 0
	}
	return c.Free + c.Cooling
}

// timeline is the node's EC2 attempts (Options.Trace).
func (n *node) timeline(ready, done time.Duration) Timeline {
	n.trace.mu.Lock()
	defer n.trace.mu.Unlock()
	return Timeline{Node: n.id, Ready: ready, Done: done, Calls: slices.Clone(n.trace.calls), Events: slices.Clone(n.trace.events)}
}

func (n *node) passErrors() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.errs
}

// timer is eni-cni-warm.timer: a pass 10 s after boot, then every 30 s.
func (n *node) timer(ctx context.Context) {
	n.clock.sleep(ctx, 10*time.Second)
	for ctx.Err() == nil {
		n.pass(ctx)
		n.clock.sleep(ctx, 30*time.Second)
	}
}

// statusEvery is how often kubelet asks the runtime for its status (and
// so the runtime CNI STATUS): kubelet's runtime state sync.
const statusEvery = 5 * time.Second

// scheduled is the scheduler sending the node its pods: at once without
// the readiness gate (Options.Gate), else once the node is Ready, that is
// when kubelet's STATUS (the real one, provider.EC2.Ready, acting as it
// does: starting a pass for a pool not ready) first says the network is
// ready. unready is how many pods were sent while the node's pool could
// not serve them (provider.PoolReady at that moment).
func (n *node) scheduled(ctx context.Context) (unready int, ok bool) {
	for n.o.Gate {
		st, _, err := n.mgr.Peek()
		if err == nil && n.add.Ready(ctx, st, true) == nil {
			break
		}
		n.clock.sleep(ctx, statusEvery)
		if ctx.Err() != nil {
			return 0, false
		}
	}
	st, c, err := n.mgr.Peek()
	if err != nil || provider.PoolReady(st, c, n.o.Warm, n.mgr.BootID) != nil {
		return n.o.PodsPerNode, true
	}
	return 0, true
}

// pods runs the node's pods' ADDs at once, each retried as kubelet does
// after a failure, and returns when the last had an address.
func (n *node) pods(ctx context.Context) (last time.Duration, unserved int, failed map[string]int) {
	failed = map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n.o.PodsPerNode {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := alloc.Key{Network: "pods", ContainerID: fmt.Sprintf("pod-%d", i), IfName: "eth0"}
			for {
				_, _, _, _, err := n.add.Allocate(ctx, alloc.Request{Key: key})
				mu.Lock()
				if err == nil {
					last = max(last, n.clock.now().Sub(n.clock.origin))
					mu.Unlock()
					return
				}
				if ctx.Err() != nil {
					unserved++
					mu.Unlock()
					return
				}
				failed[reason(err)]++
				mu.Unlock()
				n.clock.sleep(ctx, n.o.Retry)
			}
		}()
	}
	wg.Wait()
	return last, unserved, failed
}

var varying = regexp.MustCompile(`[0-9a-f]{8,}|\d+(\.\d+)?(ms|s|m)?|pod-\d+`)

// reason is an ADD's error without what varies between pods and nodes.
func reason(err error) string {
	s := varying.ReplaceAllString(err.Error(), "#")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// nodeIMDS is ec2.InProcess with one IMDS client per node: a real ADD is
// a process whose client goes with it, while a client per ADD in this one
// process would keep every idle connection open.
type nodeIMDS struct {
	ec2pkg.InProcess
	md  *imds.Client
	now func() time.Time
}

func (f nodeIMDS) RefreshIMDS(ctx context.Context, _ *netconf.Config, mgr *alloc.Manager) (provider.Refreshed, error) {
	r, err := ec2pkg.Refresh(ctx, mgr, f.md, f.now())
	if err != nil {
		return provider.Refreshed{}, err
	}
	return provider.Refreshed{Added: r.Added, Dropped: r.Dropped, InstanceID: r.Instance.ID}, nil
}

// fewConns is an HTTP client with at most n connections to a host.
func fewConns(n int) *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTimeout(20 * time.Second).WithTransportOptions(func(t *http.Transport) {
		t.MaxConnsPerHost, t.MaxIdleConnsPerHost = n, n
	})
}

// scaledStore is the node's store, whose waiters wait on virtual time: an
// ADD sleeps until its next look (a recheck, a cooldown's or a pause's
// end), computed on the virtual clock.
type scaledStore struct {
	*allocfake.Store
	real func(time.Duration) time.Duration
	dir  string
	memo *decoded
}

// decoded is the state last decoded from the store's bytes.
type decoded struct {
	mu   sync.Mutex
	data []byte
	st   *alloc.State
}

// Load decodes the store's bytes only when they changed since the last
// Load (as alloc.DiskStore.ReuseDecoded): thirty ADDs looking at an
// unchanged store again and again were half the run's CPU time.
func (s scaledStore) Load() (*alloc.State, error) {
	data := s.Store.Bytes()
	if len(data) == 0 {
		return s.Store.Load()
	}
	s.memo.mu.Lock()
	defer s.memo.mu.Unlock()
	if s.memo.st == nil || !bytes.Equal(s.memo.data, data) {
		st, err := alloc.DecodeState(data)
		if err != nil {
			return nil, err
		}
		s.memo.data, s.memo.st = data, st
	}
	return s.memo.st.Clone(), nil
}

// Dir is where the node's ADDs take imds.lock, as a DiskStore's: one ADD
// at a time reads IMDS on a dry pool.
func (s scaledStore) Dir() string { return s.dir }

func (s scaledStore) Watch() (alloc.Watcher, error) {
	w, err := s.Store.Watch()
	return scaledWatcher{Watcher: w, real: s.real}, err
}

type scaledWatcher struct {
	alloc.Watcher
	real func(time.Duration) time.Duration
}

func (w scaledWatcher) Wait(ctx context.Context, d time.Duration) (bool, error) {
	return w.Watcher.Wait(ctx, max(w.real(d), time.Millisecond))
}

// nopHost is the node's kernel side, left out: links appear at once.
type nopHost struct{}

func (nopHost) SetupENI(context.Context, section.ENI) error { return nil }
func (nopHost) Reassert(context.Context, []section.ENI, []alloc.Allocation) (ec2pkg.HostReport, error) {
	return ec2pkg.HostReport{}, nil
}
