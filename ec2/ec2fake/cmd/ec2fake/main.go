// Command ec2fake runs the fake IMDS + EC2 server of package ec2fake for
// demos and end-to-end scripts. It listens on loopback only, prints the IMDS
// URL and the EC2 URL (one per line, identical unless --ec2-listen is given)
// on stdout, keeps a JSON description of the instance and its ENIs up to date
// in --describe, and runs until SIGINT or SIGTERM.
//
//	ec2fake --instance-type t3.medium --secondary-ips 5 --describe /tmp/ec2.json --env-file /tmp/ec2.env
//
// Several nodes in one world (one account, VPC and subnets, so their
// addresses never collide), on a simulated VPC (package vpcfabric): one
// --instance per node, each with its node's network namespace. Each gets a
// listener inside that namespace serving its own IMDS and the EC2 API on
// one URL (the env file exports it for the SDK); the ENIs attached to it
// get their links there (ens<5+device>, a veth whose other end is in the
// router; the primary one configured as DHCP would: address, MTU 9001,
// default via the subnet's gateway), as the fake attaches them. The
// namespaces are the caller's; run as root:
//
//	ip netns add vpc; ip netns add inet; ip netns add node1; ip netns add node2
//	ec2fake --vpc-cidr 10.96.0.0/16 --subnet-cidr 10.96.0.0/20 --instance-type t3.medium \
//	    --instance id=i-0000000000000a001,ip=10.96.0.10,netns=/run/netns/node1,env-file=/tmp/node1.env \
//	    --instance id=i-0000000000000a002,type=m5.large,ip=10.96.0.11,netns=/run/netns/node2,env-file=/tmp/node2.env \
//	    --router-netns /run/netns/vpc --internet-netns /run/netns/inet --describe /tmp/world.json
//
// --instance takes comma-separated keys: id, type (default --instance-type),
// ip (primary address; default the subnet's lowest free), subnet (subnet id),
// az, netns (path; required with --router-netns), listen (loopback address
// in that namespace, default 127.0.0.1:0), env-file. The first --instance is
// the world's first instance (the one --listen also serves); --secondary-ips,
// --prefixes and --extra-enis seed every instance.
//
// The describe file then also has "instances" (id, type, primaryIp, netns,
// url, envFile) and "fabric": router, internet, internetHost (198.51.100.10,
// an address on the internet), counters (per ENI: port, dropped by the
// source/destination check; internet: sent toward the internet from an
// address without a public mapping, i.e. not an instance's primary) and
// dropped, their sum, which stays 0 on a healthy cluster. It is rewritten
// after every EC2 call and every second.
//
// --subnet-ipv6-cidr gives the subnets IPv6 /64s (positional, as
// --subnet-cidr lists them): ENIs there may then get IPv6 addresses and /80
// prefixes (AssignIpv6Addresses), and IMDS lists them.
//
// --throttling account throttles the EC2 API with the account's token
// buckets (ec2fake.AccountThrottling), shared by every instance, their
// sizes and refills multiplied by --throttling-size and
// --throttling-refill (a fleet of N nodes meets them shrunk by N/1000 as
// 1,000 nodes meet the account's); the describe file then also has
// "throttled", the calls refused by action.
//
// --faults FILE makes EC2 calls fail or hang while the fake runs, for as
// long as FILE says so (read before every call): a line
// "AssignPrivateIpAddresses InsufficientFreeAddressesInSubnet" fails that
// action with that error code, "CreateNetworkInterface hang" holds its calls
// until the line is gone, "*" names every action. Emptying or removing the
// file clears them: the held calls go on and the next calls succeed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/eni-cni/eni-cni/atomicfile"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/ec2fake/vpcfabric"
)

