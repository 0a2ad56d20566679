package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/netconf"
)

// conflistFlags are the install flags that generate the conflist. Only the
// keys given are written: defaults stay in the code, so a later release's
// better default reaches nodes that never chose a value.
type conflistFlags struct {
	network, cniVersion, pool string
	ranges, securityGroups    listFlag
	ipFamilies                familiesFlag
	excludeIPs                listFlag
	tags                      tagsFlag
	warmIPTarget, minIPTarget optInt
	maxENIs, addWaitSeconds   optInt
	mtu                       optInt
	prefixDelegation, snat    optBool
	subnetID, stateDir        string
	logFile, logLevel         string
	portmap                   string
	given                     bool // any of the above was set
}

func (c *conflistFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.network, "network", "pods", "network name of the conflist")
	fs.StringVar(&c.cniVersion, "cni-version", "1.0.0", "cniVersion of the conflist (containerd 1.6 rejects 1.1.0; 1.1.0 adds STATUS and GC)")
	fs.StringVar(&c.pool, "pool", "", "pool source: ec2 (the node's ENI addresses) or static (--ranges)")
	fs.Var(&c.ranges, "ranges", "static pool: comma-separated CIDRs and first-last spans, IPv4 or IPv6")
	fs.Var(&c.ipFamilies, "ip-families", "families each pod gets one address of, in the result's order: ipv4 (default), ipv6, or ipv4,ipv6 (dual-stack)")
	fs.Var(&c.warmIPTarget, "warm-ip-target", "ec2: free addresses warm keeps ready")
	fs.Var(&c.minIPTarget, "minimum-ip-target", "ec2: addresses kept in the pool whatever the use")
	fs.Var(&c.maxENIs, "max-enis", "ec2: ENIs eni-cni may have attached, primary included")
	fs.Var(&c.prefixDelegation, "prefix-delegation", "ec2: assign /28 prefixes instead of single addresses")
	fs.StringVar(&c.subnetID, "subnet-id", "", "ec2: subnet of the ENIs warm creates (default: the primary ENI's)")
	fs.Var(&c.securityGroups, "security-group-ids", "ec2: comma-separated security groups of created ENIs")
	fs.Var(&c.tags, "tags", "ec2: extra tags of created ENIs, k=v,k=v")
	fs.Var(&c.excludeIPs, "exclude-ips", "ec2: comma-separated addresses or CIDRs eni-cni must never hand out")
	fs.Var(&c.addWaitSeconds, "add-wait-seconds", "ec2: how long ADD waits for warm on a dry pool")
	fs.Var(&c.mtu, "mtu", "MTU of the pod veths (default 9001; use the node's NIC MTU off EC2)")
	fs.Var(&c.snat, "snat", "ec2: SNAT traffic leaving the VPC to the node's primary address")
	fs.StringVar(&c.stateDir, "state-dir", "", "state directory (default /var/lib/eni-cni)")
	fs.StringVar(&c.logFile, "log-file", "", "log file of the CNI verbs (default: the runtime's log)")
	fs.StringVar(&c.logLevel, "log-level", "", "debug, info, warn or error")
	fs.StringVar(&c.portmap, "portmap", "auto", "chain the portmap plugin (hostPort): yes, no, or auto (if it is in the bin dir)")
}

// generating names the flags that mean "write a conflist".
var generating = map[string]bool{
	"network": true, "cni-version": true, "pool": true, "ranges": true, "ip-families": true, "warm-ip-target": true,
	"minimum-ip-target": true, "max-enis": true, "prefix-delegation": true, "subnet-id": true,
	"security-group-ids": true, "tags": true, "exclude-ips": true, "add-wait-seconds": true, "mtu": true,
	"snat": true, "state-dir": true, "log-file": true, "log-level": true,
}

// ec2Only are the flags that make sense only for the ec2 pool.
var ec2Only = []string{"warm-ip-target", "minimum-ip-target", "max-enis", "prefix-delegation", "subnet-id",
	"security-group-ids", "tags", "exclude-ips", "add-wait-seconds", "snat"}

