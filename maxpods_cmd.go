//go:build !lean

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/pool"
)

// maxPodsReport is what `eni-cni max-pods --json` prints.
type maxPodsReport struct {
	InstanceType     string `json:"instanceType"`
	MaxENIs          int    `json:"maxENIs"`    // the type's (default card's) limit
	IPv4PerENI       int    `json:"ipv4PerENI"` // slots per ENI, its primary address included
	VCPUs            int    `json:"vcpus"`
	ConfigMaxENIs    int    `json:"configMaxENIs,omitempty"`
	PrefixDelegation bool   `json:"prefixDelegation"`
	PodAddresses     int    `json:"podAddresses"`
	MaxAllowed       int    `json:"maxAllowed"` // addresses + 2 host-network pods
	MaxPods          int    `json:"maxPods"`    // the recommendation: MaxAllowed capped at 110/250
	LimitsFrom       string `json:"limitsFrom"` // "store" or "ec2"
}

// maxPodsDeps are where max-pods gets what it does not know: the store's
// cached limits, IMDS for the instance type and region, and EC2.
type maxPodsDeps struct {
	store  alloc.Store // nil without a config
	md     ec2.Metadata
	newAPI func(region string) ec2.TypesAPI
	region string // --region: wins over the environment, the store and IMDS
}

// maxPodsFor computes the report for instanceType ("" for this node's).
// This node's type uses the limits the store cached (warm fetched them)
// when they include the vCPU count, so it makes no EC2 call.
func maxPodsFor(ctx context.Context, d maxPodsDeps, w pool.WarmConfig, instanceType string) (maxPodsReport, error) {
	r := maxPodsReport{InstanceType: instanceType, PrefixDelegation: w.PrefixDelegation, ConfigMaxENIs: w.MaxENIs}
	var src *pool.EC2
	if d.store != nil {
		st, err := d.store.Load()
		if err != nil {
			return r, err
		}
		src = st.EC2
	}
	var lim *pool.Limits
	if src != nil && src.Limits != nil && src.Limits.VCPUs > 0 && (instanceType == "" || instanceType == src.InstanceType) {
		r.InstanceType, lim, r.LimitsFrom = src.InstanceType, src.Limits, "store"
	} else {
		region, err := maxPodsRegion(ctx, d, src, &r)
		if err != nil {
			return r, err
		}
		if lim, err = ec2.DescribeLimits(ctx, d.newAPI(region), r.InstanceType); err != nil {
			return r, err
		}
		r.LimitsFrom = "ec2"
	}
	r.MaxENIs, r.IPv4PerENI, r.VCPUs = lim.MaxENIs, lim.IPv4PerENI, lim.VCPUs
	r.PodAddresses = pool.PodAddresses(*lim, w.PrefixDelegation, w.MaxENIs)
	r.MaxAllowed = pool.MaxAllowedPods(*lim, w.PrefixDelegation, w.MaxENIs)
	r.MaxPods = pool.MaxPods(*lim, w.PrefixDelegation, w.MaxENIs)
	return r, nil
}

// maxPodsRegion finds the region for DescribeInstanceTypes (the
// environment, the store, else IMDS) and fills in the instance type when
// none was given.
func maxPodsRegion(ctx context.Context, d maxPodsDeps, src *pool.EC2, r *maxPodsReport) (string, error) {
	region := d.region
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	if region == "" {
		region = os.Getenv("AWS_DEFAULT_REGION")
	}
	if src != nil && src.InstanceType != "" {
		if region == "" {
			region = src.Region
		}
		if r.InstanceType == "" {
			r.InstanceType = src.InstanceType
		}
	}
	if region != "" && r.InstanceType != "" {
		return region, nil
	}
	inst, err := ec2.Discover(ctx, d.md)
	if err != nil {
		return "", fmt.Errorf("find this node's instance type and region: %w", err)
	}
	if r.InstanceType == "" {
		r.InstanceType = inst.Type
	}
	if region == "" {
		region = inst.Region()
	}
	return region, nil
}

func cmdMaxPodsCLI(args []string, stdout, stderr io.Writer) error {
	f := newFlags("max-pods", stderr)
	instanceType := f.fs.String("instance-type", "", "instance type (default: this node's)")
	region := f.fs.String("region", "", "region for DescribeInstanceTypes (default: AWS_REGION, the store, else IMDS); with --instance-type and AWS credentials in the environment, IMDS is not read: usable off the node")
	asJSON := f.fs.Bool("json", false, "print the calculation as JSON")
	showMax := f.fs.Bool("show-max-allowed", false, "print the most pods the node can hold, without the 110/250 cap")
	if err := f.parse(args); err != nil {
		return err
	}
	cfg, err := optionalConfig(f)
	if err != nil {
		return err
	}
	d := maxPodsDeps{md: ec2.NewMetadataClient(cfg.IMDSEndpoint, imdsOptions(cfg)...), region: *region}
	d.newAPI = func(region string) ec2.TypesAPI {
		return ec2.NewAPI(cfg.EC2Endpoint, region, ec2.NewMetadataClient(cfg.IMDSEndpoint, imdsOptions(cfg)...))
	}
	if cfg.StateDir != "" {
		if d.store, err = alloc.NewDiskStore(cfg.StateDir); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := maxPodsFor(ctx, d, cfg.Warm, *instanceType)
	if err != nil {
		return fmt.Errorf("max-pods: %w", explainIMDS(err, cfg))
	}
	switch {
	case *asJSON:
		return printJSON(stdout, r)
	case *showMax:
		fmt.Fprintln(stdout, r.MaxAllowed)
	default:
		fmt.Fprintln(stdout, r.MaxPods)
	}
	return nil
}

// optionalConfig loads the config when there is one: max-pods works on a
// node without eni-cni configured yet (defaults: no prefix delegation, every
// ENI), but a config that exists and is broken is an error.
func optionalConfig(f *commonFlags) (*config, error) {
	data, path, err := findConfig(f.config, f.confDir)
	if err != nil {
		if f.config == "" && !errors.Is(err, errDecode) {
			c := &config{}
			return c, nil
		}
		return nil, err
	}
	cfg, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if cfg.Source != sourceEC2 {
		cfg.Warm.PrefixDelegation = false
	}
	return cfg, nil
}