type options struct {
	listen, ec2Listen string
	cfg               ec2fake.Config
	vpcCIDRs, subnets string
	subnets6          string
	secondaryIPs      int
	prefixes          int
	extraENIs         int
	describe, envFile string
	latency           string
	linkDelay         time.Duration
	links, linksPeer  string
	instances         instanceList
	router, internet  string
	faults            string
	throttling        string
	throttleSize      float64
	throttleRefill    float64
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("ec2fake", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "loopback address for IMDS (and EC2 unless --ec2-listen)")
	fs.StringVar(&o.ec2Listen, "ec2-listen", "", "separate loopback address for the EC2 API")
	fs.StringVar(&o.cfg.InstanceType, "instance-type", "m5.large", "instance type (sets the ENI and address limits)")
	fs.StringVar(&o.cfg.InstanceID, "instance-id", "", "instance id (default i-0123456789abcdef0)")
	fs.StringVar(&o.cfg.AvailabilityZone, "az", "us-east-1a", "availability zone; the region is derived from it")
	fs.StringVar(&o.vpcCIDRs, "vpc-cidr", "10.0.0.0/16", "comma-separated VPC CIDRs")
	fs.StringVar(&o.subnets, "subnet-cidr", "10.0.0.0/20", "comma-separated subnet CIDRs; the first holds the primary ENI")
	fs.StringVar(&o.subnets6, "subnet-ipv6-cidr", "", "comma-separated IPv6 /64s of the subnets, in --subnet-cidr's order (an empty entry: that subnet has none); ENIs there may get IPv6 addresses and /80 prefixes")
	fs.StringVar(&o.cfg.PrimaryIP, "primary-ip", "", "primary ENI address (default: first usable in the subnet)")
	fs.DurationVar(&o.cfg.IMDSLag, "imds-lag", 0, "delay before EC2 changes appear in IMDS")
	fs.IntVar(&o.secondaryIPs, "secondary-ips", 0, "secondary addresses to pre-assign on the primary ENI")
	fs.IntVar(&o.prefixes, "prefixes", 0, "/28 prefixes to pre-delegate to the primary ENI")
	fs.IntVar(&o.extraENIs, "extra-enis", 0, "extra ENIs to pre-attach")
	fs.StringVar(&o.describe, "describe", "", "file kept up to date with the instance and its ENIs as JSON")
	fs.StringVar(&o.envFile, "env-file", "", "file to write shell exports pointing the AWS SDK at the fake")
	fs.StringVar(&o.latency, "latency", "none", "latency profile: none, or realistic (ec2fake.RealisticLatency: EC2 call times, ENI link delay, IMDS lag)")
	fs.DurationVar(&o.linkDelay, "link-delay", -1, "with --latency realistic: override the delay before an attached ENI's link appears")
	fs.StringVar(&o.links, "links", "", "play the hypervisor: give each ENI attached through the API a link here, named PREFIX<device> (veth with the ENI's MAC), after the link delay; removed on exit")
	fs.StringVar(&o.linksPeer, "links-peer-netns", "", "with --links: network namespace (path) for the veth peers")
	fs.Var(&o.instances, "instance", "an instance of the world (repeat for more; the first is the one --instance-type etc. describe): comma-separated id=, type=, ip=, subnet=, az=, netns= (its node's network namespace path), listen= (loopback address there, default 127.0.0.1:0), env-file=")
	fs.StringVar(&o.router, "router-netns", "", "run the VPC fabric: the router's network namespace (path); each --instance needs netns=")
	fs.StringVar(&o.internet, "internet-netns", "", "with --router-netns: the internet's network namespace (path), behind the router")
	fs.StringVar(&o.faults, "faults", "", "file read before every EC2 call, edited while the fake runs: each line ACTION CODE makes that action (or * for all) fail with the EC2 error CODE, ACTION hang holds its calls until the line is gone; empty or absent: no fault")
	fs.StringVar(&o.throttling, "throttling", "none", "EC2 API throttling: none, or account (ec2fake.AccountThrottling: the account's documented token buckets, shared by every instance; throttled calls counted per action in --describe)")
	fs.Float64Var(&o.throttleSize, "throttling-size", 1, "with --throttling account: multiply every bucket's size by this (at least one token)")
	fs.Float64Var(&o.throttleRefill, "throttling-refill", 1, "with --throttling account: multiply every bucket's refill rate by this")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	switch o.latency {
	case "none":
	case "realistic":
		lat := ec2fake.RealisticLatency()
		if o.linkDelay >= 0 {
			lat.LinkDelay = o.linkDelay
		}
		o.cfg.Latency = &lat
	default:
		return nil, fmt.Errorf("--latency %q: want none or realistic", o.latency)
	}
	switch o.throttling {
	case "none":
	case "account":
		th := ec2fake.AccountThrottling().Shrunk(o.throttleSize, o.throttleRefill)
		o.cfg.Throttling = &th
	default:
		return nil, fmt.Errorf("--throttling %q: want none or account", o.throttling)
	}
	if (o.links == "") != (o.linksPeer == "") || len(o.links) > 12 {
		return nil, fmt.Errorf("--links (a prefix of at most 12 characters) and --links-peer-netns go together")
	}
	if err := o.checkWorld(); err != nil {
		return nil, err
	}
	o.cfg.VPCCIDRs = splitList(o.vpcCIDRs)
	for _, c := range splitList(o.subnets) {
		o.cfg.Subnets = append(o.cfg.Subnets, ec2fake.SubnetConfig{CIDR: c})
	}
	if o.subnets6 != "" {
		// Positional, not splitList: an empty entry keeps a subnet without IPv6.
		v6 := strings.Split(o.subnets6, ",")
		if len(v6) > len(o.cfg.Subnets) {
			return nil, fmt.Errorf("--subnet-ipv6-cidr: %d blocks for %d subnets", len(v6), len(o.cfg.Subnets))
		}
		for i, c := range v6 {
			o.cfg.Subnets[i].IPv6CIDR = strings.TrimSpace(c)
		}
	}
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// seed pre-populates an instance's EC2 state as asked on the command line.
func seed(srv *ec2fake.Server, in *ec2fake.Instance, o *options) error {
	primary := in.PrimaryENI().ID
	if o.secondaryIPs > 0 {
		if _, err := srv.SeedIPs(primary, o.secondaryIPs); err != nil {
			return err
		}
	}
	if o.prefixes > 0 {
		if _, err := srv.SeedPrefixes(primary, o.prefixes); err != nil {
			return err
		}
	}
	for range o.extraENIs {
		if _, err := in.SeedENI(ec2fake.ENISpec{DeleteOnTermination: true}); err != nil {
			return err
		}
	}
	return nil
}

// description is the --describe file's content.
type description struct {
	IMDSURL   string             `json:"imdsURL"`
	EC2URL    string             `json:"ec2URL"`
	Info      ec2fake.Info       `json:"instance"`
	Instances []nodeInfo         `json:"instances,omitempty"`
	ENIs      []ec2fake.ENI      `json:"enis"`
	Calls     map[string]int     `json:"calls"`
	Throttled map[string]int     `json:"throttled,omitempty"` // of Calls, those refused for an empty bucket
	Fabric    *fabricDescription `json:"fabric,omitempty"`
	Updated   time.Time          `json:"updated"`
}

// fabricDescription is the VPC fabric's part: where it is and what it
// dropped (Dropped, the sum, stays 0 on a healthy cluster).
type fabricDescription struct {
	Router       string             `json:"router"`
	Internet     string             `json:"internet,omitempty"`
	InternetHost string             `json:"internetHost,omitempty"`
	Dropped      int                `json:"dropped"`
	Counters     vpcfabric.Counters `json:"counters"`
	Error        string             `json:"error,omitempty"`
}

// writeFileAtomic replaces path so readers never see a partial file.
func writeFileAtomic(path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// describer keeps the --describe file up to date.
type describer struct {
	srv    *ec2fake.Server
	o      *options
	w      *world // nil until launched
	stderr io.Writer
}

func (d *describer) write() error {
	desc := description{
		IMDSURL: d.srv.IMDSURL(), EC2URL: d.srv.EC2URL(), Info: d.srv.Info(), ENIs: d.srv.ENIs(),
		Calls: d.srv.Calls(), Throttled: d.srv.Throttled(), Updated: time.Now().UTC(),
	}
	if d.w != nil {
		desc.Instances = d.w.nodes
		if d.w.fabric != nil {
			fd := &fabricDescription{Router: d.o.router, Internet: d.o.internet}
			if d.o.internet != "" {
				fd.InternetHost = vpcfabric.InternetHost
			}
			c, err := d.w.fabric.Counters()
			if err == nil {
				err = d.w.fabric.Err()
			}
			if err != nil {
				fd.Error = err.Error()
			}
			fd.Counters, fd.Dropped = c, c.Dropped()
			desc.Fabric = fd
		}
	}
	b, err := json.MarshalIndent(desc, "", "  ")
	if err != nil {
		return fmt.Errorf("encode description: %w", err)
	}
	return writeFileAtomic(d.o.describe, append(b, '\n'))
}

// wrap makes a handler rewrite the description after every EC2 call.
func (d *describer) wrap(next http.Handler) http.Handler {
	if d.o.describe == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if strings.HasPrefix(r.URL.Path, "/latest") {
			return
		}
		if err := d.write(); err != nil {
			fmt.Fprintf(d.stderr, "ec2fake: %v\n", err)
		}
	})
}

