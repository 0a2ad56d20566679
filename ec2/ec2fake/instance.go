package ec2fake

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// instance is one EC2 instance of the world: its type and limits, the ENIs
// attached to it and what its IMDS shows. Instances share the account, the
// VPC, its subnets (so their addresses never collide) and the EC2 API. An
// instance costs a few small records: no goroutine, no listener unless a
// caller starts one (Instance.StartIMDS).
type instance struct {
	id       string
	typ      string
	az       string
	limits   Limits
	attached []*eni               // by card, then device index
	snaps    []imdsSnap           // pending IMDS views, oldest first
	tokens   map[string]time.Time // IMDSv2 token -> expiry; nil until the first token
	imdsURL  string               // its own listener's, when started
}

// InstanceConfig describes an instance added to the world with AddInstance.
// Zero values take the world's: its Config.InstanceType and
// Config.AvailabilityZone, a generated id, the first subnet, the subnet's
// lowest free address.
type InstanceConfig struct {
	ID               string `json:"id,omitempty"`
	Type             string `json:"type,omitempty"`
	AvailabilityZone string `json:"availabilityZone,omitempty"`
	SubnetID         string `json:"subnetId,omitempty"` // the primary ENI's subnet
	PrimaryIP        string `json:"primaryIp,omitempty"`
}

// Instance is a handle on one instance of the world: what the single-instance
// methods of Server do for the first instance, it does for its own.
type Instance struct {
	s  *Server
	id string
}

// AddInstance launches another instance in the world with its primary ENI
// attached at device 0, visible in its IMDS at once.
func (s *Server) AddInstance(cfg InstanceConfig) (*Instance, error) {
	defer s.flushChanges()
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := s.addInstanceLocked(cfg)
	if err != nil {
		return nil, err
	}
	return &Instance{s: s, id: in.id}, nil
}

func (s *Server) addInstanceLocked(cfg InstanceConfig) (*instance, error) {
	if cfg.ID == "" {
		cfg.ID = s.newIDLocked("i")
	}
	if cfg.Type == "" {
		cfg.Type = s.cfg.InstanceType
	}
	if cfg.AvailabilityZone == "" {
		cfg.AvailabilityZone = s.cfg.AvailabilityZone
	}
	if cfg.SubnetID == "" {
		cfg.SubnetID = s.subnetOrder[0]
	}
	if !validID(cfg.ID, "i") {
		return nil, fmt.Errorf("instance id %q: want i-<hex>", cfg.ID)
	}
	if _, dup := s.instances[cfg.ID]; dup || slices.Contains(s.former, cfg.ID) {
		return nil, fmt.Errorf("instance %s exists already", cfg.ID)
	}
	lim, ok := s.allTypes[cfg.Type]
	if !ok {
		return nil, fmt.Errorf("unknown instance type %q: add it to Config.Limits", cfg.Type)
	}
	if lim.MaxENIs < 1 || lim.IPv4PerENI < 1 {
		return nil, fmt.Errorf("instance type %q: limits must be at least 1 ENI and 1 address", cfg.Type)
	}
	req := createRequest{subnetID: cfg.SubnetID}
	if cfg.PrimaryIP != "" {
		a, err := netip.ParseAddr(cfg.PrimaryIP)
		if err != nil {
			return nil, fmt.Errorf("primary ip %q of %s: %w", cfg.PrimaryIP, cfg.ID, err)
		}
		req.primary = a
	}
	in := &instance{id: cfg.ID, typ: cfg.Type, az: cfg.AvailabilityZone, limits: lim}
	e, err := s.createENILocked(req)
	if err != nil {
		return nil, fmt.Errorf("create primary eni of %s: %w", cfg.ID, err)
	}
	s.instances[in.id] = in
	s.instOrder = append(s.instOrder, in.id)
	if _, err := s.attachLocked(e, in.id, 0, 0, true); err != nil {
		s.dropInstanceLocked(in)
		_ = s.deleteENILocked(e)
		return nil, fmt.Errorf("attach primary eni of %s: %w", cfg.ID, err)
	}
	s.publishLocked(in, false)
	return in, nil
}

// dropInstanceLocked forgets an instance; its ENIs keep their attachments.
func (s *Server) dropInstanceLocked(in *instance) {
	delete(s.instances, in.id)
	s.instOrder = slices.DeleteFunc(s.instOrder, func(id string) bool { return id == in.id })
}

