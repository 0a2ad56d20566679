// Package ec2fake is a fake AWS Instance Metadata Service (IMDSv2) and EC2
// Query API server for tests and demos. It owns one consistent, in-memory
// model of a VPC, its subnets, its instances and their ENIs (one instance
// unless AddInstance launches more: a world of nodes sharing the account,
// the subnets' addresses and the EC2 API, each with its own IMDS), and
// serves it over HTTP in the real wire formats, so the unmodified
// aws-sdk-go-v2 clients
// (feature/ec2/imds and service/ec2) can be pointed at it with
// imds.Options.Endpoint / AWS_EC2_METADATA_SERVICE_ENDPOINT and
// ec2.Options.BaseEndpoint / AWS_ENDPOINT_URL_EC2.
//
// What EC2 assigns shows up in IMDS after Config.IMDSLag, reproducing the
// staleness of real IMDS; Config.Latency adds per-action reply times and a
// delay before an attached ENI's link appears (OnLink hooks). Instance-type limits are enforced with EC2's error
// codes. Test hooks count calls per action, inject throttling, errors and
// latency, pre-seed state and read it back; OnChange tells whoever plays
// the VPC's data plane what EC2 changed.
//
// The server only ever listens on loopback addresses.
package ec2fake

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config describes the world the fake serves. Zero values get defaults that
// look like a small real account in us-east-1.
type Config struct {
	InstanceType     string // default "m5.large"; must be in Limits or the built-in table
	InstanceID       string // default "i-0123456789abcdef0"
	AvailabilityZone string // default "us-east-1a"; the region is derived from it
	AccountID        string // default "111122223333"
	VPCID            string // default generated
	VPCCIDRs         []string
	// Subnets default to one 10.0.0.0/20 subnet. The first subnet holds the
	// instance's primary ENI.
	Subnets          []SubnetConfig
	SecurityGroupIDs []string // default one generated group
	PrimaryIP        string   // primary ENI's address; default the subnet's first usable one
	// IMDSLag delays how long EC2 changes take to appear in IMDS. Seeded
	// state is visible immediately.
	IMDSLag time.Duration
	// Limits adds or overrides instance types of the built-in table.
	Limits map[string]Limits
	// Clock replaces time.Now for the IMDS lag, token expiry and attach
	// times, so tests can move time by hand.
	Clock func() time.Time
	// EC2BaseLatency delays every EC2 reply; zero means 5ms, negative none.
	// Some delay is needed on loopback: when a reply arrives before the
	// client's net/http write loop has finished with the request, the SDK
	// closes the request body under it (smithy's safe reader then returns
	// io.EOF from WriteTo), net/http closes the connection and the SDK fails
	// reading a larger reply with "use of closed network connection". 2ms
	// avoided it on an idle machine, not under CI's -race run of every
	// package at once on 2 cores (1 failure in 200 calls): 5ms. Real EC2
	// takes 100s of ms, so no test depends on a faster fake.
	EC2BaseLatency time.Duration
	// Latency makes the fake take as long as EC2 and the instance do (see
	// RealisticLatency); nil answers at once.
	Latency *Latency
	// Throttling rate-limits the EC2 API as the account's token buckets
	// do (AccountThrottling); nil never throttles. SetThrottling changes
	// it later.
	Throttling *Throttling
}

// defaultEC2BaseLatency is the EC2 reply delay when Config leaves it zero.
const defaultEC2BaseLatency = 5 * time.Millisecond

// SubnetConfig is one subnet of the VPC.
type SubnetConfig struct {
	ID               string            `json:"id"`   // default generated
	CIDR             string            `json:"cidr"` // must be inside one of the VPC CIDRs
	AvailabilityZone string            `json:"availabilityZone,omitempty"`
	Tags             map[string]string `json:"tags,omitempty"`
	// IPv6CIDR is the subnet's IPv6 /64 (none when empty): ENIs in it may
	// get IPv6 addresses and /80 prefixes of it.
	IPv6CIDR string `json:"ipv6Cidr,omitempty"`
}

// Info describes the instance and the VPC the fake serves.
type Info struct {
	InstanceID       string         `json:"instanceId"`
	InstanceType     string         `json:"instanceType"`
	AvailabilityZone string         `json:"availabilityZone"`
	Region           string         `json:"region"`
	AccountID        string         `json:"accountId"`
	VPCID            string         `json:"vpcId"`
	VPCCIDRs         []string       `json:"vpcCidrs"`
	Subnets          []SubnetConfig `json:"subnets"`
	SecurityGroupIDs []string       `json:"securityGroupIds"`
	Limits           Limits         `json:"limits"`
}

