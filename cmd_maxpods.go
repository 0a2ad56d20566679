//go:build !lean

package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/cmdline"
	"github.com/eni-cni/eni-cni/ec2"
)

func cmdMaxPods(args []string, stdout, stderr io.Writer) error {
	f := newFlags("max-pods", stderr)
	instanceType := f.FS.String("instance-type", "", "instance type (default: this node's)")
	region := f.FS.String("region", "", "region for DescribeInstanceTypes (default: AWS_REGION, the store, else IMDS); with --instance-type and AWS credentials in the environment, IMDS is not read: usable off the node")
	asJSON := f.FS.Bool("json", false, "print the calculation as JSON")
	showMax := f.FS.Bool("show-max-allowed", false, "print the most pods the node can hold, without the 110/250 cap")
	if err := f.Parse(args); err != nil {
		return err
	}
	cfg, err := ec2.MaxPodsConfig(f.Config, f.ConfDir)
	if err != nil {
		return err
	}
	d := ec2.MaxPodsDeps{MD: ec2.NewMetadataClient(cfg.IMDSEndpoint, ec2.MetadataOptions(cfg)...), Region: *region}
	d.NewAPI = func(region string) ec2.TypesAPI {
		return ec2.NewAPI(cfg.EC2Endpoint, region, ec2.NewMetadataClient(cfg.IMDSEndpoint, ec2.MetadataOptions(cfg)...))
	}
	if cfg.StateDir != "" {
		if d.Store, err = alloc.NewDiskStore(cfg.StateDir); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := ec2.MaxPodsFor(ctx, d, cfg.Warm, *instanceType)
	if err != nil {
		return fmt.Errorf("max-pods: %w", ec2.ExplainIMDSOf(err, cfg))
	}
	if r.CustomSubnets && !*asJSON {
		// Said beside the number, not in it: the number is what
		// --max-pods=$(eni-cni max-pods) takes.
		fmt.Fprintf(stderr, "max-pods: custom subnets: the primary ENI's addresses are not for pods, so %d of the %d ENIs count\n", max(r.MaxENIs-1, 0), r.MaxENIs)
	}
	switch {
	case *asJSON:
		return cmdline.PrintJSON(stdout, r)
	case *showMax:
		fmt.Fprintln(stdout, r.MaxAllowed)
	default:
		fmt.Fprintln(stdout, r.MaxPods)
	}
	return nil
}
