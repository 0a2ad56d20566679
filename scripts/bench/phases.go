package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// phaseExecFloor times CNI_COMMAND=VERSION of each binary and of a trivial
// static Go binary, rotating the order every round.
func (b *bench) phaseExecFloor(ctx context.Context) error {
	bins := []struct{ key, path string }{
		{"eni", b.eni.bin},
		{"ptp", b.ref.bin},
		{"host-local", filepath.Join(b.cfg.tools, "bin/host-local")},
		{"trivial", b.trivial},
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "CNI_COMMAND=VERSION"}
	stdin := []byte(`{"cniVersion":"1.0.0"}`)
	for i := -2; i < b.cfg.execN; i++ { // two warm-up rounds, not recorded
		if err := ctx.Err(); err != nil {
			return err
		}
		for j := range bins {
			x := bins[(j+max(i, 0))%len(bins)]
			r, err := b.execIn(b.eni.node.ns, x.path, nil, env, stdin)
			if err != nil {
				return err
			}
			if r.exit != 0 {
				return fmt.Errorf("%s VERSION: exit %d: %s %s", x.key, r.exit, r.stdout, r.stderr)
			}
			if i >= 0 {
				b.recordExec("exec", x.key, "VERSION", i, 0, r)
			}
		}
	}
	return nil
}

// phaseRSS measures peak RSS with GNU time (%M), which forks a small copy
// of itself before exec. wait4's ru_maxrss of a child the harness starts is
// useless here: Go starts children with vfork (CLONE_VM), so the kernel
// records the harness's own high-water RSS into the child's at exec.
func (b *bench) phaseRSS(ctx context.Context) error {
	const timeBin = "/usr/bin/time"
	if _, err := os.Stat(timeBin); err != nil {
		b.res.RSSNote = "peak RSS not measured: /usr/bin/time (apt package time) is missing"
		b.logf("  skipped: %s", b.res.RSSNote)
		return nil
	}
	out := filepath.Join(b.work, "rss")
	measure := func(ns netns.NsHandle, bin string, env []string, stdin []byte) (execResult, int64, error) {
		os.Remove(out)
		r, err := b.execIn(ns, timeBin, []string{"-f", "%M", "-o", out, bin}, env, stdin)
		if err != nil {
			return r, 0, err
		}
		data, err := os.ReadFile(out)
		if err != nil {
			return r, 0, err
		}
		lines := strings.Fields(string(data))
		if len(lines) == 0 {
			return r, 0, fmt.Errorf("no output from %s", timeBin)
		}
		kib, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
		return r, kib, err
	}
	k := min(20, b.cfg.n)
	for i := range k {
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, p := range b.both(i) {
			pd := p.pods[i]
			pd.cid = p.newCID()
			r, kib, err := measure(p.node.ns, p.bin, p.env("ADD", pd, pd.path), p.stdin(nil))
			if err != nil {
				return err
			}
			if r.exit != 0 {
				return fmt.Errorf("%s ADD %s under time: exit %d: %s %s", p.label, pd.name, r.exit, r.stdout, r.stderr)
			}
			pd.result = r.stdout
			b.record(sample{Phase: "rss", Plugin: p.key, Op: "ADD", Index: i, Fill: i, Wall: r.wall, User: r.user, Sys: r.sys, MaxRSS: kib})
		}
	}
	for i := range k {
		for _, p := range b.both(i) {
			if _, err := b.del(p, p.pods[i], p.pods[i].path); err != nil {
				return err
			}
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "CNI_COMMAND=VERSION"}
	for i := range k {
		for _, x := range []struct{ key, bin string }{{"eni", b.eni.bin}, {"ptp", b.ref.bin}, {"trivial", b.trivial}} {
			r, kib, err := measure(b.eni.node.ns, x.bin, env, []byte(`{"cniVersion":"1.0.0"}`))
			if err != nil {
				return err
			}
			b.record(sample{Phase: "rss", Plugin: x.key, Op: "VERSION", Index: i, Fill: -1, Wall: r.wall, MaxRSS: kib})
		}
	}
	time.Sleep(time.Duration(b.cfg.cooldown*float64(time.Second)) + 100*time.Millisecond)
	return nil
}

// phaseSequential: n ADDs (the node fills up), then n CHECKs, then n DELs
// with the netns present, the two plugins interleaved.
func (b *bench) phaseSequential(ctx context.Context) error {
	n := b.cfg.n
	steps := []struct {
		op string
		fn func(*plugin, *pod) (execResult, error)
	}{
		{"ADD", b.add},
		{"CHECK", b.check},
		{"DEL", func(p *plugin, pd *pod) (execResult, error) { return b.del(p, pd, pd.path) }},
	}
	for _, s := range steps {
		for i := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			for _, p := range b.both(i) {
				r, err := s.fn(p, p.pods[i])
				if err != nil {
					return err
				}
				fill := i // ADD: i pods attached before; CHECK: all; DEL: n-i
				switch s.op {
				case "CHECK":
					fill = n
				case "DEL":
					fill = n - i
				}
				b.recordExecFill("seq", p.key, s.op, i, 0, fill, r)
			}
		}
		b.logf("  sequential %s: %d per plugin done", s.op, n)
	}
	return nil
}