// Server is the fake. All state sits behind one mutex so IMDS and EC2 always
// agree (modulo the configured lag).
type Server struct {
	cfg      Config // normalized
	region   string
	allTypes map[string]Limits
	vpcCIDRs []netip.Prefix
	now      func() time.Time

	mu          sync.Mutex
	seq         uint64 // id generator
	created     uint64 // ENI creation order
	reqSeq      uint64
	macs        map[string]bool
	enis        map[string]*eni
	subnets     map[string]*subnet
	subnetOrder []string
	instances   map[string]*instance
	instOrder   []string  // launch order; self first
	self        *instance // the instance the single-instance methods serve
	calls       map[string]int
	imdsCalls   int
	faults      map[string]*Fault
	latency     map[string]time.Duration
	imdsFault   imdsFault
	imdsLatency time.Duration
	hooks       map[string]func()
	former      []string // instances served before BecomeInstance
	profile     Latency
	rng         *rand.Rand
	linkHooks   []func(ENI)
	changeHooks []func(Change)
	changeSeq   uint64
	changes     []Change // noted, not yet given to changeHooks
	throttle    *throttle

	lmu     sync.Mutex
	servers []*http.Server
	imdsURL string
	ec2URL  string
	split   bool
}

// New builds a server with the primary ENI attached at device 0. It does not
// listen yet: use Start, StartSplit or StartAt, or mount the handlers.
func New(cfg Config) (*Server, error) {
	s := &Server{
		macs: map[string]bool{}, enis: map[string]*eni{}, subnets: map[string]*subnet{},
		instances: map[string]*instance{}, calls: map[string]int{},
		faults: map[string]*Fault{}, latency: map[string]time.Duration{}, hooks: map[string]func(){},
	}
	if err := s.normalize(cfg); err != nil {
		return nil, err
	}
	if err := s.buildSubnets(); err != nil {
		return nil, err
	}
	self, err := s.addInstanceLocked(InstanceConfig{
		ID: s.cfg.InstanceID, Type: s.cfg.InstanceType, AvailabilityZone: s.cfg.AvailabilityZone, PrimaryIP: s.cfg.PrimaryIP,
	})
	if err != nil {
		return nil, err
	}
	s.self = self
	s.SetThrottling(cfg.Throttling)
	return s, nil
}

func (s *Server) normalize(cfg Config) error {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&cfg.InstanceType, "m5.large")
	def(&cfg.InstanceID, "i-0123456789abcdef0")
	def(&cfg.AvailabilityZone, "us-east-1a")
	def(&cfg.AccountID, "111122223333")
	if cfg.VPCID == "" {
		cfg.VPCID = s.newIDLocked("vpc")
	}
	// Copy the slices: normalizing fills in ids and must not write into
	// the caller's Config.
	cfg.VPCCIDRs = slices.Clone(cfg.VPCCIDRs)
	cfg.Subnets = slices.Clone(cfg.Subnets)
	cfg.SecurityGroupIDs = slices.Clone(cfg.SecurityGroupIDs)
	if len(cfg.VPCCIDRs) == 0 {
		cfg.VPCCIDRs = []string{"10.0.0.0/16"}
	}
	if len(cfg.Subnets) == 0 {
		cfg.Subnets = []SubnetConfig{{CIDR: "10.0.0.0/20"}}
	}
	if len(cfg.SecurityGroupIDs) == 0 {
		cfg.SecurityGroupIDs = []string{s.newIDLocked("sg")}
	}
	switch {
	case cfg.EC2BaseLatency == 0:
		cfg.EC2BaseLatency = defaultEC2BaseLatency
	case cfg.EC2BaseLatency < 0:
		cfg.EC2BaseLatency = 0
	}
	s.now = cfg.Clock
	if s.now == nil {
		s.now = time.Now
	}
	if cfg.Latency != nil {
		s.profile = cfg.Latency.clone()
		if cfg.IMDSLag == 0 {
			cfg.IMDSLag = s.profile.IMDSLag
		}
	}
	s.rng = newRNG(s.profile.Seed)
	s.allTypes = DefaultLimits()
	for k, v := range cfg.Limits {
		s.allTypes[k] = v
	}
	if lim, ok := s.allTypes[cfg.InstanceType]; !ok {
		return fmt.Errorf("unknown instance type %q: add it to Config.Limits", cfg.InstanceType)
	} else if lim.MaxENIs < 1 || lim.IPv4PerENI < 1 {
		return fmt.Errorf("instance type %q: limits must be at least 1 ENI and 1 address", cfg.InstanceType)
	}
	if !validID(cfg.InstanceID, "i") {
		return fmt.Errorf("instance id %q: want i-<hex>", cfg.InstanceID)
	}
	s.region = strings.TrimRight(cfg.AvailabilityZone, "abcdefghijklmnopqrstuvwxyz")
	for i, c := range cfg.VPCCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil || !p.Addr().Is4() || p != p.Masked() {
			return fmt.Errorf("vpc cidr %q: want a masked IPv4 prefix", c)
		}
		s.vpcCIDRs = append(s.vpcCIDRs, p)
		cfg.VPCCIDRs[i] = p.String()
	}
	s.cfg = cfg
	return nil
}

