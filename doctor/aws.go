package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	eniec2 "github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// EC2API is every EC2 action eni-cni uses, probed for permission.
type EC2API interface {
	eniec2.API
	CreateTags(context.Context, *ec2.CreateTagsInput, ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error)
}

// instanceInfo is what IMDS told about the node.
type instanceInfo struct {
	ID, Type, Region, Subnet string
	// SubnetIPv6 are the primary ENI's subnet's IPv6 blocks, read for a
	// network of IPv6 only.
	SubnetIPv6 []string
}

const defaultIMDS = "http://169.254.169.254"

// imdsTimeout bounds each IMDS request: IMDS answers in milliseconds, and
// a lost reply (hop limit) should be reported, not waited on.
const imdsTimeout = 2 * time.Second

// checkIMDS gets an IMDSv2 token and reads the instance with it, with a
// plain HTTP client so each way of failing can be told apart. The hop
// limit itself (http-put-response-hop-limit) is not exposed by IMDS; what
// can be seen is its effect: from a container or another network
// namespace, a limit of 1 lets the TCP connection open but drops the token
// reply.
func checkIMDS(ctx context.Context, e *Env) (Result, *instanceInfo) {
	const name = "imds"
	if e.Source != "ec2" {
		return skip(name, "the %s pool needs no instance metadata", e.Source), nil
	}
	base := e.IMDSEndpoint
	if base == "" {
		base = os.Getenv(eniec2.EnvIMDSEndpoint)
	}
	if base == "" {
		base = defaultIMDS
	}
	base = strings.TrimRight(base, "/")
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return fail(name, "set imdsEndpoint to a URL such as http://169.254.169.254", "imdsEndpoint %q is not a URL", base), nil
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	d := net.Dialer{Timeout: imdsTimeout}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return fail(name, "run on an EC2 instance with the metadata service enabled "+
			"(aws ec2 modify-instance-metadata-options --http-endpoint enabled), or fix imdsEndpoint / "+eniec2.EnvIMDSEndpoint,
			"nothing answers at %s: %v", base, err), nil
	}
	conn.Close()
	client := &http.Client{Timeout: imdsTimeout}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+"/latest/api/token", nil)
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
	resp, err := client.Do(req)
	if err != nil {
		msg := "the IMDSv2 token request got no answer (the connection opened)"
		if e.inOtherNetns() {
			msg += "; this process runs in a network namespace other than PID 1's"
		}
		return fail(name, "run eni-cni in the host network namespace (hostNetwork: true for a pod), or raise the hop limit: "+
			"aws ec2 modify-instance-metadata-options --instance-id <id> --http-put-response-hop-limit 2",
			"%s: an IMDS hop limit of 1 drops it from containers and other namespaces (%v)", msg, err), nil
	}
	token, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(name, "check the instance's metadata options (aws ec2 describe-instances --query 'Reservations[].Instances[].MetadataOptions') and that no proxy intercepts 169.254.169.254 (NO_PROXY)",
			"the IMDSv2 token request at %s answered HTTP %d", base, resp.StatusCode), nil
	}
	get := func(path string) (string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/latest/meta-data/"+path, nil)
		req.Header.Set("X-aws-ec2-metadata-token", string(token))
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s: HTTP %d", path, resp.StatusCode)
		}
		return strings.TrimSpace(string(b)), nil
	}
	info := &instanceInfo{}
	var errs []error
	for _, f := range []struct {
		path string
		dst  *string
	}{{"instance-id", &info.ID}, {"instance-type", &info.Type}, {"placement/region", &info.Region}} {
		v, err := get(f.path)
		errs = append(errs, err)
		*f.dst = v
	}
	if mac, err := get("mac"); err == nil {
		info.Subnet, _ = get("network/interfaces/macs/" + mac + "/subnet-id")
		if e.Warm.IPv6 {
			// Absent (404) when the subnet has none.
			blocks, _ := get("network/interfaces/macs/" + mac + "/subnet-ipv6-cidr-blocks")
			info.SubnetIPv6 = strings.Fields(blocks)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fail(name, "", "IMDSv2 token granted, but reading the instance failed: %v", err), nil
	}
	msg := fmt.Sprintf("IMDSv2 at %s: %s (%s, %s)", base, info.ID, info.Type, info.Region)
	if !e.inOtherNetns() {
		msg += "; hop limit not observable from the instance, and 1 suffices in the host namespace"
	}
	return ok(name, "%s", msg), info
}

