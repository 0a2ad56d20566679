// Package ec2 owns the node's view of AWS: discovery of the instance's ENIs
// and their addresses through IMDS, the pool those addresses form in the
// store, and the EC2 API calls of `eni-cni warm` that top the pool up and
// trim it. ADD reads the pool from the store and never calls EC2.
package ec2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// Metadata is the part of the IMDS client discovery uses.
type Metadata interface {
	GetMetadata(ctx context.Context, in *imds.GetMetadataInput, opts ...func(*imds.Options)) (*imds.GetMetadataOutput, error)
}

// ErrIMDS reports instance metadata that cannot be read or makes no sense.
var ErrIMDS = errors.New("instance metadata")

// Discover reads the instance and every attached ENI from IMDS.
func Discover(ctx context.Context, md Metadata) (*section.Instance, error) {
	return DiscoverKnowing(ctx, md, nil, "")
}

// DiscoverKnowing is Discover given the store's section, known (nil if
// none), read in boot bootID. When known was checked against IMDS in this
// boot, what cannot change within a boot is taken from it instead of read
// again: the instance's ID (the store is root's, and an instance change
// is a new boot: a volume moved, an image baked), type (changing it takes
// a stop), zone, region and primary MAC (the primary ENI never detaches),
// and of each ENI known by its MAC its ID, subnet and subnet CIDR (an ENI
// keeps them for life). A settled pass then reads 1 + 6 paths per ENI
// instead of 6 + 9. What drift is made of is read every time: which ENIs
// are attached, their device and card (a detach and attach between two
// passes changes them), addresses, prefixes, VPC CIDRs and security groups.
func DiscoverKnowing(ctx context.Context, md Metadata, known *section.EC2, bootID string) (*section.Instance, error) {
	r := reader{md: md}
	if known == nil || bootID == "" || known.VerifiedBoot != bootID || !validInstanceID(known.InstanceID) {
		known = nil
	}
	inst := &section.Instance{}
	if known != nil {
		inst.ID = known.InstanceID
	} else {
		inst.ID = r.get(ctx, "instance-id")
	}
	if r.err == nil && !validInstanceID(inst.ID) {
		// The ID decides whether the store is this instance's
		// (section.Identify drops it otherwise) and filters every EC2
		// read: an empty or garbled one (a proxy's page, a stub answering
		// 200) must not pass for another instance.
		return nil, fmt.Errorf("%w: instance-id %.40q is not an EC2 instance ID", ErrIMDS, inst.ID)
	}
	primary, ok := knownPrimary(known)
	if ok {
		inst.Type, inst.AZ, inst.RegionName, inst.PrimaryMAC = known.InstanceType, known.AZ, known.Region, primary.MAC
	} else {
		inst.Type = r.get(ctx, "instance-type")
		inst.AZ = r.get(ctx, "placement/availability-zone")
		inst.PrimaryMAC = r.get(ctx, "mac")
		if region := r.optionalList(ctx, "placement/region"); len(region) == 1 {
			inst.RegionName = region[0]
		}
	}
	macs := r.list(ctx, "network/interfaces/macs/")
	if r.err != nil {
		return nil, r.err
	}
	for _, m := range macs {
		mac := strings.TrimSuffix(m, "/")
		e, err := discoverENI(ctx, md, mac, knownENI(known, mac))
		if err != nil {
			return nil, err
		}
		inst.ENIs = append(inst.ENIs, e)
	}
	sort.Slice(inst.ENIs, func(i, j int) bool {
		a, b := inst.ENIs[i], inst.ENIs[j]
		return a.NetworkCard < b.NetworkCard || (a.NetworkCard == b.NetworkCard && a.DeviceNumber < b.DeviceNumber)
	})
	if len(inst.ENIs) == 0 {
		return nil, fmt.Errorf("%w: no network interfaces listed", ErrIMDS)
	}
	return inst, nil
}

