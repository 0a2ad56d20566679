package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/ec2fake/vpcfabric"
)

// nodeSpec is one --instance: an instance of the world and where it runs.
type nodeSpec struct {
	cfg     ec2fake.InstanceConfig
	netns   string // node network namespace (path): its listener and, with a fabric, its ENI links
	listen  string // loopback address in that namespace for its IMDS + EC2 listener
	envFile string
}

// parseInstance reads id=..,type=..,ip=..,subnet=..,az=..,netns=..,listen=..,env-file=..
func parseInstance(v string) (nodeSpec, error) {
	n := nodeSpec{listen: "127.0.0.1:0"}
	for _, kv := range splitList(v) {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || val == "" {
			return n, fmt.Errorf("--instance %q: want key=value pairs, got %q", v, kv)
		}
		switch k {
		case "id":
			n.cfg.ID = val
		case "type":
			n.cfg.Type = val
		case "ip":
			n.cfg.PrimaryIP = val
		case "subnet":
			n.cfg.SubnetID = val
		case "az":
			n.cfg.AvailabilityZone = val
		case "netns":
			n.netns = val
		case "listen":
			n.listen = val
		case "env-file":
			n.envFile = val
		default:
			return n, fmt.Errorf("--instance %q: unknown key %q (id, type, ip, subnet, az, netns, listen, env-file)", v, k)
		}
	}
	return n, nil
}

// instanceList is the repeatable --instance flag.
type instanceList []nodeSpec

func (l *instanceList) String() string { return fmt.Sprintf("%d instances", len(*l)) }

func (l *instanceList) Set(v string) error {
	n, err := parseInstance(v)
	if err != nil {
		return err
	}
	*l = append(*l, n)
	return nil
}

// checkWorld validates the multi-instance flags and makes the first
// --instance the world's first instance.
func (o *options) checkWorld() error {
	if o.router == "" && o.internet != "" {
		return fmt.Errorf("--internet-netns needs --router-netns")
	}
	if o.router != "" && o.links != "" {
		return fmt.Errorf("--router-netns plays the hypervisor itself: drop --links")
	}
	for i, n := range o.instances {
		if o.router != "" && n.netns == "" {
			return fmt.Errorf("--instance %d: netns= is needed with --router-netns (where its links go)", i+1)
		}
	}
	if len(o.instances) > 0 {
		first := o.instances[0].cfg
		// The world's first instance lives in the first subnet (the first
		// --subnet-cidr), whose ID is generated: refuse instead of ignoring.
		if first.SubnetID != "" {
			return fmt.Errorf("--instance 1: subnet= cannot be given for the first instance: it lives in the first --subnet-cidr")
		}
		if first.ID != "" {
			o.cfg.InstanceID = first.ID
		}
		if first.Type != "" {
			o.cfg.InstanceType = first.Type
		}
		if first.PrimaryIP != "" {
			o.cfg.PrimaryIP = first.PrimaryIP
		}
		if first.AvailabilityZone != "" {
			o.cfg.AvailabilityZone = first.AvailabilityZone
		}
	}
	return nil
}

// nodeInfo is one instance in the --describe file.
type nodeInfo struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	PrimaryIP string `json:"primaryIp"`
	NetNS     string `json:"netns,omitempty"`
	URL       string `json:"url,omitempty"` // its IMDS and the EC2 API, inside NetNS
	EnvFile   string `json:"envFile,omitempty"`
}

// world is what --instance and the fabric flags started.
type world struct {
	nodes  []nodeInfo
	fabric *vpcfabric.Fabric
}

// launch adds the instances after the first, starts each one's listener
// in its namespace (IMDS and EC2 on one URL), writes its env file and, with
// a router, puts it on the fabric.
func launch(srv *ec2fake.Server, o *options, wrap func(http.Handler) http.Handler, stderr io.Writer) (*world, error) {
	w := &world{}
	if o.router != "" {
		f, err := vpcfabric.New(srv, vpcfabric.Config{Router: o.router, Internet: o.internet, Log: stderr})
		if err != nil {
			return nil, err
		}
		w.fabric = f
	}
	for i, n := range o.instances {
		in := srv.Instances()[0]
		if i > 0 {
			var err error
			if in, err = srv.AddInstance(n.cfg); err != nil {
				return w, fmt.Errorf("--instance %d: %w", i+1, err)
			}
		}
		if err := seed(srv, in, o); err != nil {
			return w, fmt.Errorf("seed %s: %w", in.ID(), err)
		}
		info, err := startNode(in, n, wrap)
		if err != nil {
			return w, err
		}
		w.nodes = append(w.nodes, info)
		if w.fabric != nil {
			if err := w.fabric.AddNode(in.ID(), n.netns); err != nil {
				return w, err
			}
		}
	}
	return w, nil
}

func startNode(in *ec2fake.Instance, n nodeSpec, wrap func(http.Handler) http.Handler) (nodeInfo, error) {
	info := nodeInfo{ID: in.ID(), Type: in.Info().InstanceType, PrimaryIP: in.PrimaryENI().PrimaryIP, NetNS: n.netns, EnvFile: n.envFile}
	listen := func() (err error) { info.URL, err = in.StartIMDSHandler(n.listen, wrap(in.Handler())); return err }
	var err error
	if n.netns == "" {
		err = listen()
	} else {
		// Loopback up: a fresh namespace has it down, and the listener
		// is on it.
		err = ns.WithNetNSPath(n.netns, func(ns.NetNS) error {
			if err := loUp(); err != nil {
				return err
			}
			return listen()
		})
	}
	if err != nil {
		return info, fmt.Errorf("listener of %s: %w", in.ID(), err)
	}
	if n.envFile != "" {
		env := in.EnvAt(info.URL)
		if err := writeFileAtomic(n.envFile, []byte("export "+strings.Join(env, "\nexport ")+"\n")); err != nil {
			return info, err
		}
	}
	return info, nil
}

func loUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	return netlink.LinkSetUp(lo)
}
