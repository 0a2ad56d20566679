// Package netconf reads eni-cni's network configuration: the plugin's
// entry of a conflist, decoded, defaulted and validated into a Config. It
// is shared by everything that acts on a network (the CNI verbs, the EC2
// provider's ADD side, warm, install, doctor), so it sits below all of
// them; none of it touches the node.
package netconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// PluginType is the `type` of our entry in a conflist.
const PluginType = "eni-cni"

// Defaults of the configuration contract (README.md, Configuration).
const (
	DefaultStateDir    = "/var/lib/eni-cni"
	defaultMTU         = 9001
	defaultCooldown    = 30 * time.Second
	defaultGCGrace     = 600 * time.Second
	DefaultLockTimeout = 10 * time.Second
	DefaultVethPrefix  = "eni"
	DefaultConfDir     = "/etc/cni/net.d"
)

// Minimums of the two safety delays; a smaller value is a configuration
// error (code 7), not silently raised.
const (
	// minCooldown: ADD wires its address after the lock that gave it. If
	// the runtime gives up on a stalled ADD and DELs the attachment, only
	// the cooldown keeps the address from a new pod until the stalled ADD
	// is done; a few seconds cover a loaded node. (DEL and gc unroute
	// under the lock, as rules are found by address alone: they do not
	// rely on it. The 30 s default also lets conntrack and neighbour
	// entries of the old pod expire.)
	minCooldown = 5 * time.Second
	// MinGCGrace: containerd runs ADD before the sandbox appears in
	// ListPodSandbox, and a pod's ADD may wait for the lock (10 s), for the
	// IMDS refresh or for a dry pool (addWaitSeconds). An allocation
	// younger than a minute is never collectable, whatever the listing says.
	MinGCGrace = 60 * time.Second
)

// Providers: where a network's addresses come from (pool.source).
const (
	Static = "static"
	EC2    = "ec2"
)

var (
	// ErrInvalidConfig is a configuration that parses but cannot be used.
	ErrInvalidConfig = errors.New("invalid network configuration")
	// ErrDecode is configuration that is not the JSON it should be.
	ErrDecode = errors.New("cannot decode network configuration")
)

// netConf is the plugin's entry in the conflist, as JSON.
type netConf struct {
	types.PluginConf
	StateDir           string   `json:"stateDir"`
	MTU                int      `json:"mtu"`
	Pool               poolConf `json:"pool"`
	CooldownSeconds    *float64 `json:"cooldownSeconds"`
	GCGraceSeconds     *float64 `json:"gcGraceSeconds"`
	LockTimeoutSeconds *float64 `json:"lockTimeoutSeconds"`
	SNAT               bool     `json:"snat"`
	LogFile            string   `json:"logFile"`
	LogLevel           string   `json:"logLevel"`
	LogMaxSizeMB       *float64 `json:"logMaxSizeMB"`
	LogMaxFiles        *int     `json:"logMaxFiles"`
	MetricsFile        string   `json:"metricsFile"`
	HostVethPrefix     *string  `json:"hostVethPrefix"`
	// IPFamilies are the families a pod gets one address of, in the order
	// of the CNI result: ["ipv4"] (absent), ["ipv6"], or both.
	IPFamilies []string `json:"ipFamilies"`
	// IPv4Egress gives each pod of an IPv6-only network a link-local IPv4
	// address for reaching IPv4 destinations through the node (absent:
	// on when the node has an IPv4 default route).
	IPv4Egress   *bool  `json:"ipv4Egress"`
	DefaultRoute *bool  `json:"defaultRoute"`
	IMDSEndpoint string `json:"imdsEndpoint"`
	EC2Endpoint  string `json:"ec2Endpoint"`
	// IMDSv1Fallback lets IMDS reads go without a session token when the
	// IMDSv2 token is refused. Off: IMDSv2 only.
	IMDSv1Fallback bool `json:"imdsV1Fallback"`
	// RuntimeConfig is what the runtime passes for the capabilities the
	// conflist declares (CAP_ARGS); only the ones eni-cni refuses are read.
	RuntimeConfig struct {
		IPs []string `json:"ips"`
		Mac string   `json:"mac"`
	} `json:"runtimeConfig"`
	ec2Conf
}

