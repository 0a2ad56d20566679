//go:build !lean && !ec2build

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/eni-cni/eni-cni/cmdline"
	"github.com/eni-cni/eni-cni/doctor"
	"github.com/eni-cni/eni-cni/plugin"
)

func cmdDoctor(args []string, stdout, stderr io.Writer) error {
	f := newFlags("doctor", stderr)
	asJSON := f.FS.Bool("json", false, "print the results as JSON")
	endpoint := f.FS.String("cri-endpoint", "", "CRI socket (default: as gc finds it)")
	root := f.FS.String("root", "/", "root of the files checked (systemd, udev, NetworkManager, kubelet, cron)")
	proc := f.FS.String("proc", "/proc", "procfs of the network namespace checked (sysctls) and of the processes (kubelet)")
	if err := f.Parse(args); err != nil {
		return err
	}
	var results []doctor.Result
	p, path, err := f.load()
	if err != nil {
		results = append([]doctor.Result{doctor.NoConfig(err)},
			doctor.Run(context.Background(), doctor.NodeEnvWithoutConfig(*root, *proc, *endpoint))...)
	} else {
		results = append([]doctor.Result{{Name: "config", Status: doctor.OK,
			Message: fmt.Sprintf("%s: network %q, %s pool, state in %s", path, p.Cfg.Network, p.Cfg.Provider, p.Cfg.StateDir)}},
			doctor.Run(context.Background(), doctor.NodeEnv(p.Cfg, p.Mgr.Store, plugin.HostNetwork{Prefix: p.Cfg.VethPrefix}, *root, *proc, *endpoint))...)
	}
	if *asJSON {
		if err := cmdline.PrintJSON(stdout, results); err != nil {
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