// inOtherNetns reports whether this process's network namespace is not
// PID 1's (unknown counts as not).
func (e *Env) inOtherNetns() bool {
	if e.ProcRoot == "" {
		return false
	}
	self, err1 := os.Readlink(e.ProcRoot + "/self/ns/net")
	init, err2 := os.Readlink(e.ProcRoot + "/1/ns/net")
	return err1 == nil && err2 == nil && self != init
}

// probeENI is an ENI ID that does not exist: calls that cannot be dry-run
// (Assign/UnassignPrivateIpAddresses) name it, so whatever IAM allows they
// change nothing. EC2 authorises a request before it looks the resource up.
const probeENI = "eni-00000000000000000"

type probe struct {
	action string
	call   func(ctx context.Context, api EC2API) error
}

func probes(inst instanceInfo, subnet string) []probe {
	dry := aws.Bool(true)
	return []probe{
		{"DescribeInstanceTypes", func(ctx context.Context, api EC2API) error {
			_, err := api.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{DryRun: dry, InstanceTypes: []types.InstanceType{types.InstanceType(inst.Type)}})
			return err
		}},
		{"DescribeSubnets", func(ctx context.Context, api EC2API) error {
			_, err := api.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{DryRun: dry})
			return err
		}},
		{"DescribeNetworkInterfaces", func(ctx context.Context, api EC2API) error {
			_, err := api.DescribeNetworkInterfaces(ctx, &ec2.DescribeNetworkInterfacesInput{DryRun: dry})
			return err
		}},
		{"CreateNetworkInterface", func(ctx context.Context, api EC2API) error {
			// With the tags warm puts on, so a tag condition in the
			// policy is exercised too.
			_, err := api.CreateNetworkInterface(ctx, &ec2.CreateNetworkInterfaceInput{DryRun: dry, SubnetId: aws.String(subnet),
				TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeNetworkInterface,
					Tags: []types.Tag{{Key: aws.String(eniec2.TagInstanceID), Value: aws.String(inst.ID)}}}}})
			return err
		}},
		{"AttachNetworkInterface", func(ctx context.Context, api EC2API) error {
			_, err := api.AttachNetworkInterface(ctx, &ec2.AttachNetworkInterfaceInput{DryRun: dry, NetworkInterfaceId: aws.String(probeENI),
				InstanceId: aws.String(inst.ID), DeviceIndex: aws.Int32(1)})
			return err
		}},
		{"ModifyNetworkInterfaceAttribute", func(ctx context.Context, api EC2API) error {
			_, err := api.ModifyNetworkInterfaceAttribute(ctx, &ec2.ModifyNetworkInterfaceAttributeInput{DryRun: dry, NetworkInterfaceId: aws.String(probeENI),
				Attachment: &types.NetworkInterfaceAttachmentChanges{AttachmentId: aws.String("eni-attach-00000000000000000"), DeleteOnTermination: aws.Bool(true)}})
			return err
		}},
		{"DeleteNetworkInterface", func(ctx context.Context, api EC2API) error {
			_, err := api.DeleteNetworkInterface(ctx, &ec2.DeleteNetworkInterfaceInput{DryRun: dry, NetworkInterfaceId: aws.String(probeENI)})
			return err
		}},
		{"CreateTags", func(ctx context.Context, api EC2API) error {
			_, err := api.CreateTags(ctx, &ec2.CreateTagsInput{DryRun: dry, Resources: []string{probeENI},
				Tags: []types.Tag{{Key: aws.String(eniec2.TagInstanceID), Value: aws.String(inst.ID)}}})
			return err
		}},
		{"AssignPrivateIpAddresses", func(ctx context.Context, api EC2API) error {
			_, err := api.AssignPrivateIpAddresses(ctx, &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(probeENI),
				SecondaryPrivateIpAddressCount: aws.Int32(1)})
			return err
		}},
		{"UnassignPrivateIpAddresses", func(ctx context.Context, api EC2API) error {
			_, err := api.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{NetworkInterfaceId: aws.String(probeENI),
				PrivateIpAddresses: []string{"192.0.2.1"}})
			return err
		}},
	}
}