// unhonoured are capabilities eni-cni does not serve: a runtime passing a
// requested address or MAC must not see ADD succeed without it.
var unhonoured = []string{"ips", "mac"}

type poolConf struct {
	Source string   `json:"source"`
	Ranges []string `json:"ranges"`
	ec2Conf
}

// ec2Conf are the ec2 source's keys. They belong in "pool"; the top level
// is accepted too, and "pool" wins where both are given.
type ec2Conf struct {
	WarmIPTarget     *int     `json:"warmIPTarget"`
	MinimumIPTarget  *int     `json:"minimumIPTarget"`
	MaxENIs          *int     `json:"maxENIs"`
	PrefixDelegation *bool    `json:"prefixDelegation"`
	SubnetID         string   `json:"subnetID"`
	SecurityGroupIDs []string `json:"securityGroupIDs"`
	// Subnets are the pods' subnets by availability zone (custom
	// subnets); SubnetDiscovery finds them by tag instead.
	Subnets         json.RawMessage   `json:"subnets"`
	SubnetDiscovery *bool             `json:"subnetDiscovery"`
	Tags            map[string]string `json:"tags"`
	// ExcludeIPs are addresses (or CIDRs) never handed to pods, though
	// they are on an ENI eni-cni manages: a VIP, an Elastic IP's address.
	ExcludeIPs     []string `json:"excludeIPs"`
	AddWaitSeconds *float64 `json:"addWaitSeconds"`
	// ReadyWhenFilled: STATUS says the network is not ready until the pool
	// was filled in this boot, or while it cannot grow and has nothing
	// free (on by default).
	ReadyWhenFilled *bool `json:"readyWhenFilled"`
}

// Config is the validated, typed form of netConf that the verbs use.
type Config struct {
	Raw  []byte // as given, for the lean build's delegations
	conf *netConf
	// log is Logger's, opened once: a Config is used through its pointer.
	logOnce sync.Once
	log     *slog.Logger
	// PluginConf is the standard part of the entry (prevResult for CHECK).
	PluginConf *types.PluginConf
	Network    string
	CNIVersion string
	StateDir   string
	MTU        int
	// Provider is where the addresses come from: Static or EC2 (pool.source).
	Provider string
	// Families are the families a pod gets one address of (ipFamilies),
	// in the order its CNI result lists them; nil for IPv4 only, the
	// default, so that an IPv4 network takes the path it always took.
	Families []alloc.Family
	// Egress4 is whether pods of an IPv6-only network get a link-local
	// IPv4 address for egress (ipv4Egress).
	Egress4     Egress4Mode
	Pool        alloc.Pool
	Cooldown    time.Duration
	GCGrace     time.Duration
	LockTimeout time.Duration
	VethPrefix  string
	// DefaultRoute is whether this network's interface carries the pod's
	// default route: nil when the first interface of the pod does (a
	// second network, as Multus adds, gets routes for its own address).
	DefaultRoute *bool
	LogFile      string
	LogLevel     string
	LogMaxSize   int64 // bytes; 0: no rotation
	LogMaxFiles  int   // rotated files kept
	// MetricsFile is the node_exporter textfile ("" when off); see
	// MetricsPath for the default.
	MetricsFile string
	// ec2 source
	Warm section.WarmConfig
	// AddWait is how long ADD on a dry pool waits for `warm` (0: it
	// fails at once with code 11, as before demand-driven warm).
	AddWait      time.Duration
	IMDSEndpoint string
	EC2Endpoint  string
	SNAT         bool
	// IMDSv1Fallback: see netConf.
	IMDSv1Fallback bool
}

// Parse decodes and validates the plugin's configuration, refusing
// keys it does not know.
func Parse(data []byte) (*Config, error) {
	c, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if err := CheckKeys(data); err != nil {
		return nil, err
	}
	return c, nil
}