// phaseBurst launches `burst` ADDs of one plugin at once, waits for all,
// then `burst` DELs at once; rounds alternate which plugin goes first.
func (b *bench) phaseBurst(ctx context.Context) error {
	warmThreads(b.cfg.burst)
	for round := range b.cfg.burstRounds {
		for _, p := range b.both(round) {
			if err := ctx.Err(); err != nil {
				return err
			}
			pods := p.pods[:b.cfg.burst]
			wall, err := b.burstOnce(p, "ADD", round, pods, b.add)
			if err != nil {
				return err
			}
			b.record(sample{Phase: "burst-wall", Plugin: p.key, Op: "ADD", Round: round, Fill: -1, Wall: wall})
			// Let the node settle (the kernel finishes the veths' set-up
			// work) before the DEL burst, as between two bursts of a real node.
			time.Sleep(200 * time.Millisecond)
			wall, err = b.burstOnce(p, "DEL", round, pods, func(p *plugin, pd *pod) (execResult, error) { return b.del(p, pd, pd.path) })
			if err != nil {
				return err
			}
			b.record(sample{Phase: "burst-wall", Plugin: p.key, Op: "DEL", Round: round, Fill: -1, Wall: wall})
			time.Sleep(200 * time.Millisecond)
		}
		b.logf("  burst round %d/%d done", round+1, b.cfg.burstRounds)
	}
	// Cooling addresses of eni-cni must be free again for the next phase.
	time.Sleep(time.Duration(b.cfg.cooldown*float64(time.Second)) + 100*time.Millisecond)
	return nil
}

// burstOnce runs fn for every pod at once and returns the wall time from
// the release of all of them to the end of the last one.
func (b *bench) burstOnce(p *plugin, op string, round int, pods []*pod, fn func(*plugin, *pod) (execResult, error)) (time.Duration, error) {
	start := make(chan struct{})
	errs := make([]error, len(pods))
	var ready, done sync.WaitGroup
	for i, pd := range pods {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			r, err := fn(p, pd)
			errs[i] = err
			if err == nil {
				b.recordExec("burst", p.key, op, i, round, r)
			}
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	done.Wait()
	wall := time.Since(t0)
	return wall, errors.Join(errs...)
}

// warmThreads makes the runtime create enough OS threads for a burst
// before the first one is timed.
func warmThreads(n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			lockSleep()
		})
	}
	wg.Wait()
}

func lockSleep() {
	runtime.LockOSThread()
	time.Sleep(20 * time.Millisecond)
	runtime.UnlockOSThread()
}

// phaseGone: ADD, delete the pod's netns (the kernel removes the veth pair
// with it), wait until the host veth is gone, then time DEL with
// CNI_NETNS="", as kubelet sends it after the sandbox is gone.
func (b *bench) phaseGone(ctx context.Context) error {
	k := b.cfg.gone
	for i := range k {
		for _, p := range b.both(i) {
			if _, err := b.add(p, p.gone[i]); err != nil {
				return err
			}
		}
	}
	for _, p := range []*plugin{b.eni, b.ref} {
		if err := b.removePods(p.gone); err != nil {
			return err
		}
	}
	for _, p := range []*plugin{b.eni, b.ref} {
		if err := waitVethsGone(ctx, p.node, p.gone); err != nil {
			return fmt.Errorf("%s: %w", p.label, err)
		}
	}
	for i := range k {
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, p := range b.both(i) {
			r, err := b.del(p, p.gone[i], "")
			if err != nil {
				return err
			}
			b.recordExec("gone", p.key, "DEL", i, 0, r)
		}
	}
	return nil
}

// waitVethsGone waits until the host veths of pods have disappeared from
// the node (namespace teardown in the kernel is asynchronous).
func waitVethsGone(ctx context.Context, n *node, pods []*pod) error {
	deadline := time.Now().Add(60 * time.Second)
	for _, pd := range pods {
		for {
			_, err := n.h.LinkByName(pd.hostVeth)
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("host veth %s of %s still on the node 60s after its netns was deleted", pd.hostVeth, pd.name)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