// Instance returns the handle of an instance of the world, or nil.
func (s *Server) Instance(id string) *Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.instances[id] == nil {
		return nil
	}
	return &Instance{s: s, id: id}
}

// Instances returns every instance of the world in the order they were
// launched; the first is the one the single-instance methods serve.
func (s *Server) Instances() []*Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Instance, 0, len(s.instOrder))
	for _, id := range s.instOrder {
		out = append(out, &Instance{s: s, id: id})
	}
	return out
}

// ID is the instance id.
func (h *Instance) ID() string { return h.id }

// with runs fn under the world's lock with the instance, or fails when the
// instance is gone (BecomeInstance replaced it).
func (h *Instance) with(fn func(in *instance) error) error {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	in := h.s.instances[h.id]
	if in == nil {
		return fmt.Errorf("instance %s: not in the world", h.id)
	}
	return fn(in)
}

// Info describes the instance and the VPC.
func (h *Instance) Info() Info {
	var out Info
	_ = h.with(func(in *instance) error { out = h.s.infoLocked(in); return nil })
	return out
}

// PrimaryENI returns the instance's ENI at device index 0.
func (h *Instance) PrimaryENI() ENI {
	var out ENI
	_ = h.with(func(in *instance) error { out = h.s.snapshotLocked(in.attached[0]); return nil })
	return out
}

// ENIs returns the ENIs attached to the instance, by device index.
func (h *Instance) ENIs() []ENI {
	var out []ENI
	_ = h.with(func(in *instance) error {
		for _, e := range in.attached {
			out = append(out, h.s.snapshotLocked(e))
		}
		return nil
	})
	return out
}

// SeedENI is Server.SeedENI for this instance.
func (h *Instance) SeedENI(spec ENISpec) (ENI, error) {
	defer h.s.flushChanges()
	var out ENI
	err := h.with(func(in *instance) (err error) { out, err = h.s.seedENILocked(in, spec); return err })
	return out, err
}

// SyncIMDS makes the instance's IMDS show the current EC2 state now.
func (h *Instance) SyncIMDS() {
	_ = h.with(func(in *instance) error { h.s.publishLocked(in, false); return nil })
}

// IMDSHandler serves the instance's metadata service.
func (h *Instance) IMDSHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.s.serveIMDS(w, r, func() *instance { return h.s.instances[h.id] })
	})
}

// StartIMDS serves the instance's IMDS on a new listener at addr (loopback
// only, as Server.StartAt), closed by Server.Close, and returns its URL.
func (h *Instance) StartIMDS(addr string) (string, error) {
	return h.StartIMDSHandler(addr, h.IMDSHandler())
}

// StartIMDSHandler is StartIMDS for a caller that wraps the handler.
func (h *Instance) StartIMDSHandler(addr string, handler http.Handler) (string, error) {
	h.s.lmu.Lock()
	url, err := h.s.listenLocked(addr, handler)
	h.s.lmu.Unlock()
	if err != nil {
		return "", err
	}
	return url, h.with(func(in *instance) error { in.imdsURL = url; return nil })
}

// IMDSURL is the URL of the instance's own IMDS listener (StartIMDS), or
// the world's (Start) for the first instance without one.
func (h *Instance) IMDSURL() string {
	var url string
	_ = h.with(func(in *instance) error { url = in.imdsURL; return nil })
	if url == "" && h.s.selfID() == h.id {
		return h.s.IMDSURL()
	}
	return url
}

// Env is Server.Env for a process running on this instance.
func (h *Instance) Env() []string { return h.s.env(h.IMDSURL(), h.s.EC2URL()) }

// EnvAt is Env for a process that reaches both APIs at url (a listener
// serving Handler).
func (h *Instance) EnvAt(url string) []string { return h.s.env(url, url) }

// Handler serves the instance's IMDS under /latest/ and the world's EC2
// Query API everywhere else: one listener a node can reach for both, as
// Server.ServeHTTP is for the first instance.
func (h *Instance) Handler() http.Handler {
	imds := h.IMDSHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/latest/") || r.URL.Path == "/latest" {
			imds.ServeHTTP(w, r)
			return
		}
		h.s.serveEC2(w, r)
	})
}