// Decode is Parse without the unknown-key check, for DEL: an
// address must be freed even after a typo crept into the file.
func Decode(data []byte) (*Config, error) {
	var nc netConf
	if err := json.Unmarshal(data, &nc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDecode, err)
	}
	c := &Config{
		Raw: data, conf: &nc, PluginConf: &nc.PluginConf, Network: nc.Name, CNIVersion: nc.CNIVersion,
		StateDir: nc.StateDir, MTU: nc.MTU, Provider: nc.Pool.Source,
		VethPrefix: DefaultVethPrefix, LogFile: nc.LogFile, LogLevel: nc.LogLevel, DefaultRoute: nc.DefaultRoute,
	}
	if c.Network == "" {
		return nil, fmt.Errorf("%w: network name is empty", ErrInvalidConfig)
	}
	var err error
	if c.StateDir, err = stateDirOr(nc.StateDir); err != nil {
		return nil, err
	}
	if c.MTU == 0 {
		c.MTU = defaultMTU
	}
	if c.MTU < 576 || c.MTU > 65535 {
		return nil, fmt.Errorf("%w: mtu %d is outside 576-65535", ErrInvalidConfig, c.MTU)
	}
	if c.Cooldown, err = seconds("cooldownSeconds", nc.CooldownSeconds, defaultCooldown); err != nil {
		return nil, err
	}
	if c.GCGrace, err = seconds("gcGraceSeconds", nc.GCGraceSeconds, defaultGCGrace); err != nil {
		return nil, err
	}
	if err := atLeast("cooldownSeconds", c.Cooldown, minCooldown, "a freed address must rest before reuse"); err != nil {
		return nil, err
	}
	if err := atLeast("gcGraceSeconds", c.GCGrace, MinGCGrace, "ADD runs before the runtime lists the sandbox"); err != nil {
		return nil, err
	}
	if c.LockTimeout, err = seconds("lockTimeoutSeconds", nc.LockTimeoutSeconds, DefaultLockTimeout); err != nil {
		return nil, err
	}
	if c.LockTimeout == 0 {
		return nil, fmt.Errorf("%w: lockTimeoutSeconds must be positive", ErrInvalidConfig)
	}
	if nc.HostVethPrefix != nil {
		if !validVethPrefix(*nc.HostVethPrefix) {
			return nil, fmt.Errorf("%w: hostVethPrefix %q must be 1-5 lowercase letters or digits, starting with a letter", ErrInvalidConfig, *nc.HostVethPrefix)
		}
		c.VethPrefix = *nc.HostVethPrefix
	}
	switch strings.ToLower(c.LogLevel) {
	case "", "debug", "info", "warn", "error":
	default:
		return nil, fmt.Errorf("%w: logLevel %q is not one of debug, info, warn, error", ErrInvalidConfig, c.LogLevel)
	}
	if err := c.parseLogAndMetrics(&nc); err != nil {
		return nil, err
	}
	if err := c.parsePool(); err != nil {
		return nil, err
	}
	if err := checkCapabilities(&nc); err != nil {
		return nil, err
	}
	return c, nil
}

// checkStateDir refuses a state directory that is not a directory of its
// own: the store creates state.lock and state.json in it on first use,
// and must never litter the root directory.
// stateDirOr is the state directory a configuration's stateDir names:
// the default when empty, refused when relative or the root, cleaned.
func stateDirOr(dir string) (string, error) {
	if dir == "" {
		dir = DefaultStateDir
	}
	if err := checkStateDir(dir); err != nil {
		return "", err
	}
	return filepath.Clean(dir), nil
}

// StateDirOf is the state directory Decode gives conf (one plugin's
// configuration, as Find returns it), decoding nothing else: the lean
// build's delegated commands need only it, to find the cached build beside
// the state, and a whole Parse (the typed decode, the key check) was half
// a millisecond of every settled warm pass. A configuration Decode would
// refuse for another reason still gives its state directory; the build
// that runs the command refuses it.
func StateDirOf(conf []byte) (string, error) {
	var c struct {
		StateDir string `json:"stateDir"`
	}
	if err := json.Unmarshal(conf, &c); err != nil {
		return "", fmt.Errorf("%w: %v", ErrDecode, err)
	}
	return stateDirOr(c.StateDir)
}

func checkStateDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%w: stateDir %q is not an absolute path", ErrInvalidConfig, dir)
	}
	if filepath.Clean(dir) == "/" {
		return fmt.Errorf("%w: stateDir %q is the root directory (use a directory of its own, such as %s)", ErrInvalidConfig, dir, DefaultStateDir)
	}
	return nil
}

// checkCapabilities refuses the capabilities eni-cni cannot honour, whether
// the entry declares them or the runtime passes their arguments: a pod
// asking for an address or a MAC must not silently get another.
func checkCapabilities(nc *netConf) error {
	for _, c := range unhonoured {
		if nc.Capabilities[c] {
			return fmt.Errorf("%w: capability %q is not supported by eni-cni (addresses come from the pool, MACs from the kernel); remove it from capabilities", ErrInvalidConfig, c)
		}
	}
	rc := nc.RuntimeConfig
	if len(rc.IPs) > 0 {
		return fmt.Errorf("%w: runtimeConfig asks for ips %v: eni-cni does not honour requested addresses (remove the ips capability)", ErrInvalidConfig, rc.IPs)
	}
	if rc.Mac != "" {
		return fmt.Errorf("%w: runtimeConfig asks for mac %q: eni-cni does not honour requested MACs (remove the mac capability)", ErrInvalidConfig, rc.Mac)
	}
	return nil
}

// Defaults of log rotation and metrics.
const (
	defaultLogMaxSizeMB = 10
	defaultLogMaxFiles  = 3
	// DefaultTextfileDir is node_exporter's usual textfile-collector
	// directory; metrics go there by default only if it exists.
	DefaultTextfileDir = "/var/lib/node_exporter/textfile_collector"
	metricsOff         = "off"
)

func (c *Config) parseLogAndMetrics(nc *netConf) error {
	size := float64(defaultLogMaxSizeMB)
	if nc.LogMaxSizeMB != nil {
		size = *nc.LogMaxSizeMB
	}
	if size < 0 || size > 1<<20 {
		return fmt.Errorf("%w: logMaxSizeMB %v is out of range (0 turns rotation off)", ErrInvalidConfig, size)
	}
	c.LogMaxSize = int64(size * (1 << 20))
	c.LogMaxFiles = defaultLogMaxFiles
	if nc.LogMaxFiles != nil {
		c.LogMaxFiles = *nc.LogMaxFiles
	}
	if c.LogMaxFiles < 1 || c.LogMaxFiles > 100 {
		return fmt.Errorf("%w: logMaxFiles %d must be 1-100", ErrInvalidConfig, c.LogMaxFiles)
	}
	if c.LogFile != "" && !filepath.IsAbs(c.LogFile) {
		return fmt.Errorf("%w: logFile %q is not an absolute path", ErrInvalidConfig, c.LogFile)
	}
	c.MetricsFile = nc.MetricsFile
	if c.MetricsFile != "" && c.MetricsFile != metricsOff && !filepath.IsAbs(c.MetricsFile) {
		return fmt.Errorf("%w: metricsFile %q is not an absolute path (or %q)", ErrInvalidConfig, c.MetricsFile, metricsOff)
	}
	return nil
}

// MetricsPath is where metrics are written: metricsFile, or else
// eni-cni.prom in node_exporter's textfile directory when that exists; ""
// when metrics are off.
func (c *Config) MetricsPath() string {
	switch c.MetricsFile {
	case metricsOff:
		return ""
	case "":
		if fi, err := os.Stat(DefaultTextfileDir); err == nil && fi.IsDir() {
			return filepath.Join(DefaultTextfileDir, "eni-cni.prom")
		}
		return ""
	}
	return c.MetricsFile
}

func (c *Config) parsePool() error {
	if c.Provider == "" {
		c.Provider = EC2
	}
	if err := c.parseFamilies(); err != nil {
		return err
	}
	if err := c.parseEgress4(); err != nil {
		return err
	}
	switch c.Provider {
	case Static:
		ranges, err := alloc.ParseRangesOf(c.conf.Pool.Ranges, c.families())
		if err != nil {
			return fmt.Errorf("%w: pool.ranges: %v", ErrInvalidConfig, err)
		}
		for _, f := range c.families() {
			if ranges.FamilySize(f) == 0 {
				return fmt.Errorf("%w: ipFamilies has %s but pool.ranges has no %s range (each pod gets one address of each family)", ErrInvalidConfig, f, f)
			}
		}
		c.Pool = ranges
		return nil
	case EC2:
		if err := c.parseEC2(); err != nil {
			return err
		}
		return c.ec2Families()
	default:
		return fmt.Errorf("%w: unknown pool.source %q (want %q or %q)", ErrInvalidConfig, c.Provider, EC2, Static)
	}
}

