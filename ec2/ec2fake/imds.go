package ec2fake

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// IMDSv2 header names, as sent by the SDK (Go canonicalizes case).
const (
	tokenHeader    = "X-Aws-Ec2-Metadata-Token"
	tokenTTLHeader = "X-Aws-Ec2-Metadata-Token-Ttl-Seconds"
	maxTokenTTL    = 21600 // seconds, the IMDS maximum
	metaDataPrefix = "/latest/meta-data"
	identityPath   = "/latest/dynamic/instance-identity/document"
)

// imdsView is an immutable rendering of what IMDS shows at one moment: every
// leaf under /latest/meta-data by its path relative to that root.
type imdsView struct {
	leaves   map[string]string
	identity string // instance identity document JSON
}

// imdsSnap is a view and the time from which IMDS serves it.
type imdsSnap struct {
	at   time.Time
	view *imdsView
}

// publishLocked records the current state for IMDS. With lagged, the view
// becomes visible only after Config.IMDSLag, and views published earlier
// keep being served until then; without, it is visible at once and replaces
// anything pending.
func (s *Server) publishLocked(in *instance, lagged bool) {
	snap := imdsSnap{at: s.now(), view: s.buildViewLocked(in)}
	if !lagged || s.cfg.IMDSLag <= 0 {
		in.snaps = []imdsSnap{snap}
		return
	}
	snap.at = snap.at.Add(s.cfg.IMDSLag)
	in.snaps = append(in.snaps, snap)
}

// publishENILocked publishes the view of the instance e is attached to, if
// it is: only that instance's IMDS can show the change.
func (s *Server) publishENILocked(e *eni, lagged bool) {
	if e.att == nil {
		return
	}
	if in := s.instances[e.att.instanceID]; in != nil {
		s.publishLocked(in, lagged)
	}
}

// viewLocked returns the newest view whose time has come and forgets older ones.
func (s *Server) viewLocked(in *instance) *imdsView {
	now := s.now()
	i := 0
	for i+1 < len(in.snaps) && !in.snaps[i+1].at.After(now) {
		i++
	}
	in.snaps = in.snaps[i:]
	return in.snaps[0].view
}

// dnsName is EC2's private DNS name for an address in the region.
func (s *Server) dnsName(a netip.Addr) string {
	host := "ip-" + strings.ReplaceAll(a.String(), ".", "-")
	if s.region == "us-east-1" {
		return host + ".ec2.internal"
	}
	return host + "." + s.region + ".compute.internal"
}

func (s *Server) buildViewLocked(in *instance) *imdsView {
	l := map[string]string{
		"instance-id":                 in.id,
		"instance-type":               in.typ,
		"placement/availability-zone": in.az,
		"placement/region":            s.region,
		"services/domain":             "amazonaws.com",
		"services/partition":          "aws",
	}
	attached := in.attached
	primary := attached[0]
	l["mac"] = primary.mac
	if primary.primary.IsValid() {
		l["local-ipv4"] = primary.primary.String()
		l["local-hostname"] = s.dnsName(primary.primary)
		l["hostname"] = s.dnsName(primary.primary)
	}
	for _, e := range attached {
		s.addENILeavesLocked(l, in, e)
	}
	return &imdsView{leaves: l, identity: s.identityDocument(in, primary)}
}

// addENILeavesLocked renders network/interfaces/macs/<mac>/. Lists are
// newline separated without a trailing newline, and entries that would be
// empty are absent (404), as in real IMDS.
func (s *Server) addENILeavesLocked(l map[string]string, in *instance, e *eni) {
	sn := s.subnets[e.subnetID]
	base := "network/interfaces/macs/" + e.mac + "/"
	set := func(k, v string) { l[base+k] = v }
	set("device-number", strconv.Itoa(e.att.device))
	if in.limits.cards() > 1 {
		set("network-card", strconv.Itoa(e.att.card))
	}
	set("interface-id", e.id)
	set("mac", e.mac)
	set("owner-id", s.cfg.AccountID)
	set("subnet-id", sn.id)
	set("subnet-ipv4-cidr-block", sn.cidr.String())
	set("vpc-id", s.cfg.VPCID)
	set("vpc-ipv4-cidr-block", s.cfg.VPCCIDRs[0])
	set("vpc-ipv4-cidr-blocks", strings.Join(s.cfg.VPCCIDRs, "\n"))
	if len(e.sgs) > 0 {
		set("security-group-ids", strings.Join(e.sgs, "\n"))
	}
	if ips := e.privateIPs(); len(ips) > 0 {
		set("local-ipv4s", strings.Join(addrStrings(ips), "\n"))
		set("local-hostname", s.dnsName(ips[0]))
	}
	if len(e.prefixes) > 0 {
		set("ipv4-prefix", strings.Join(prefixStrings(e.prefixes), "\n"))
	}
	s.ipv6Leaves(e, set)
}