func (s *Server) buildSubnets() error {
	for i := range s.cfg.Subnets {
		sc := &s.cfg.Subnets[i]
		p, err := netip.ParsePrefix(sc.CIDR)
		if err != nil || !p.Addr().Is4() || p != p.Masked() || p.Bits() < 16 || p.Bits() > 28 {
			return fmt.Errorf("subnet cidr %q: want a masked IPv4 prefix between /16 and /28", sc.CIDR)
		}
		if !slices.ContainsFunc(s.vpcCIDRs, func(v netip.Prefix) bool { return v.Bits() <= p.Bits() && v.Contains(p.Addr()) }) {
			return fmt.Errorf("subnet cidr %s is not inside the vpc cidrs %v", p, s.cfg.VPCCIDRs)
		}
		for _, o := range s.subnets {
			if o.cidr.Overlaps(p) {
				return fmt.Errorf("subnet cidr %s overlaps %s", p, o.cidr)
			}
		}
		if sc.ID == "" {
			sc.ID = s.newIDLocked("subnet")
		}
		if sc.AvailabilityZone == "" {
			sc.AvailabilityZone = s.cfg.AvailabilityZone
		}
		if _, dup := s.subnets[sc.ID]; dup || !validID(sc.ID, "subnet") {
			return fmt.Errorf("subnet id %q: duplicate or not subnet-<hex>", sc.ID)
		}
		tags := map[string]string{}
		for k, v := range sc.Tags {
			tags[k] = v
		}
		s.subnets[sc.ID] = &subnet{
			id: sc.ID, cidr: p, az: sc.AvailabilityZone, tags: tags,
			ips: map[netip.Addr]string{}, prefixes: map[netip.Prefix]string{},
		}
		if sc.IPv6CIDR != "" {
			p6, err := netip.ParsePrefix(sc.IPv6CIDR)
			if err != nil || !p6.Addr().Is6() || p6.Addr().Is4In6() || p6.Bits() != 64 || p6 != p6.Masked() {
				return fmt.Errorf("subnet ipv6 cidr %q: want a masked IPv6 /64", sc.IPv6CIDR)
			}
			s.subnets[sc.ID].v6 = newV6(p6)
		}
		s.subnetOrder = append(s.subnetOrder, sc.ID)
	}
	return nil
}

// Info returns the description of the (first) instance and the VPC.
func (s *Server) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.infoLocked(s.self)
}

// selfID is the id of the instance the single-instance methods serve.
func (s *Server) selfID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.self.id
}

func (s *Server) infoLocked(in *instance) Info {
	info := Info{
		InstanceID: in.id, InstanceType: in.typ,
		AvailabilityZone: in.az, Region: s.region, AccountID: s.cfg.AccountID,
		VPCID: s.cfg.VPCID, VPCCIDRs: slices.Clone(s.cfg.VPCCIDRs),
		SecurityGroupIDs: slices.Clone(s.cfg.SecurityGroupIDs), Limits: in.limits,
	}
	for _, id := range s.subnetOrder {
		sn := s.subnets[id]
		info.Subnets = append(info.Subnets, SubnetConfig{
			ID: sn.id, CIDR: sn.cidr.String(), AvailabilityZone: sn.az, Tags: cloneTags(sn.tags),
		})
		if sn.v6 != nil {
			info.Subnets[len(info.Subnets)-1].IPv6CIDR = sn.v6.cidr.String()
		}
	}
	return info
}

func cloneTags(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ServeHTTP serves IMDS under /latest/ and the EC2 Query API everywhere
// else, so one URL can stand in for both endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/latest/") || r.URL.Path == "/latest" {
		s.serveIMDS(w, r, s.selfLocked)
		return
	}
	s.serveEC2(w, r)
}

// IMDSHandler serves only the instance metadata service of the first
// instance (the current one after BecomeInstance); Instance.IMDSHandler
// serves any.
func (s *Server) IMDSHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serveIMDS(w, r, s.selfLocked) })
}

func (s *Server) selfLocked() *instance { return s.self }

// EC2Handler serves only the EC2 Query API.
func (s *Server) EC2Handler() http.Handler { return http.HandlerFunc(s.serveEC2) }

// newRequestIDLocked returns a UUID-shaped request id, as EC2 sends.
func (s *Server) newRequestIDLocked() string {
	s.reqSeq++
	a, b := mix(s.reqSeq), mix(^s.reqSeq)
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(a), uint16(a>>32), uint16(a>>48)&0xfff,
		uint16(b)&0xfff, b>>16)
}