// ec2Families checks ipFamilies against the ec2 pool. IPv6 alone is what
// the AWS VPC CNI does: a /80 prefix on the primary ENI, no IPv4 address
// assigned for pods (IPv4 egress is the node's). Dual-stack keeps the
// IPv4 pool as it is without IPv6 and adds the /80: each pod gets one
// address of each, IPv4 being the scarce one warm sizes (see
// section.WarmConfig.DualStack). Custom subnets put pods on ENIs of their
// own, and the prefix is on the primary ENI: refused with IPv6 either way.
func (c *Config) ec2Families() error {
	if c.Families == nil {
		return nil
	}
	if c.Warm.CustomSubnets() {
		return fmt.Errorf("%w: ipFamilies %v with subnets or subnetDiscovery: IPv6 addresses come from the primary ENI's /80 prefix, while pods in subnets of their own never get the primary ENI's addresses", ErrInvalidConfig, c.conf.IPFamilies)
	}
	c.Warm.IPv6 = true
	c.Warm.DualStack = len(c.Families) == 2
	c.Pool = alloc.StoredPool{Exclude: c.Warm.ExcludeIPs, IPv6: true}
	return nil
}

// parseFamilies reads ipFamilies: one or two distinct families; ["ipv4"],
// the default, leaves Families nil.
func (c *Config) parseFamilies() error {
	names := c.conf.IPFamilies
	if names == nil {
		return nil
	}
	if len(names) == 0 || len(names) > 2 {
		return fmt.Errorf("%w: ipFamilies %q must list one or two families (\"ipv4\", \"ipv6\")", ErrInvalidConfig, names)
	}
	var fams []alloc.Family
	for _, n := range names {
		f, err := alloc.ParseFamily(n)
		if err != nil {
			return fmt.Errorf("%w: ipFamilies: %v", ErrInvalidConfig, err)
		}
		if slices.Contains(fams, f) {
			return fmt.Errorf("%w: ipFamilies lists %s twice", ErrInvalidConfig, f)
		}
		fams = append(fams, f)
	}
	if len(fams) == 1 && fams[0] == alloc.IPv4 {
		return nil
	}
	c.Families = fams
	return nil
}

// Egress4Mode says whether a network's pods get a link-local IPv4 address
// for egress (ipv4Egress).
type Egress4Mode int

const (
	// Egress4Off: no egress address (a network with IPv4 pod addresses,
	// ipv4Egress false, or an interface that never carries the default).
	Egress4Off Egress4Mode = iota
	// Egress4Auto: an IPv6-only network with ipv4Egress absent: on when
	// the node has an IPv4 default route to masquerade to, which only ADD
	// can see (parsing never looks at the node).
	Egress4Auto
	// Egress4On: ipv4Egress true.
	Egress4On
)

// parseEgress4 reads ipv4Egress. It is only for IPv6-only pods: a pod with
// an IPv4 address of its own reaches IPv4 with it, and the egress address
// follows the default route, so an interface that never carries it
// (defaultRoute false) would get an address it cannot use.
func (c *Config) parseEgress4() error {
	v6only := len(c.Families) == 1 && c.Families[0] == alloc.IPv6
	never := c.DefaultRoute != nil && !*c.DefaultRoute
	on := c.conf.IPv4Egress
	switch {
	case on == nil && v6only && !never:
		c.Egress4 = Egress4Auto
	case on == nil || !*on:
		c.Egress4 = Egress4Off
	case !v6only:
		return fmt.Errorf("%w: ipv4Egress is for networks of IPv6 only (ipFamilies [\"ipv6\"]); pods of this network have an IPv4 address of their own", ErrInvalidConfig)
	case never:
		return fmt.Errorf("%w: ipv4Egress needs the interface to carry the pod's default route (defaultRoute is false)", ErrInvalidConfig)
	default:
		c.Egress4 = Egress4On
	}
	return nil
}

