//go:build !lean

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"

	"github.com/eni-cni/eni-cni/doctor"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/gc/cri"
)

func cmdDoctorCLI(args []string, stdout, stderr io.Writer) error {
	f := newFlags("doctor", stderr)
	asJSON := f.fs.Bool("json", false, "print the results as JSON")
	endpoint := f.fs.String("cri-endpoint", "", "CRI socket (default: as gc finds it)")
	root := f.fs.String("root", "/", "root of the files checked (systemd, udev, NetworkManager, kubelet, cron)")
	proc := f.fs.String("proc", "/proc", "procfs of the network namespace checked (sysctls) and of the processes (kubelet)")
	if err := f.parse(args); err != nil {
		return err
	}
	var results []doctor.Result
	p, path, err := f.load()
	if err != nil {
		results = []doctor.Result{{Name: "config", Status: doctor.Fail, Message: err.Error(),
			Fix: "fix the file, or point --config at the conflist with the eni-cni plugin"}}
	} else {
		results = append([]doctor.Result{{Name: "config", Status: doctor.OK,
			Message: fmt.Sprintf("%s: network %q, %s pool, state in %s", path, p.cfg.Network, p.cfg.Source, p.cfg.StateDir)}},
			doctor.Run(context.Background(), doctorEnv(p, *root, *proc, *endpoint))...)
	}
	if *asJSON {
		if err := printJSON(stdout, results); err != nil {
			return err
		}
	} else {
		doctor.Print(stdout, results)
	}
	if doctor.Failed(results) {
		return errReported{fmt.Errorf("doctor: problems found")}
	}
	return nil
}

// doctorEnv wires the checks to this node.
func doctorEnv(p *plugin, root, proc, criEndpoint string) *doctor.Env {
	cfg := p.cfg
	e := &doctor.Env{
		Root: root, ProcRoot: proc, Now: time.Now(),
		Network: cfg.Network, Source: cfg.Source, StateDir: cfg.StateDir, VethPrefix: cfg.VethPrefix,
		Store: p.mgr.Store, Pool: cfg.Pool, Warm: cfg.Warm,
		IMDSEndpoint: cfg.IMDSEndpoint,
		Host:         hostNetwork{cfg.VethPrefix},
	}
	e.EC2 = func(region string) (doctor.EC2API, error) {
		return ec2.NewAPI(cfg.EC2Endpoint, region, ec2.NewQuickMetadataClient(cfg.IMDSEndpoint, imdsOptions(cfg)...)), nil
	}
	e.CRI = func() (doctor.CRI, string, error) {
		ep, err := cri.ResolveEndpoint(criEndpoint, cri.Lookup{})
		if err != nil {
			return nil, "", err
		}
		c, err := cri.NewClient(ep, 5*time.Second)
		if err != nil {
			return nil, ep.String(), err
		}
		return c, ep.String(), nil
	}
	e.Links = func() ([]doctor.Link, error) {
		links, err := netlink.LinkList()
		if err != nil {
			return nil, err
		}
		out := make([]doctor.Link, 0, len(links))
		for _, l := range links {
			out = append(out, doctor.Link{Name: l.Attrs().Name, MAC: l.Attrs().HardwareAddr.String()})
		}
		return out, nil
	}
	if ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4); err == nil {
		e.Forward = func() ([]string, error) { return ipt.List("filter", "FORWARD") }
	}
	if fi, err := os.Stat("/run/systemd/system"); err == nil && fi.IsDir() && root == "/" {
		e.UnitActive = func(unit string) bool {
			return exec.Command("systemctl", "is-active", "--quiet", unit).Run() == nil
		}
	}
	return e
}