// knownPrimary returns the primary ENI of known if known holds all that
// DiscoverKnowing takes from it for the instance.
func knownPrimary(known *section.EC2) (section.ENI, bool) {
	if known == nil || known.InstanceType == "" || known.AZ == "" || known.Region == "" {
		return section.ENI{}, false
	}
	for _, e := range known.ENIs {
		if e.Primary() && e.MAC != "" {
			return e, true
		}
	}
	return section.ENI{}, false
}

// knownENI returns the ENI of known with mac if it holds what
// discoverENI takes from it, else nil.
func knownENI(known *section.EC2, mac string) *section.ENI {
	if known == nil {
		return nil
	}
	for i, e := range known.ENIs {
		if e.MAC == mac && e.ID != "" && e.SubnetID != "" && e.SubnetCIDR.IsValid() {
			return &known.ENIs[i]
		}
	}
	return nil
}

// discoverENI reads the ENI with mac; what known (the store's record of
// it, or nil) holds for life is taken from there.
func discoverENI(ctx context.Context, md Metadata, mac string, known *section.ENI) (section.ENIInfo, error) {
	r := reader{md: md}
	base := "network/interfaces/macs/" + mac + "/"
	e := section.ENIInfo{MAC: mac}
	var cidr string
	if known != nil {
		e.ID, e.SubnetID, cidr = known.ID, known.SubnetID, known.SubnetCIDR.String()
	} else {
		e.ID, e.SubnetID = r.get(ctx, base+"interface-id"), r.get(ctx, base+"subnet-id")
		cidr = r.get(ctx, base+"subnet-ipv4-cidr-block")
	}
	// Device and card are read on every pass (0.1 ms each): a detach and
	// attach at another index between two passes changes them, and a
	// stale index names the wrong table and has the next attach fail on
	// an index in use.
	dev := r.get(ctx, base+"device-number")
	card := r.optionalList(ctx, base+"network-card") // absent on single-card types
	vpcs := r.list(ctx, base+"vpc-ipv4-cidr-blocks")
	ips := r.optionalList(ctx, base+"local-ipv4s")
	prefixes := r.optionalList(ctx, base+"ipv4-prefix")
	e.SecurityGroups = r.optionalList(ctx, base+"security-group-ids")
	// An ENI's IPv6 prefixes are read only where the store has some to
	// check for drift: an IPv4 node's pass reads no more paths than it
	// did, and warm records the prefix it asks for from EC2's reply.
	var prefixes6 []string
	if e.IPv6Read = known != nil && len(known.IPv6Prefixes) > 0; e.IPv6Read {
		prefixes6 = r.optionalList(ctx, base+"ipv6-prefix")
	}
	if r.err != nil {
		return e, r.err
	}
	var err error
	if e.DeviceNumber, err = strconv.Atoi(dev); err != nil || e.DeviceNumber < 0 {
		return e, fmt.Errorf("%w: %s device-number %q", ErrIMDS, mac, dev)
	}
	if len(card) == 1 {
		if e.NetworkCard, err = strconv.Atoi(card[0]); err != nil || e.NetworkCard < 0 {
			return e, fmt.Errorf("%w: %s network-card %q", ErrIMDS, mac, card[0])
		}
	}
	if e.SubnetCIDR, err = netip.ParsePrefix(cidr); err != nil {
		return e, fmt.Errorf("%w: %s subnet-ipv4-cidr-block: %v", ErrIMDS, mac, err)
	}
	for _, v := range vpcs {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return e, fmt.Errorf("%w: %s vpc-ipv4-cidr-blocks: %v", ErrIMDS, mac, err)
		}
		e.VPCCIDRs = append(e.VPCCIDRs, p)
	}
	if len(ips) == 0 {
		return e, fmt.Errorf("%w: %s has no local-ipv4s (no primary address)", ErrIMDS, mac)
	}
	for i, v := range ips {
		a, err := netip.ParseAddr(v)
		if err != nil || !a.Is4() {
			return e, fmt.Errorf("%w: %s local-ipv4s entry %q", ErrIMDS, mac, v)
		}
		if i == 0 {
			e.PrimaryIP = a
		} else {
			e.Secondary = append(e.Secondary, a)
		}
	}
	for _, v := range prefixes {
		p, err := netip.ParsePrefix(v)
		if err != nil || !p.Addr().Is4() {
			return e, fmt.Errorf("%w: %s ipv4-prefix entry %q", ErrIMDS, mac, v)
		}
		e.Prefixes = append(e.Prefixes, p.Masked())
	}
	e.IPv6Prefixes, err = parse6(mac, prefixes6)
	return e, err
}