// families are the network's families, IPv4 when ipFamilies is absent.
func (c *Config) families() []alloc.Family {
	if c.Families == nil {
		return []alloc.Family{alloc.IPv4}
	}
	return c.Families
}

// validVethPrefix keeps the prefix short enough that the hash part of the
// host veth name stays long enough to be unique, and safe in interface names.
func validVethPrefix(s string) bool {
	if len(s) < 1 || len(s) > 5 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// Defaults of the ec2 source, as the AWS VPC CNI's.
const (
	defaultWarmIPTarget = 5
	defaultTrimAfter    = 5 * time.Minute
)

// defaultAddWait bounds how long ADD waits on a dry pool. The runtimes
// give the whole sandbox creation far more: kubelet calls RunPodSandbox
// with twice its runtimeRequestTimeout (2 min by default, so 4 min:
// k8s.io/cri-client remote_runtime.go, kubelet config defaults.go) and
// containerd runs CNI ADD under that request's context with no timeout of
// its own (internal/cri/server/sandbox_run.go, setupPodNetwork). 110 s
// fits inside kubelet's runtimeRequestTimeout itself (2 min), with 10 s
// left for the pause container after it, and covers what a node of a
// fleet-wide scale-up waits for the account's throttled buckets: 25 s,
// enough for one warm pass that creates and attaches ENIs (a few seconds
// each on EC2), failed 14,000-24,000 ADDs of 1,000 new nodes' 30,000 pods
// (each retried by kubelet after its back-off); 110 s failed 1,699
// (docs/scale.md). maxAddWait keeps the wait well inside the 4
// minutes.
const (
	defaultAddWait = 110 * time.Second
	maxAddWait     = alloc.MaxDemandWait
)

func (c *Config) parseEC2() error {
	inPool, top := c.conf.Pool.ec2Conf, c.conf.ec2Conf
	w := section.WarmConfig{
		WarmIPTarget:     pick(inPool.WarmIPTarget, top.WarmIPTarget, defaultWarmIPTarget),
		MinimumIPTarget:  pick(inPool.MinimumIPTarget, top.MinimumIPTarget, 0),
		MaxENIs:          pick(inPool.MaxENIs, top.MaxENIs, 0),
		PrefixDelegation: pick(inPool.PrefixDelegation, top.PrefixDelegation, false),
		SubnetID:         orDefault(inPool.SubnetID, top.SubnetID),
		SecurityGroupIDs: inPool.SecurityGroupIDs,
		Tags:             inPool.Tags,
		TrimAfter:        defaultTrimAfter,
	}
	if w.SecurityGroupIDs == nil {
		w.SecurityGroupIDs = top.SecurityGroupIDs
	}
	if w.Tags == nil {
		w.Tags = top.Tags
	}
	excludes := inPool.ExcludeIPs
	if excludes == nil {
		excludes = top.ExcludeIPs
	}
	for _, x := range excludes {
		p, err := parseExclude(x)
		if err != nil {
			return fmt.Errorf("%w: excludeIPs entry %q: %v", ErrInvalidConfig, x, err)
		}
		w.ExcludeIPs = append(w.ExcludeIPs, p)
	}
	if w.WarmIPTarget < 0 || w.MinimumIPTarget < 0 || w.MaxENIs < 0 {
		return fmt.Errorf("%w: warmIPTarget, minimumIPTarget and maxENIs must not be negative", ErrInvalidConfig)
	}
	if w.SubnetID != "" && !strings.HasPrefix(w.SubnetID, "subnet-") {
		return fmt.Errorf("%w: subnetID %q is not a subnet ID (subnet-...)", ErrInvalidConfig, w.SubnetID)
	}
	for _, sg := range w.SecurityGroupIDs {
		if !strings.HasPrefix(sg, "sg-") {
			return fmt.Errorf("%w: securityGroupIDs entry %q is not a security group ID (sg-...)", ErrInvalidConfig, sg)
		}
	}
	for k := range w.Tags {
		if k == "" || strings.HasPrefix(strings.ToLower(k), "aws:") || len(w.Tags) > 40 {
			return fmt.Errorf("%w: tag key %q (keys must be non-empty, not aws:, at most 40 tags)", ErrInvalidConfig, k)
		}
	}
	w.ReadyWhenFilled = pick(inPool.ReadyWhenFilled, top.ReadyWhenFilled, true)
	if err := parseSubnets(&w, inPool, top); err != nil {
		return err
	}
	c.Warm = w
	c.Pool = alloc.StoredPool{Exclude: w.ExcludeIPs, CreatedOnly: w.CustomSubnets()}
	c.IMDSEndpoint, c.EC2Endpoint, c.SNAT = c.conf.IMDSEndpoint, c.conf.EC2Endpoint, c.conf.SNAT
	c.IMDSv1Fallback = c.conf.IMDSv1Fallback
	wait := inPool.AddWaitSeconds
	if wait == nil {
		wait = top.AddWaitSeconds
	}
	var err error
	if c.AddWait, err = seconds("addWaitSeconds", wait, defaultAddWait); err != nil {
		return err
	}
	if c.AddWait > maxAddWait {
		return fmt.Errorf("%w: addWaitSeconds %v is above %v (kubelet gives the whole sandbox creation 4 minutes)", ErrInvalidConfig, c.AddWait.Seconds(), maxAddWait.Seconds())
	}
	return nil
}

// parseExclude reads an excludeIPs entry: an IPv4 address or CIDR.
func parseExclude(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		if !a.Is4() {
			return netip.Prefix{}, fmt.Errorf("only IPv4 is supported")
		}
		return netip.PrefixFrom(a, 32), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("neither an address nor a CIDR")
	}
	if !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("only IPv4 is supported")
	}
	return p.Masked(), nil
}