// genPlugin is eni-cni's entry, in the order a person reads it.
type genPlugin struct {
	Type       string   `json:"type"`
	StateDir   string   `json:"stateDir,omitempty"`
	MTU        *int     `json:"mtu,omitempty"`
	IPFamilies []string `json:"ipFamilies,omitempty"`
	Pool       genPool  `json:"pool"`
	SNAT       *bool    `json:"snat,omitempty"`
	LogFile    string   `json:"logFile,omitempty"`
	LogLevel   string   `json:"logLevel,omitempty"`
}

type genPool struct {
	Source           string            `json:"source"`
	Ranges           []string          `json:"ranges,omitempty"`
	WarmIPTarget     *int              `json:"warmIPTarget,omitempty"`
	MinimumIPTarget  *int              `json:"minimumIPTarget,omitempty"`
	MaxENIs          *int              `json:"maxENIs,omitempty"`
	PrefixDelegation *bool             `json:"prefixDelegation,omitempty"`
	SubnetID         string            `json:"subnetID,omitempty"`
	SecurityGroupIDs []string          `json:"securityGroupIDs,omitempty"`
	Tags             map[string]string `json:"tags,omitempty"`
	ExcludeIPs       []string          `json:"excludeIPs,omitempty"`
	AddWaitSeconds   *int              `json:"addWaitSeconds,omitempty"`
}

type genList struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	Plugins    []any  `json:"plugins"`
}

// errFlags is a combination of install flags that makes no sense.
var errFlags = errors.New("install flags")

// poolSource returns the pool the flags ask for: --pool, else static when
// ranges are given, else ec2 when an ec2 key is.
func (c *conflistFlags) poolSource(set map[string]bool) (string, error) {
	src := c.pool
	if src == "" && len(c.ranges) > 0 {
		src = netconf.Static
	}
	if src == "" {
		for _, k := range ec2Only {
			if set[k] {
				src = netconf.EC2
			}
		}
	}
	switch src {
	case netconf.EC2:
		if len(c.ranges) > 0 {
			return "", fmt.Errorf("%w: --ranges is for --pool static", errFlags)
		}
	case netconf.Static:
		if len(c.ranges) == 0 {
			return "", fmt.Errorf("%w: --pool static needs --ranges (e.g. --ranges 10.244.1.0/24)", errFlags)
		}
		for _, k := range ec2Only {
			if set[k] {
				return "", fmt.Errorf("%w: --%s is a setting of the ec2 pool, not of --pool static", errFlags, k)
			}
		}
	case "":
		return "", fmt.Errorf("%w: say which pool: --pool ec2 (on EC2) or --pool static --ranges CIDR,...", errFlags)
	default:
		return "", fmt.Errorf("%w: --pool %q: want ec2 or static", errFlags, src)
	}
	return src, nil
}

// render builds the conflist and checks it with the same parser the CNI
// verbs use, so what is installed is what the plugin accepts.
func (c *conflistFlags) render(set map[string]bool, withPortmap bool) ([]byte, error) {
	src, err := c.poolSource(set)
	if err != nil {
		return nil, err
	}
	for _, ip := range c.excludeIPs {
		_, aerr := netip.ParseAddr(ip)
		_, perr := netip.ParsePrefix(ip)
		if aerr != nil && perr != nil {
			return nil, fmt.Errorf("%w: --exclude-ips: %q is not an address or CIDR", errFlags, ip)
		}
	}
	if err := c.checkRangeFamilies(); err != nil {
		return nil, err
	}
	p := genPlugin{
		Type: netconf.PluginType, StateDir: c.stateDir, MTU: c.mtu.ptr(), SNAT: c.snat.ptr(), IPFamilies: c.ipFamilies,
		LogFile: c.logFile, LogLevel: c.logLevel,
		Pool: genPool{
			Source: src, Ranges: c.ranges, WarmIPTarget: c.warmIPTarget.ptr(), MinimumIPTarget: c.minIPTarget.ptr(),
			MaxENIs: c.maxENIs.ptr(), PrefixDelegation: c.prefixDelegation.ptr(), SubnetID: c.subnetID,
			SecurityGroupIDs: c.securityGroups, Tags: c.tags.m, ExcludeIPs: c.excludeIPs, AddWaitSeconds: c.addWaitSeconds.ptr(),
		},
	}
	list := genList{CNIVersion: c.cniVersion, Name: c.network, Plugins: []any{p}}
	if withPortmap {
		list.Plugins = append(list.Plugins, map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}})
	}
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, err
	}
	data = append(data, '\n')
	if err := checkConflist(data); err != nil {
		return nil, err
	}
	return data, nil
}

