package ec2fake

import (
	"context"
	"maps"
	"time"
)

// AllActions is the action name that makes InjectFault and SetLatency apply
// to every EC2 action.
const AllActions = "*"

// Fault makes EC2 calls fail with an EC2 error reply.
type Fault struct {
	Code       string // EC2 error code, e.g. "RequestLimitExceeded"
	Message    string // default: a generic message naming the code
	HTTPStatus int    // default: the status real EC2 uses for Code
	// Times is how many calls fail before the fault clears itself; zero or
	// less means every call until ClearFaults.
	Times int
}

// Calls returns how many requests each EC2 action has received, including
// requests answered with an injected fault (so SDK retries are visible).
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.calls)
}

// ResetCalls zeroes the EC2 and IMDS call counters.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.calls)
	s.imdsCalls = 0
}

// IMDSCalls returns how many metadata GETs were served (token PUTs are not
// counted).
func (s *Server) IMDSCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.imdsCalls
}

// InjectFault makes the next f.Times calls of action (or of every action,
// with AllActions) fail with f. An action-specific fault wins over an
// AllActions one. A later call for the same action replaces the fault.
func (s *Server) InjectFault(action string, f Fault) {
	if f.Message == "" {
		f.Message = "Injected fault: " + f.Code
	}
	if f.HTTPStatus == 0 {
		f.HTTPStatus = statusFor(f.Code)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[action] = &f
}

// Throttle makes the next n calls of action fail with RequestLimitExceeded
// and HTTP 503, which is how EC2 throttles and what the SDK's standard
// retryer treats as a retryable throttling error.
func (s *Server) Throttle(action string, n int) {
	if n <= 0 {
		return
	}
	s.InjectFault(action, Fault{Code: "RequestLimitExceeded", Message: "Request limit exceeded.", Times: n})
}

// ClearFaults removes all injected EC2 and IMDS faults.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.faults)
	s.imdsFault = imdsFault{}
}

// SetLatency delays every reply of action (or of all actions, with
// AllActions) by d; zero removes the delay.
func (s *Server) SetLatency(action string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= 0 {
		delete(s.latency, action)
		return
	}
	s.latency[action] = d
}

// imdsFault makes the next n metadata GETs fail with an HTTP status.
type imdsFault struct {
	remaining int
	status    int
}

// FailIMDS makes the next n metadata GETs (not token PUTs) answer with the
// given HTTP status, e.g. 500 or 503, to exercise IMDS error handling.
func (s *Server) FailIMDS(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.imdsFault = imdsFault{remaining: n, status: status}
}

// SetIMDSLatency delays every IMDS reply by d.
func (s *Server) SetIMDSLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.imdsLatency = d
}

// takeFaultLocked counts the call and returns the fault and latency that
// apply to it, consuming one use of a counted fault.
func (s *Server) takeFaultLocked(action string) (*Fault, time.Duration) {
	s.calls[action]++
	lat, ok := s.latency[action]
	if !ok {
		lat = s.latency[AllActions]
	}
	key := action
	f := s.faults[key]
	if f == nil {
		key = AllActions
		f = s.faults[key]
	}
	if f == nil {
		return nil, lat
	}
	out := *f
	if f.Times > 0 {
		f.Times--
		if f.Times == 0 {
			delete(s.faults, key)
		}
	}
	return &out, lat
}

// sleepCtx waits d or until the client goes away.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
