// Command ec2fake runs the fake IMDS + EC2 server of package ec2fake for
// demos and end-to-end scripts. It listens on loopback only, prints the IMDS
// URL and the EC2 URL (one per line, identical unless --ec2-listen is given)
// on stdout, keeps a JSON description of the instance and its ENIs up to date
// in --describe, and runs until SIGINT or SIGTERM.
//
//	ec2fake --instance-type t3.medium --secondary-ips 5 --describe /tmp/ec2.json --env-file /tmp/ec2.env
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
)

type options struct {
	listen, ec2Listen string
	cfg               ec2fake.Config
	vpcCIDRs, subnets string
	secondaryIPs      int
	prefixes          int
	extraENIs         int
	describe, envFile string
	latency           string
	linkDelay         time.Duration
	links, linksPeer  string
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
	if (o.links == "") != (o.linksPeer == "") || len(o.links) > 12 {
		return nil, fmt.Errorf("--links (a prefix of at most 12 characters) and --links-peer-netns go together")
	}
	o.cfg.VPCCIDRs = splitList(o.vpcCIDRs)
	for _, c := range splitList(o.subnets) {
		o.cfg.Subnets = append(o.cfg.Subnets, ec2fake.SubnetConfig{CIDR: c})
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

// seed pre-populates EC2 state as asked on the command line.
func seed(srv *ec2fake.Server, o *options) error {
	primary := srv.PrimaryENI().ID
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
		if _, err := srv.SeedENI(ec2fake.ENISpec{DeleteOnTermination: true}); err != nil {
			return err
		}
	}
	return nil
}

// description is the --describe file's content.
type description struct {
	IMDSURL string         `json:"imdsURL"`
	EC2URL  string         `json:"ec2URL"`
	Info    ec2fake.Info   `json:"instance"`
	ENIs    []ec2fake.ENI  `json:"enis"`
	Calls   map[string]int `json:"calls"`
	Updated time.Time      `json:"updated"`
}

// writeFileAtomic replaces path so readers never see a partial file.
func writeFileAtomic(path string, data []byte) error {
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func writeDescription(srv *ec2fake.Server, path string) error {
	d := description{
		IMDSURL: srv.IMDSURL(), EC2URL: srv.EC2URL(), Info: srv.Info(), ENIs: srv.ENIs(),
		Calls: srv.Calls(), Updated: time.Now().UTC(),
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Errorf("encode description: %w", err)
	}
	return writeFileAtomic(path, append(b, '\n'))
}

// describing wraps the EC2 handler so the description is rewritten after
// every EC2 call.
func describing(srv *ec2fake.Server, next http.Handler, path string, stderr io.Writer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if strings.HasPrefix(r.URL.Path, "/latest") {
			return
		}
		if err := writeDescription(srv, path); err != nil {
			fmt.Fprintf(stderr, "ec2fake: %v\n", err)
		}
	})
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
	if err := seed(srv, o); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if o.links != "" {
		hv, err := newHypervisor(o.links, o.linksPeer, stderr)
		if err != nil {
			return err
		}
		defer hv.close()
		srv.OnLink(hv.attach)
	}
	if err := serve(srv, o, stderr); err != nil {
		return err
	}
	defer srv.Close()
	if o.describe != "" {
		if err := writeDescription(srv, o.describe); err != nil {
			return err
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

// serve starts the listeners; with --describe it serves through handlers
// that refresh the description file.
func serve(srv *ec2fake.Server, o *options, stderr io.Writer) error {
	if o.describe == "" {
		return srv.StartAt(o.listen, o.ec2Listen)
	}
	h := describing(srv, srv, o.describe, stderr)
	if o.ec2Listen == "" {
		return srv.StartHandlers(o.listen, h, "", nil)
	}
	return srv.StartHandlers(o.listen, srv.IMDSHandler(), o.ec2Listen, describing(srv, srv.EC2Handler(), o.describe, stderr))
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
