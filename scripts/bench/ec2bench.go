package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// ec2Calls is what the fake EC2 and IMDS served during one scenario.
type ec2Calls struct {
	Scenario string         `json:"scenario"`
	Pods     int            `json:"pods,omitempty"`
	EC2      map[string]int `json:"ec2"`
	EC2Total int            `json:"ec2Total"`
	IMDS     int            `json:"imds"`
	Passes   int            `json:"warmPasses"`
	Seconds  float64        `json:"seconds"`
}

func (c ec2Calls) breakdown() string {
	if len(c.EC2) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c.EC2)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, c.EC2[k]))
	}
	return strings.Join(parts, ", ")
}

// ec2Env is one simulated node as in ec2/warm_test.go: the fake AWS, the
// real SDK clients pointed at it, an in-memory store and a Warmer, with a
// hand-moved clock.
type ec2Env struct {
	fake   *ec2fake.Server
	mgr    *alloc.Manager
	w      *ec2.Warmer
	now    time.Time
	passes int
}

type noHost struct{}

func (noHost) SetupENI(context.Context, section.ENI) error { return nil }
func (noHost) Reassert(context.Context, []section.ENI, []alloc.Allocation) (ec2.HostReport, error) {
	return ec2.HostReport{}, nil
}

func newEC2Env(cfg ec2fake.Config, wc section.WarmConfig) (*ec2Env, error) {
	fake, err := ec2fake.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := fake.Start(); err != nil {
		return nil, err
	}
	e := &ec2Env{fake: fake, now: time.Now()}
	e.mgr = &alloc.Manager{Store: allocfake.NewStore(), Pool: alloc.StoredPool{}, BootID: "b", Cooldown: 30 * time.Second, Now: e.clock}
	md := ec2.NewMetadataClient(fake.URL())
	e.w = &ec2.Warmer{Mgr: e.mgr, API: ec2.NewAPI(fake.URL(), "us-east-1", md), MD: md, Host: noHost{}, Cfg: wc, Out: io.Discard, Now: e.clock}
	return e, nil
}

func (e *ec2Env) clock() time.Time { return e.now }

func (e *ec2Env) warm(ctx context.Context) error {
	e.passes++
	return e.w.Run(ctx)
}

func (e *ec2Env) total(ctx context.Context) (int, error) {
	_, c, err := e.mgr.Snapshot(ctx)
	return c.Total, err
}

// fillTo starts pods one by one as kubelet would, with the warm timer
// firing every fifth pod and whenever ADD finds the pool empty (the same
// model as fillTo in ec2/warm_test.go).
func (e *ec2Env) fillTo(ctx context.Context, n int) (int, error) {
	pods := 0
	for pods < n {
		key := alloc.Key{Network: "pods", ContainerID: fmt.Sprintf("fill-%d", pods), IfName: "eth0"}
		_, _, err := e.mgr.Allocate(ctx, alloc.Request{Key: key})
		if errors.Is(err, alloc.ErrPoolExhausted) {
			before, err := e.total(ctx)
			if err != nil {
				return pods, err
			}
			if err := e.warm(ctx); err != nil {
				return pods, err
			}
			if after, err := e.total(ctx); err != nil || after == before {
				return pods, err // the node is full
			}
			continue
		}
		if err != nil {
			return pods, err
		}
		pods++
		e.now = e.now.Add(time.Second)
		if pods%5 == 0 {
			if err := e.warm(ctx); err != nil {
				return pods, err
			}
		}
	}
	return pods, nil
}

