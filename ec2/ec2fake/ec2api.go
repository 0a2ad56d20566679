package ec2fake

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

const (
	ec2Namespace = "http://ec2.amazonaws.com/doc/2016-11-15/"
	ec2Version   = "2016-11-15"
)

// apiError is an EC2 error reply: the code the SDK surfaces through
// smithy.APIError.ErrorCode(), the message, and the HTTP status.
type apiError struct {
	code    string
	message string
	status  int
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func apiErr(code, format string, args ...any) *apiError {
	return &apiError{code: code, message: fmt.Sprintf(format, args...), status: statusFor(code)}
}

// statusFor is the HTTP status real EC2 pairs with an error code: throttling
// and unavailability are 503 (retryable for the SDK), internal errors 500,
// everything the caller got wrong 400.
func statusFor(code string) int {
	switch code {
	case "RequestLimitExceeded", "Unavailable", "ServiceUnavailable", "InsufficientInstanceCapacity":
		return http.StatusServiceUnavailable
	case "InternalError", "InternalFailure":
		return http.StatusInternalServerError
	case "DryRunOperation":
		return http.StatusPreconditionFailed
	case "UnauthorizedOperation", "Blocked", "OptInRequired":
		return http.StatusForbidden
	case "AuthFailure":
		return http.StatusUnauthorized
	default:
		return http.StatusBadRequest
	}
}

// response is implemented by every reply type through the embedded meta.
type response interface {
	setRequestID(id string)
}

// meta carries the requestId child every EC2 reply starts with. The
// enclosing <ActionResponse xmlns=...> element is the start element serveEC2
// hands to writeXML (encoding/xml cannot marshal an XMLName field promoted
// from an unexported embedded struct).
type meta struct {
	RequestID string `xml:"requestId"`
}

func (m *meta) setRequestID(id string) { m.RequestID = id }

// returnResponse is the reply of actions whose SDK output has no fields.
type returnResponse struct {
	meta
	Return bool `xml:"return"`
}

type actionFunc func(s *Server, p params) (response, error)

// actions is the constant dispatch table of the supported EC2 actions. Each
// runs with s.mu held.
var actions = map[string]actionFunc{
	"AssignIpv6Addresses":             (*Server).assignIPv6Addresses,
	"AssignPrivateIpAddresses":        (*Server).assignPrivateIPAddresses,
	"AttachNetworkInterface":          (*Server).attachNetworkInterface,
	"CreateNetworkInterface":          (*Server).createNetworkInterface,
	"CreateTags":                      (*Server).createTags,
	"DeleteNetworkInterface":          (*Server).deleteNetworkInterface,
	"DeleteTags":                      (*Server).deleteTags,
	"DescribeInstanceTypes":           (*Server).describeInstanceTypes,
	"DescribeNetworkInterfaces":       (*Server).describeNetworkInterfaces,
	"DescribeSubnets":                 (*Server).describeSubnets,
	"DetachNetworkInterface":          (*Server).detachNetworkInterface,
	"ModifyNetworkInterfaceAttribute": (*Server).modifyNetworkInterfaceAttribute,
	"UnassignIpv6Addresses":           (*Server).unassignIPv6Addresses,
	"UnassignPrivateIpAddresses":      (*Server).unassignPrivateIPAddresses,
}

// Actions lists the EC2 actions the fake implements.
func Actions() []string {
	out := make([]string, 0, len(actions))
	for a := range actions {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// serveEC2 handles one Query API request: a form (POST body or query string)
// with Action and Version. Signatures are not checked.
func (s *Server) serveEC2(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	reqID := s.newRequestIDLocked()
	s.mu.Unlock()
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		writeError(w, reqID, apiErr("InvalidHttpRequest", "Method %s is not supported", r.Method))
		return
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, reqID, apiErr("MalformedQueryString", "cannot parse request: %v", err))
		return
	}
	action := r.Form.Get("Action")
	if action == "" {
		writeError(w, reqID, apiErr("MissingAction", "The request must contain the parameter Action"))
		return
	}
	s.mu.Lock()
	fault, lat := s.takeFaultLocked(action)
	prof := s.profileDelayLocked(action)
	if fault == nil && !s.admitLocked(action, r.Form) {
		// EC2 refuses a throttled call before doing any of its work.
		fault, prof = &Fault{Code: "RequestLimitExceeded", Message: "Request limit exceeded.", HTTPStatus: statusFor("RequestLimitExceeded")}, 0
	}
	s.mu.Unlock()
	sleepCtx(r.Context(), max(s.cfg.EC2BaseLatency, prof)+lat)
	if fault != nil {
		writeError(w, reqID, &apiError{code: fault.Code, message: fault.Message, status: fault.HTTPStatus})
		return
	}
	resp, err := s.dispatch(action, params{r.Form})
	s.flushChanges()
	if err != nil {
		writeError(w, reqID, err)
		return
	}
	s.runHook(action)
	resp.setRequestID(reqID)
	start := xml.StartElement{Name: xml.Name{Space: ec2Namespace, Local: action + "Response"}}
	writeXML(w, reqID, http.StatusOK, resp, start)
}

func (s *Server) dispatch(action string, p params) (response, error) {
	fn, ok := actions[action]
	if !ok {
		return nil, apiErr("InvalidAction", "The action %s is not valid for this web service.", action)
	}
	switch v := p.Get("Version"); v {
	case ec2Version:
	case "":
		return nil, apiErr("MissingParameter", "The request must contain the parameter Version")
	default:
		return nil, apiErr("NoSuchVersion", "An invalid or unsupported API version %s was specified (the fake speaks %s)", v, ec2Version)
	}
	if dry, _, err := p.optBool("DryRun"); err != nil {
		return nil, err
	} else if dry {
		return nil, apiErr("DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn(s, p)
}

// writeError sends the EC2 error document, which the SDK's ec2query
// deserializer reads as Response/Errors/Error/{Code,Message} and RequestID.
func writeError(w http.ResponseWriter, reqID string, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = apiErr("InternalError", "%v", err)
	}
	type xmlError struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	doc := struct {
		Errors    []xmlError `xml:"Errors>Error"`
		RequestID string     `xml:"RequestID"`
	}{Errors: []xmlError{{ae.code, ae.message}}, RequestID: reqID}
	writeXML(w, reqID, ae.status, doc, xml.StartElement{Name: xml.Name{Local: "Response"}})
}

func writeXML(w http.ResponseWriter, reqID string, status int, v any, start xml.StartElement) {
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	if err := xml.NewEncoder(&buf).EncodeElement(v, start); err != nil {
		// Only a programming error in the reply types gets here.
		http.Error(w, "ec2fake: marshal reply: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("X-Amzn-Requestid", reqID)
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// params reads the ec2query form encoding: scalars by name, lists flattened
// as Name.1, Name.2, ... and structures as Name.N.Member.
type params struct{ url.Values }

// indices returns the sorted list positions N present as prefix.N[.…].
func (p params) indices(prefix string) []int {
	seen := map[int]bool{}
	for k := range p.Values {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		if n, err := strconv.Atoi(num); err == nil && n > 0 {
			seen[n] = true
		}
	}
	out := make([]int, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// list returns the values of prefix.1, prefix.2, ... (with an optional
// member suffix such as ".Ipv4Prefix").
func (p params) list(prefix, member string) []string {
	var out []string
	for _, n := range p.indices(prefix) {
		out = append(out, p.Get(fmt.Sprintf("%s.%d%s", prefix, n, member)))
	}
	return out
}

func (p params) optInt(k string) (int, bool, error) {
	v := p.Get(k)
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, true, apiErr("InvalidParameterValue", "Value (%s) for parameter %s is invalid. Expected an integer.", v, k)
	}
	return n, true, nil
}

func (p params) optBool(k string) (bool, bool, error) {
	v := p.Get(k)
	if v == "" {
		return false, false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, true, apiErr("InvalidParameterValue", "Value (%s) for parameter %s is invalid. Expected a boolean.", v, k)
	}
	return b, true, nil
}

// tags reads prefix.N.Key / prefix.N.Value pairs.
func (p params) tags(prefix string) (map[string]string, error) {
	out := map[string]string{}
	for _, n := range p.indices(prefix) {
		k := p.Get(fmt.Sprintf("%s.%d.Key", prefix, n))
		if k == "" {
			return nil, apiErr("InvalidParameterValue", "Tag key must not be empty (%s.%d.Key)", prefix, n)
		}
		out[k] = p.Get(fmt.Sprintf("%s.%d.Value", prefix, n))
	}
	return out, nil
}

type filter struct {
	name   string
	values []string
}

func (p params) filters() []filter {
	var out []filter
	for _, n := range p.indices("Filter") {
		out = append(out, filter{
			name:   p.Get(fmt.Sprintf("Filter.%d.Name", n)),
			values: p.list(fmt.Sprintf("Filter.%d.Value", n), ""),
		})
	}
	return out
}

// matchFilters applies EC2 filter semantics: every filter must match, a
// filter matches when any of its values matches any of the resource's values
// for that name, and values may use the * and ? wildcards. values returns
// false for a filter name it does not know, which EC2 rejects.
func matchFilters(fs []filter, values func(name string) ([]string, bool)) (bool, error) {
	ok := true
	for _, f := range fs {
		have, known := values(f.name)
		if !known {
			return false, apiErr("InvalidParameterValue", "The filter '%s' is invalid", f.name)
		}
		if !slices.ContainsFunc(f.values, func(pat string) bool {
			return slices.ContainsFunc(have, func(v string) bool { return wildcard(pat, v) })
		}) {
			ok = false
		}
	}
	return ok, nil
}

// wildcard matches s against an EC2 filter pattern with * and ?.
func wildcard(pat, s string) bool {
	if pat == "" {
		return s == ""
	}
	switch pat[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if wildcard(pat[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && wildcard(pat[1:], s[1:])
	default:
		return s != "" && s[0] == pat[0] && wildcard(pat[1:], s[1:])
	}
}

// tagValues answers the tag-key and tag:<key> filters for a tag map.
func tagValues(tags map[string]string, name string) ([]string, bool) {
	if name == "tag-key" {
		keys := make([]string, 0, len(tags))
		for k := range tags {
			keys = append(keys, k)
		}
		return keys, true
	}
	if key, ok := strings.CutPrefix(name, "tag:"); ok {
		if v, has := tags[key]; has {
			return []string{v}, true
		}
		return nil, true
	}
	return nil, false
}