func (s *Server) identityDocument(in *instance, primary *eni) string {
	doc := map[string]any{
		"accountId":        s.cfg.AccountID,
		"architecture":     "x86_64",
		"availabilityZone": in.az,
		"imageId":          "ami-0123456789abcdef0",
		"instanceId":       in.id,
		"instanceType":     in.typ,
		"pendingTime":      primary.att.at.Format(time.RFC3339),
		"region":           s.region,
		"version":          "2017-09-30",
	}
	if primary.primary.IsValid() {
		doc["privateIp"] = primary.primary.String()
	}
	b, _ := json.MarshalIndent(doc, "", "  ") // a map of plain values cannot fail
	return string(b)
}

// lookup returns a leaf's value, or the listing of a directory: children one
// per line, sub-directories with a trailing slash, sorted, no final newline.
// A trailing slash on the request is ignored, as real IMDS does.
func (v *imdsView) lookup(p string) (string, bool) {
	p = strings.Trim(p, "/")
	if val, ok := v.leaves[p]; ok {
		return val, true
	}
	dir := p + "/"
	if p == "" {
		dir = ""
	}
	seen := map[string]bool{}
	for k := range v.leaves {
		rest, ok := strings.CutPrefix(k, dir)
		if !ok {
			continue
		}
		if head, _, sub := strings.Cut(rest, "/"); sub {
			seen[head+"/"] = true
		} else {
			seen[rest] = true
		}
	}
	if len(seen) == 0 {
		return "", false
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, "\n"), true
}

// serveIMDS serves the IMDS of the instance pick returns (called with the
// lock held; nil when the instance has left the world: 404).
func (s *Server) serveIMDS(w http.ResponseWriter, r *http.Request, pick func() *instance) {
	switch {
	case r.URL.Path == "/latest/api/token":
		s.serveToken(w, r, pick)
	case r.URL.Path == metaDataPrefix || strings.HasPrefix(r.URL.Path, metaDataPrefix+"/") || r.URL.Path == identityPath:
		s.serveMetadata(w, r, pick)
	default:
		imdsStatus(w, http.StatusNotFound)
	}
}

// serveToken implements PUT /latest/api/token: a TTL header between 1 and
// 21600 seconds is required, and the reply echoes it in the same header (the
// SDK fails without it).
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request, pick func() *instance) {
	if r.Method != http.MethodPut {
		imdsStatus(w, http.StatusMethodNotAllowed)
		return
	}
	// Real IMDS refuses proxied token requests.
	if r.Header.Get("X-Forwarded-For") != "" {
		imdsStatus(w, http.StatusForbidden)
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get(tokenTTLHeader))
	if err != nil || ttl < 1 || ttl > maxTokenTTL {
		imdsStatus(w, http.StatusBadRequest)
		return
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails
	tok := base64.StdEncoding.EncodeToString(raw[:])
	s.mu.Lock()
	in := pick()
	if in == nil {
		s.mu.Unlock()
		imdsStatus(w, http.StatusNotFound)
		return
	}
	now := s.now()
	for t, exp := range in.tokens {
		if !exp.After(now) {
			delete(in.tokens, t)
		}
	}
	if in.tokens == nil {
		in.tokens = map[string]time.Time{}
	}
	in.tokens[tok] = now.Add(time.Duration(ttl) * time.Second)
	s.mu.Unlock()
	w.Header().Set(tokenTTLHeader, strconv.Itoa(ttl))
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(tok))
}

func (s *Server) serveMetadata(w http.ResponseWriter, r *http.Request, pick func() *instance) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		imdsStatus(w, http.StatusMethodNotAllowed)
		return
	}
	s.mu.Lock()
	in := pick()
	var exp time.Time
	ok := in != nil
	if ok {
		exp, ok = in.tokens[r.Header.Get(tokenHeader)]
	}
	if !ok || !exp.After(s.now()) {
		s.mu.Unlock()
		imdsStatus(w, http.StatusUnauthorized)
		return
	}
	s.imdsCalls++
	fault, lat := 0, s.imdsLatency
	if s.imdsFault.remaining > 0 {
		s.imdsFault.remaining--
		fault = s.imdsFault.status
	}
	view := s.viewLocked(in)
	s.mu.Unlock()

	sleepCtx(r.Context(), lat)
	if fault != 0 {
		imdsStatus(w, fault)
		return
	}
	var body string
	if r.URL.Path == identityPath {
		body, ok = view.identity, true
	} else {
		body, ok = view.lookup(strings.TrimPrefix(r.URL.Path, metaDataPrefix))
	}
	if !ok {
		imdsStatus(w, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write([]byte(body))
}

// imdsStatus writes an error page shaped like the real IMDS ones.
func imdsStatus(w http.ResponseWriter, code int) {
	title := fmt.Sprintf("%d - %s", code, http.StatusText(code))
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(code)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
	"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>%s</title>
 </head>
 <body>
  <h1>%s</h1>
 </body>
</html>
`, title, title)
}