// hour runs the warm timer every 30 s for an hour of the fake clock.
func (e *ec2Env) hour(ctx context.Context) error {
	for range 120 {
		e.now = e.now.Add(30 * time.Second)
		if err := e.warm(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (e *ec2Env) take(scenario string, t0 time.Time, passes0, pods int) ec2Calls {
	calls := e.fake.Calls()
	c := ec2Calls{Scenario: scenario, Pods: pods, EC2: calls, IMDS: e.fake.IMDSCalls(), Passes: e.passes - passes0, Seconds: time.Since(t0).Seconds()}
	for _, v := range calls {
		c.EC2Total += v
	}
	e.fake.ResetCalls()
	return c
}

// Scenario names the report and the targets look up.
const (
	scenarioSteady  = "1 h of warm every 30 s on that idle node"
	scenarioUnassig = "1 h after an address is unassigned behind eni-cni's back (idle node, 5 free)"
	scenarioDetach  = "1 h after an ENI holding only free addresses is detached behind eni-cni's back (m5.large, warmIPTarget 12)"
)

// ec2Drift measures the EC2 calls of an hour that starts with one drift
// event: an address unassigned, or an ENI detached, by someone else.
func (b *bench) ec2Drift(ctx context.Context) error {
	idle, err := newEC2Env(ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 5, TrimAfter: 5 * time.Minute})
	if err != nil {
		return err
	}
	defer idle.fake.Close()
	if err := idle.warm(ctx); err != nil {
		return err
	}
	primary := idle.fake.PrimaryENI()
	idle.fake.ResetCalls()
	t0, p0 := time.Now(), idle.passes
	if err := idle.fake.UnassignIPs(primary.ID, primary.SecondaryIPs[0]); err != nil {
		return err
	}
	if err := idle.hour(ctx); err != nil {
		return err
	}
	b.res.EC2 = append(b.res.EC2, idle.take(scenarioUnassig, t0, p0, 0))

	two, err := newEC2Env(ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 12, TrimAfter: 5 * time.Minute})
	if err != nil {
		return err
	}
	defer two.fake.Close()
	if err := two.warm(ctx); err != nil { // 9 on the primary ENI, a second ENI with 3
		return err
	}
	enis := two.fake.ENIs()
	if len(enis) != 2 {
		return fmt.Errorf("detach scenario: %d ENIs after the first pass, want 2", len(enis))
	}
	two.fake.ResetCalls()
	t0, p0 = time.Now(), two.passes
	if err := two.fake.DetachENI(enis[1].ID); err != nil {
		return err
	}
	if err := two.hour(ctx); err != nil {
		return err
	}
	b.res.EC2 = append(b.res.EC2, two.take(scenarioDetach, t0, p0, 0))
	return nil
}

// phaseEC2 reproduces the call counts of ec2/warm_test.go with the
// in-process fake: a fill to 29 pods on an m5.large (warmIPTarget 5), an
// hour of the warm timer on that full node, and an hour on an idle node
// warmed to its target.
func (b *bench) phaseEC2(ctx context.Context) error {
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "AKIDBENCH", "AWS_SECRET_ACCESS_KEY": "bench"} {
		old, had := os.LookupEnv(k)
		os.Setenv(k, v)
		defer func() {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		}()
	}
	wc := section.WarmConfig{WarmIPTarget: 5, Tags: map[string]string{"team": "net"}}
	e, err := newEC2Env(ec2fake.Config{InstanceType: "m5.large"}, wc)
	if err != nil {
		return err
	}
	defer e.fake.Close()
	t0 := time.Now()
	got, err := e.fillTo(ctx, 29)
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	b.res.EC2 = append(b.res.EC2, e.take("fill to 29 pods (m5.large, warmIPTarget 5)", t0, 0, got))
	t0, p0 := time.Now(), e.passes
	if err := e.hour(ctx); err != nil {
		return err
	}
	b.res.EC2 = append(b.res.EC2, e.take(fmt.Sprintf("1 h of warm every 30 s after the fill (%d pods)", got), t0, p0, got))

	idle, err := newEC2Env(ec2fake.Config{InstanceType: "m5.large"}, section.WarmConfig{WarmIPTarget: 5})
	if err != nil {
		return err
	}
	defer idle.fake.Close()
	t0 = time.Now()
	if err := idle.warm(ctx); err != nil {
		return err
	}
	b.res.EC2 = append(b.res.EC2, idle.take("first warm of an empty node to warmIPTarget 5", t0, 0, 0))
	t0, p0 = time.Now(), idle.passes
	if err := idle.hour(ctx); err != nil {
		return err
	}
	b.res.EC2 = append(b.res.EC2, idle.take(scenarioSteady, t0, p0, 0))
	if err := b.ec2Drift(ctx); err != nil {
		return err
	}
	if err := b.ec2IPv6(ctx); err != nil {
		return err
	}
	for _, c := range b.res.EC2 {
		b.logf("  %s: %d EC2 calls (%s), %d IMDS reads, %d warm passes", c.Scenario, c.EC2Total, c.breakdown(), c.IMDS, c.Passes)
	}
	return nil
}

// ec2IPv6 is the fill of a network of IPv6 (ipFamilies ["ipv6"]): one
// /80 delegated to the primary ENI holds a full node's pods (250, the
// larger maxPods cap), then an hour of the timer on that node.
func (b *bench) ec2IPv6(ctx context.Context) error {
	cfg := ec2fake.Config{InstanceType: "m5.large", Subnets: []ec2fake.SubnetConfig{{CIDR: "10.0.0.0/20", IPv6CIDR: "2600:1f18:abcd:1200::/64"}}}
	e, err := newEC2Env(cfg, section.WarmConfig{WarmIPTarget: 5, IPv6: true})
	if err != nil {
		return err
	}
	defer e.fake.Close()
	e.mgr.Families, e.mgr.Pool = []alloc.Family{alloc.IPv6}, alloc.StoredPool{IPv6: true}
	t0 := time.Now()
	got, err := e.fillTo(ctx, 250)
	if err != nil {
		return fmt.Errorf("IPv6 fill: %w", err)
	}
	b.res.EC2 = append(b.res.EC2, e.take("fill to 250 IPv6 pods (m5.large, ipFamilies [ipv6])", t0, 0, got))
	t0, p0 := time.Now(), e.passes
	if err := e.hour(ctx); err != nil {
		return err
	}
	b.res.EC2 = append(b.res.EC2, e.take(fmt.Sprintf("1 h of warm every 30 s after the IPv6 fill (%d pods)", got), t0, p0, got))
	return nil
}