// verdict of one probe.
type verdict int

const (
	allowed verdict = iota
	denied
	unknown
)

// judge reads a probe's error: DryRunOperation means the call would have
// been allowed, UnauthorizedOperation that it is not; a probe on the
// nonexistent ENI that got as far as "not found" was authorised.
func judge(err error) (verdict, string) {
	if err == nil {
		return allowed, ""
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return unknown, err.Error()
	}
	code := ae.ErrorCode()
	switch {
	case code == "DryRunOperation":
		return allowed, ""
	case code == "UnauthorizedOperation", code == "AccessDenied", code == "AccessDeniedException":
		return denied, code
	case strings.HasPrefix(code, "InvalidNetworkInterfaceID."), strings.HasPrefix(code, "InvalidAttachmentID."):
		return allowed, ""
	}
	return unknown, code + ": " + ae.ErrorMessage()
}

// checkPermissions probes every EC2 action eni-cni uses.
func checkPermissions(ctx context.Context, e *Env, src *section.EC2, info *instanceInfo) Result {
	const name = "ec2-permissions"
	if e.Source != "ec2" {
		return skip(name, "the %s pool makes no EC2 calls", e.Source)
	}
	if e.EC2 == nil {
		return skip(name, "no EC2 client")
	}
	inst := instanceInfo{}
	if info != nil {
		inst = *info
	}
	subnet := e.Warm.SubnetID
	if src != nil && src.InstanceID != "" {
		inst.ID, inst.Type = src.InstanceID, src.InstanceType
		if src.Region != "" {
			inst.Region = src.Region
		}
		if subnet == "" && len(src.ENIs) > 0 {
			subnet = src.ENIs[0].SubnetID
		}
	}
	if subnet == "" {
		subnet = inst.Subnet
	}
	if inst.ID == "" || inst.Region == "" || subnet == "" {
		return skip(name, "instance, region or subnet unknown (IMDS did not answer and warm never ran)")
	}
	api, err := e.EC2(inst.Region)
	if err != nil {
		return fail(name, "", "EC2 client: %v", err)
	}
	var deniedActions, unknownActions []string
	ps := probes(inst, subnet)
	if e.Warm.IPv6 {
		ps = append(ps, probe{"AssignIpv6Addresses", func(ctx context.Context, api EC2API) error {
			_, err := api.AssignIpv6Addresses(ctx, &ec2.AssignIpv6AddressesInput{NetworkInterfaceId: aws.String(probeENI), Ipv6PrefixCount: aws.Int32(1)})
			return err
		}})
	}
	for _, p := range ps {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		v, why := judge(p.call(pctx, api))
		cancel()
		switch v {
		case denied:
			deniedActions = append(deniedActions, "ec2:"+p.action)
		case unknown:
			unknownActions = append(unknownActions, fmt.Sprintf("ec2:%s (%s)", p.action, why))
		}
	}
	sort.Strings(deniedActions)
	switch {
	case len(deniedActions) > 0:
		return fail(name, "allow these actions in the instance role's policy: "+strings.Join(deniedActions, ", "),
			"denied to this node: %s", strings.Join(deniedActions, ", "))
	case len(unknownActions) > 0:
		return warn(name, "check the credentials and that EC2 is reachable (ec2Endpoint, proxy, VPC endpoint)",
			"could not tell: %s", strings.Join(unknownActions, "; "))
	}
	return ok(name, "all %d EC2 actions eni-cni uses are allowed (DryRun, or a probe on a nonexistent ENI for Assign/Unassign)", len(ps))
}
