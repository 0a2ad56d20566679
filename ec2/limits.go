package ec2

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/eni-cni/eni-cni/atomicfile"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/lockfile"
)

//go:generate go run ../scripts/genlimits -src $VPC_CNI/pkg/vpc/vpc_ip_resource_limit.go -rev $VPC_CNI_REV -out limits_table.go

// TypesAPI is the EC2 call that describes instance types.
type TypesAPI interface {
	DescribeInstanceTypes(context.Context, *ec2.DescribeInstanceTypesInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
}

// DescribeLimits asks EC2 for the limits of instanceType.
func DescribeLimits(ctx context.Context, api TypesAPI, instanceType string) (*section.Limits, error) {
	out, err := api.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{
		InstanceTypes: []types.InstanceType{types.InstanceType(instanceType)},
	})
	if err != nil {
		return nil, fmt.Errorf("describe instance type %s: %w", instanceType, err)
	}
	if len(out.InstanceTypes) != 1 {
		return nil, fmt.Errorf("describe instance type %s: %d types in the reply", instanceType, len(out.InstanceTypes))
	}
	lim, err := LimitsOf(out.InstanceTypes[0])
	if err != nil {
		return nil, fmt.Errorf("describe instance type %s: %w", instanceType, err)
	}
	return lim, nil
}

// LimitsOf reads the limits that matter to pods from an instance type's
// description. warm attaches ENIs on the default network card only, so on
// multi-card types (p5.48xlarge: 64 ENIs over 32 cards, 2 on card 0) its
// own limit is MaxENIs, not the type's total; every card is in Cards.
func LimitsOf(it types.InstanceTypeInfo) (*section.Limits, error) {
	ni := it.NetworkInfo
	if ni == nil {
		return nil, fmt.Errorf("no network info in the reply")
	}
	lim := &section.Limits{MaxENIs: int(aws.ToInt32(ni.MaximumNetworkInterfaces)), IPv4PerENI: int(aws.ToInt32(ni.Ipv4AddressesPerInterface))}
	card := aws.ToInt32(ni.DefaultNetworkCardIndex)
	for _, c := range ni.NetworkCards {
		if aws.ToInt32(c.NetworkCardIndex) == card && aws.ToInt32(c.MaximumNetworkInterfaces) > 0 {
			lim.MaxENIs = int(aws.ToInt32(c.MaximumNetworkInterfaces))
		}
	}
	if len(ni.NetworkCards) > 1 {
		for _, c := range ni.NetworkCards {
			lim.Cards = append(lim.Cards, section.CardLimit{Index: int(aws.ToInt32(c.NetworkCardIndex)), MaxENIs: int(aws.ToInt32(c.MaximumNetworkInterfaces))})
		}
	}
	if it.VCpuInfo != nil {
		lim.VCPUs = int(aws.ToInt32(it.VCpuInfo.DefaultVCpus))
	}
	if lim.MaxENIs < 1 || lim.IPv4PerENI < 2 {
		return nil, fmt.Errorf("implausible limits %+v", *lim)
	}
	return lim, nil
}

// BuiltinLimits are the limits of instanceType from the built-in table
// (limits_table.go, generated from the AWS VPC CNI's table), without the
// vCPU count, which the table lacks (0: unknown). ok is false for a type
// the table does not know.
func BuiltinLimits(instanceType string) (lim *section.Limits, ok bool) {
	i := strings.Index(instanceTypeTable, "\n"+instanceType+" ")
	if instanceType == "" || i < 0 {
		return nil, false
	}
	line := instanceTypeTable[i+1:]
	line = line[:strings.IndexByte(line, '\n')]
	f := strings.Fields(line)
	if len(f) < 3 {
		return nil, false
	}
	lim = &section.Limits{}
	var err error
	if lim.MaxENIs, err = strconv.Atoi(f[1]); err != nil {
		return nil, false
	}
	if lim.IPv4PerENI, err = strconv.Atoi(f[2]); err != nil {
		return nil, false
	}
	if len(f) > 3 {
		for _, c := range strings.Split(f[3], ",") {
			idx, enis, _ := strings.Cut(c, ":")
			var card section.CardLimit
			if card.Index, err = strconv.Atoi(idx); err != nil {
				return nil, false
			}
			if card.MaxENIs, err = strconv.Atoi(enis); err != nil {
				return nil, false
			}
			lim.Cards = append(lim.Cards, card)
		}
	}
	return lim, plausible(lim)
}

func plausible(lim *section.Limits) bool { return lim.MaxENIs >= 1 && lim.IPv4PerENI >= 2 }

// LimitsCacheName is the file of the state directory in which warm keeps
// what DescribeInstanceTypes said of a type the built-in table does not
// know, so that a node asks EC2 once, not once per store.
const LimitsCacheName = "instance-type.json"

// cachedLimits is LimitsCacheName's content.
type cachedLimits struct {
	InstanceType string         `json:"instanceType"`
	Limits       section.Limits `json:"limits"`
}

// readLimitsCache returns the limits of instanceType the cache at path
// holds. A file that is not root's own (lockfile's checks: not a symlink,
// not writable by others), does not decode, is of another type or holds
// implausible limits is no answer: warm asks EC2 and writes it again.
func readLimitsCache(path, instanceType string) (*section.Limits, bool) {
	f, err := lockfile.Open(path, os.O_RDONLY)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	var c cachedLimits
	dec := json.NewDecoder(io.LimitReader(f, 64<<10))
	dec.DisallowUnknownFields()
	if dec.Decode(&c) != nil || c.InstanceType != instanceType || !plausible(&c.Limits) {
		return nil, false
	}
	return &c.Limits, true
}

// writeLimitsCache replaces the cache at path whole (atomicfile).
func writeLimitsCache(path, instanceType string, lim *section.Limits) error {
	data, err := json.Marshal(cachedLimits{InstanceType: instanceType, Limits: *lim})
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("cache limits of %s in %s: %w", instanceType, path, err)
	}
	return nil
}

// limitsOf finds the limits of the node's instance type: the built-in
// table, else the node's cache (LimitsFile), else EC2, whose answer is
// then cached. from says which.
func (w *Warmer) limitsOf(ctx context.Context, instanceType string) (lim *section.Limits, from string, err error) {
	if lim, ok := BuiltinLimits(instanceType); ok {
		return lim, "the built-in table", nil
	}
	if w.LimitsFile != "" {
		if lim, ok := readLimitsCache(w.LimitsFile, instanceType); ok {
			return lim, w.LimitsFile, nil
		}
	}
	if lim, err = DescribeLimits(ctx, w.API, instanceType); err != nil {
		return nil, "", err
	}
	if w.LimitsFile != "" {
		if err := writeLimitsCache(w.LimitsFile, instanceType, lim); err != nil {
			w.warn("%v", err) // the next store asks EC2 again; nothing else is lost
		}
	}
	return lim, "EC2", nil
}