// refresh rewrites the description every second until ctx ends: the
// fabric's counters change with packets, not with calls.
func (d *describer) refresh(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := d.write(); err != nil {
				fmt.Fprintf(d.stderr, "ec2fake: %v\n", err)
			}
		}
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	srv, err := ec2fake.New(o.cfg)
	if err != nil {
		return err
	}
	if len(o.instances) == 0 {
		if err := seed(srv, srv.Instances()[0], o); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	if o.links != "" {
		hv, err := newHypervisor(o.links, o.linksPeer, stderr)
		if err != nil {
			return err
		}
		defer hv.close()
		srv.OnLink(hv.attach)
	}
	d := &describer{srv: srv, o: o, stderr: stderr}
	wrap := d.wrap
	if o.faults != "" {
		ff := newFaultFile(o.faults, srv, stderr)
		wrap = func(h http.Handler) http.Handler { return d.wrap(ff.wrap(h)) }
	}
	if err := serve(srv, o, wrap); err != nil {
		return err
	}
	defer srv.Close()
	w, err := launch(srv, o, wrap, stderr)
	if w != nil && w.fabric != nil {
		defer w.fabric.Close()
	}
	if err != nil {
		return err
	}
	d.w = w
	if o.describe != "" {
		if err := d.write(); err != nil {
			return err
		}
		if w.fabric != nil {
			go d.refresh(ctx)
		}
	}
	if o.envFile != "" {
		env := "export " + strings.Join(srv.Env(), "\nexport ") + "\n"
		if err := writeFileAtomic(o.envFile, []byte(env)); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "%s\n%s\n", srv.IMDSURL(), srv.EC2URL())
	<-ctx.Done()
	return nil
}

// serve starts the world's listeners (the first instance's IMDS and the
// EC2 API) in this process's namespace, through wrap (--describe
// refreshes the description file after each call, --faults applies before).
func serve(srv *ec2fake.Server, o *options, wrap func(http.Handler) http.Handler) error {
	if o.ec2Listen == "" {
		return srv.StartHandlers(o.listen, wrap(srv), "", nil)
	}
	return srv.StartHandlers(o.listen, srv.IMDSHandler(), o.ec2Listen, wrap(srv.EC2Handler()))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "ec2fake: %v\n", err)
		os.Exit(1)
	}
}