// checkRangeFamilies says in flags what the plugin's parser would say in
// conflist keys: each range's family must be one of --ip-families, and
// each family needs a range.
func (c *conflistFlags) checkRangeFamilies() error {
	if len(c.ranges) == 0 {
		return nil
	}
	fams := c.ipFamilies
	if len(fams) == 0 {
		fams = familiesFlag{"ipv4"}
	}
	has := map[string]bool{}
	for _, r := range c.ranges {
		f := rangeFamily(r)
		if f == "" {
			continue // not an address: the parser names what is wrong with it
		}
		if !slices.Contains(fams, f) {
			return fmt.Errorf("%w: --ranges %s is %s but --ip-families is %s (dual-stack: --ip-families ipv4,ipv6)", errFlags, r, familyName(f), fams.String())
		}
		has[f] = true
	}
	for _, f := range fams {
		if !has[f] {
			return fmt.Errorf("%w: --ip-families has %s but --ranges has no %s range (each pod gets one address of each family)", errFlags, f, familyName(f))
		}
	}
	return nil
}

// rangeFamily is "ipv4" or "ipv6" for a CIDR or first-last span, "" if its
// first address does not parse.
func rangeFamily(spec string) string {
	first, _, _ := strings.Cut(spec, "-")
	first, _, _ = strings.Cut(first, "/")
	a, err := netip.ParseAddr(strings.TrimSpace(first))
	switch {
	case err != nil:
		return ""
	case a.Is4():
		return "ipv4"
	}
	return "ipv6"
}

func familyName(f string) string {
	if f == "ipv6" {
		return "IPv6"
	}
	return "IPv4"
}

// checkConflist validates a conflist as the plugin would read it.
func checkConflist(data []byte) error {
	var list struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("%w: %v", netconf.ErrDecode, err)
	}
	switch list.CNIVersion {
	case "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0":
	default:
		return fmt.Errorf("%w: cniVersion %q (want 0.4.0, 1.0.0 or 1.1.0)", netconf.ErrInvalidConfig, list.CNIVersion)
	}
	conf, err := netconf.PluginConfFrom(data)
	if err != nil {
		return err
	}
	_, err = netconf.Parse(conf)
	return err
}

// listFlag is a comma-separated (or repeated) list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// familiesFlag is --ip-families: one or two distinct families.
type familiesFlag []string

func (f *familiesFlag) String() string { return strings.Join(*f, ",") }
func (f *familiesFlag) Set(s string) error {
	var l listFlag
	_ = l.Set(s)
	for _, v := range l {
		v = strings.ToLower(v)
		if _, err := alloc.ParseFamily(v); err != nil {
			return err
		}
		if slices.Contains(*f, v) {
			return fmt.Errorf("%s given twice", v)
		}
		*f = append(*f, v)
	}
	if len(*f) == 0 {
		return fmt.Errorf("want ipv4, ipv6 or ipv4,ipv6")
	}
	return nil
}

// tagsFlag is k=v,k=v.
type tagsFlag struct{ m map[string]string }

func (t *tagsFlag) String() string { return fmt.Sprint(t.m) }
func (t *tagsFlag) Set(s string) error {
	if t.m == nil {
		t.m = map[string]string{}
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("tag %q is not key=value", kv)
		}
		t.m[strings.TrimSpace(k)] = v
	}
	return nil
}

// optInt is an integer flag that knows whether it was given.
type optInt struct {
	v   int
	set bool
}

func (o *optInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.Itoa(o.v)
}
func (o *optInt) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return fmt.Errorf("%q is not a number >= 0", s)
	}
	o.v, o.set = v, true
	return nil
}
func (o *optInt) ptr() *int {
	if !o.set {
		return nil
	}
	return &o.v
}

// optBool is a boolean flag (--snat, --snat=false) that knows whether it
// was given.
type optBool struct {
	v   bool
	set bool
}

func (o *optBool) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatBool(o.v)
}
func (o *optBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not true or false", s)
	}
	o.v, o.set = v, true
	return nil
}
func (o *optBool) IsBoolFlag() bool { return true }
func (o *optBool) ptr() *bool {
	if !o.set {
		return nil
	}
	return &o.v
}
