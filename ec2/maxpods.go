package ec2

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/netconf"
)

// MaxPodsReport is what `eni-cni max-pods --json` prints.
type MaxPodsReport struct {
	InstanceType     string `json:"instanceType"`
	MaxENIs          int    `json:"maxENIs"`    // the type's (default card's) limit
	IPv4PerENI       int    `json:"ipv4PerENI"` // slots per ENI, its primary address included
	VCPUs            int    `json:"vcpus"`
	ConfigMaxENIs    int    `json:"configMaxENIs,omitempty"`
	PrefixDelegation bool   `json:"prefixDelegation"`
	// CustomSubnets: pods live in subnets of their own and never get the
	// primary ENI's addresses, so it counts for none (the VPC CNI's
	// formula with custom networking).
	CustomSubnets bool `json:"customSubnets,omitempty"`
	// IPv6: pods get addresses of a /80 (ipFamilies ["ipv6"]); counted as
	// prefix delegation is. DualStack: pods get one of IPv4 too
	// (ipFamilies ["ipv4", "ipv6"]); counted as IPv4 is, the scarcer.
	IPv6         bool   `json:"ipv6,omitempty"`
	DualStack    bool   `json:"dualStack,omitempty"`
	PodAddresses int    `json:"podAddresses"`
	MaxAllowed   int    `json:"maxAllowed"` // addresses + 2 host-network pods
	MaxPods      int    `json:"maxPods"`    // the recommendation: MaxAllowed capped at 110/250
	LimitsFrom   string `json:"limitsFrom"` // "store" or "ec2"
}

// MaxPodsDeps are where max-pods gets what it does not know: the store's
// cached limits, IMDS for the instance type and region, and EC2.
type MaxPodsDeps struct {
	Store  alloc.Store // nil without a config
	MD     Metadata
	NewAPI func(region string) TypesAPI
	Region string // --region: wins over the environment, the store and IMDS
}

// MaxPodsFor computes the report for instanceType ("" for this node's).
// This node's type uses the limits the store cached (warm fetched them)
// when they include the vCPU count, so it makes no EC2 call.
func MaxPodsFor(ctx context.Context, d MaxPodsDeps, w section.WarmConfig, instanceType string) (MaxPodsReport, error) {
	r := MaxPodsReport{InstanceType: instanceType, PrefixDelegation: w.PrefixDelegation, ConfigMaxENIs: w.MaxENIs, CustomSubnets: w.CustomSubnets(), IPv6: w.IPv6Only(), DualStack: w.DualStack}
	var src *section.EC2
	if d.Store != nil {
		st, err := d.Store.Load()
		if err != nil {
			return r, err
		}
		src = st.EC2
	}
	var lim *section.Limits
	if src != nil && src.Limits != nil && src.Limits.VCPUs > 0 && (instanceType == "" || instanceType == src.InstanceType) {
		r.InstanceType, lim, r.LimitsFrom = src.InstanceType, src.Limits, "store"
	} else {
		region, err := maxPodsRegion(ctx, d, src, &r)
		if err != nil {
			return r, err
		}
		if lim, err = DescribeLimits(ctx, d.NewAPI(region), r.InstanceType); err != nil {
			return r, err
		}
		r.LimitsFrom = "ec2"
	}
	r.MaxENIs, r.IPv4PerENI, r.VCPUs = lim.MaxENIs, lim.IPv4PerENI, lim.VCPUs
	r.PodAddresses = section.PodAddressesOf(*lim, w)
	r.MaxAllowed = section.MaxAllowedPodsOf(*lim, w)
	r.MaxPods = section.MaxPodsOf(*lim, w)
	return r, nil
}

// maxPodsRegion finds the region for DescribeInstanceTypes (the
// environment, the store, else IMDS) and fills in the instance type when
// none was given.
func maxPodsRegion(ctx context.Context, d MaxPodsDeps, src *section.EC2, r *MaxPodsReport) (string, error) {
	region := d.Region
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
	inst, err := Discover(ctx, d.MD)
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

// MaxPodsConfig loads the config of max-pods (path, else the first eni-cni
// conflist in dir) when there is one: max-pods works on a node without
// eni-cni configured yet (defaults: no prefix delegation, every ENI), but
// a config that exists and is broken is an error.
func MaxPodsConfig(path, dir string) (*netconf.Config, error) {
	data, found, err := netconf.Find(path, dir)
	if err != nil {
		if path == "" && !errors.Is(err, netconf.ErrDecode) {
			return &netconf.Config{}, nil
		}
		return nil, err
	}
	cfg, err := netconf.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", found, err)
	}
	if cfg.Provider != netconf.EC2 {
		cfg.Warm.PrefixDelegation = false
	}
	return cfg, nil
}
