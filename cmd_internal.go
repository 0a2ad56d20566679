//go:build !lean

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/plugin"
)

// cmdInternal serves the lean binary's delegations (package delegate): the
// plugin config on stdin, one JSON line of result on stdout.
func cmdInternal(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: internal needs one of imds-refresh, imds-check", errUsage)
	}
	data, err := io.ReadAll(io.LimitReader(stdin, 1<<20))
	if err != nil {
		return err
	}
	cfg, err := netconf.Parse(data)
	if err != nil {
		return err
	}
	p, err := plugin.Open(cfg, ec2.InProcess{})
	if err != nil {
		return err
	}
	// Shorter than the lean parent's deadline, so the parent gets our
	// message rather than a killed child.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	switch args[0] {
	case "imds-refresh":
		r, err := ec2.InProcess{}.RefreshIMDS(ctx, cfg, p.Mgr)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(r)
	case "imds-check":
		return ec2.InProcess{}.CheckIMDS(ctx, cfg)
	}
	return fmt.Errorf("%w: unknown internal command %q", errUsage, args[0])
}