// pick returns the first value given, else def.
func pick[T any](a, b *T, def T) T {
	if a != nil {
		return *a
	}
	if b != nil {
		return *b
	}
	return def
}

func seconds(key string, v *float64, def time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	if *v < 0 || *v > 365*24*3600 {
		return 0, fmt.Errorf("%w: %s %v is out of range", ErrInvalidConfig, key, *v)
	}
	return time.Duration(*v * float64(time.Second)), nil
}

func atLeast(key string, v, minimum time.Duration, why string) error {
	if v < minimum {
		return fmt.Errorf("%w: %s %g is below the minimum of %g (%s)", ErrInvalidConfig, key, v.Seconds(), minimum.Seconds(), why)
	}
	return nil
}

// Find returns the plugin configuration for the subcommands: the file
// given, or else the first conflist in dir that has an eni-cni plugin, the
// order libcni and the runtimes use (lexical by file name).
func Find(path, dir string) ([]byte, string, error) {
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, path, fmt.Errorf("read config: %w", err)
		}
		conf, err := PluginConfFrom(data)
		if err != nil {
			return nil, path, fmt.Errorf("config %s: %w", path, err)
		}
		return conf, path, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", fmt.Errorf("look for an %s config in %s: %w", PluginType, dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".conflist", ".conf", ".json":
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, n)
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if conf, err := PluginConfFrom(data); err == nil {
			return conf, p, nil
		}
	}
	return nil, "", fmt.Errorf("no config with a plugin of type %q in %s (use --config)", PluginType, dir)
}

var ErrNotOurs = errors.New("no plugin of type " + PluginType)

// PluginConfFrom extracts our plugin's configuration from a conflist or a
// single-plugin conf, adding the list's name and cniVersion as a runtime
// would when it calls the plugin.
func PluginConfFrom(data []byte) ([]byte, error) {
	var list struct {
		CNIVersion string                   `json:"cniVersion"`
		Name       string                   `json:"name"`
		Type       string                   `json:"type"`
		Plugins    []map[string]interface{} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDecode, err)
	}
	if list.Type == PluginType {
		return data, nil
	}
	for _, p := range list.Plugins {
		if p["type"] == PluginType {
			p["name"] = list.Name
			p["cniVersion"] = list.CNIVersion
			return json.Marshal(p)
		}
	}
	return nil, ErrNotOurs
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