// ReadIPv6Prefixes reads into the ENI of inst with mac the IPv6 prefixes
// IMDS lists for it (ipv6-prefix), each a /80.
func ReadIPv6Prefixes(ctx context.Context, md Metadata, inst *section.Instance, mac string) error {
	i := slices.IndexFunc(inst.ENIs, func(e section.ENIInfo) bool { return e.MAC == mac })
	if i < 0 {
		return fmt.Errorf("%w: %s is not among the listed network interfaces", ErrIMDS, mac)
	}
	r := reader{md: md}
	prefixes := r.optionalList(ctx, "network/interfaces/macs/"+mac+"/ipv6-prefix")
	if r.err != nil {
		return r.err
	}
	ps, err := parse6(mac, prefixes)
	if err != nil {
		return err
	}
	inst.ENIs[i].IPv6Prefixes, inst.ENIs[i].IPv6Read = ps, true
	return nil
}

// parse6 parses the ipv6-prefix entries of the ENI with mac: only a /80
// is a delegated prefix (section.Delegated6).
func parse6(mac string, entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range entries {
		p, err := netip.ParsePrefix(v)
		if err != nil || !section.Delegated6(p) {
			return nil, fmt.Errorf("%w: %s ipv6-prefix entry %q", ErrIMDS, mac, v)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// SubnetIPv6 reads the IPv6 blocks of the subnet of the ENI with mac
// (subnet-ipv6-cidr-blocks; none when IMDS leaves the path out).
func SubnetIPv6(ctx context.Context, md Metadata, mac string) ([]netip.Prefix, error) {
	r := reader{md: md}
	blocks := r.optionalList(ctx, "network/interfaces/macs/"+mac+"/subnet-ipv6-cidr-blocks")
	if r.err != nil {
		return nil, r.err
	}
	var out []netip.Prefix
	for _, v := range blocks {
		p, err := netip.ParsePrefix(v)
		if err != nil || !p.Addr().Is6() {
			return nil, fmt.Errorf("%w: %s subnet-ipv6-cidr-blocks entry %q", ErrIMDS, mac, v)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// reader collects the first error of a series of IMDS reads.
type reader struct {
	md  Metadata
	err error
}

func (r *reader) get(ctx context.Context, path string) string {
	s, err := r.fetch(ctx, path)
	if err != nil && r.err == nil {
		r.err = err
	}
	return s
}

func (r *reader) list(ctx context.Context, path string) []string {
	return splitLines(r.get(ctx, path))
}

// optionalList reads a list that IMDS leaves out (404) when it is empty,
// like local-ipv4s of a new ENI or ipv4-prefix without prefixes.
func (r *reader) optionalList(ctx context.Context, path string) []string {
	s, err := r.fetch(ctx, path)
	if isNotFound(err) {
		return nil
	}
	if err != nil && r.err == nil {
		r.err = err
	}
	return splitLines(s)
}

func (r *reader) fetch(ctx context.Context, path string) (string, error) {
	if r.err != nil {
		return "", r.err
	}
	out, err := r.md.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", fmt.Errorf("%w: read %s: %w", ErrIMDS, path, err)
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, 1<<20))
	if err != nil {
		return "", fmt.Errorf("%w: read %s: %w", ErrIMDS, path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func isNotFound(err error) bool {
	var re *smithyhttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound
}

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// validInstanceID reports whether id looks like an EC2 instance ID:
// "i-" and 8 or 17 lowercase hex digits.
func validInstanceID(id string) bool {
	hex, ok := strings.CutPrefix(id, "i-")
	if !ok || (len(hex) != 8 && len(hex) != 17) {
		return false
	}
	return strings.Trim(hex, "0123456789abcdef") == ""
}
