package section

import (
	"fmt"
	"hash/fnv"
	"time"
	"unicode/utf8"
)

// Results of a warm pass, as PassOutcome.Result: what an ADD waiting on a
// dry pool reports when it gets no address.
const (
	PassDone          = "done"           // the pool reached its targets
	PassThrottled     = "throttled"      // EC2 throttled the calls (RequestLimitExceeded) beyond the SDK's retries
	PassDenied        = "iam-denied"     // the instance role may not make a call (UnauthorizedOperation)
	PassSubnetFull    = "subnet-full"    // the subnet has no free addresses or /28 blocks left
	PassInstanceLimit = "instance-limit" // every ENI the type and maxENIs allow is full
	PassFailed        = "failed"         // anything else; Message says what
)

// MaxOutcomeMessage bounds the error text kept with an outcome: it ends up
// in the CNI error of every waiting ADD, and so in the pod's events. It is
// applied when the outcome is recorded and again when it is read, so a
// hostile or hand-edited store cannot put megabytes into an error.
const MaxOutcomeMessage = 400

// TruncateOutcome cuts msg to MaxOutcomeMessage bytes, on a rune boundary.
func TruncateOutcome(msg string) string {
	if len(msg) <= MaxOutcomeMessage {
		return msg
	}
	cut := MaxOutcomeMessage
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// PassOutcome is how the last warm pass ended.
type PassOutcome struct {
	At      time.Time `json:"at"`
	Result  string    `json:"result"`
	Message string    `json:"message,omitempty"`
	// Streak counts the throttled passes in a row that end with this one
	// (0 for any other result): the pause before the next grows with it.
	Streak int `json:"streak,omitempty"`
	// Boot is the boot the pass ran in (Growth only).
	Boot string `json:"boot,omitempty"`
	// Pace scales the pause after a throttled pass (1/32 to 2; 0 is 1):
	// the pass's pace (ec2's backoff.go), so that a node holding less of
	// its target comes back sooner than one holding more, and a node whose
	// ADDs have waited long sooner still.
	Pace float64 `json:"pace,omitempty"`
}

// MinPausePace is the smallest factor a pass's pace may apply to the
// pause after it, and minPause the shortest pause a pace may make (drawn
// from its upper half: 0.5 to 1 s): a node's waiting ADDs start a pass at
// most about once a second however long they waited, and a hostile or
// torn store cannot make them start passes back to back.
const (
	MinPausePace = 1.0 / 32
	minPause     = time.Second
)

// Failed reports whether the pass could not do its work for a reason that
// a waiting ADD should report (a full node is reported as such instead).
func (o *PassOutcome) Failed() bool {
	return o != nil && o.Result != PassDone && o.Result != PassInstanceLimit
}

// Describe is the outcome in words, for messages.
func (o *PassOutcome) Describe() string {
	if o == nil {
		return "no warm pass recorded"
	}
	what := map[string]string{
		PassDone:          "done",
		PassThrottled:     "throttled by EC2",
		PassDenied:        "denied by IAM (the instance role lacks a permission)",
		PassSubnetFull:    "the subnet is full",
		PassInstanceLimit: "the instance's ENI and address limits are reached",
		PassFailed:        "failed",
	}[o.Result]
	if what == "" {
		what = TruncateOutcome(o.Result) // a hand-edited or hostile store
	}
	if o.Message != "" {
		return what + ": " + TruncateOutcome(o.Message)
	}
	return what
}

// ThrottledBase and ThrottledCap bound the pause after a throttled pass.
const (
	ThrottledBase = 2 * time.Second
	ThrottledCap  = 30 * time.Second
)

// ThrottledPause is how long no pass calls EC2 after a throttled one, the
// ADDs' and the timer's alike: EC2 throttles per account, so a throttle
// says the fleet asks too much, and every node that comes back at once
// meets the empty bucket again. It doubles with each throttled pass in a
// row (ThrottledBase to ThrottledCap), scaled by the pass's pace (1/32 to
// 2: the node's pods waiting longest come back sooner, a node holding
// more later; never under minPause), and is drawn from its upper half by
// the instance's ID, so a fleet throttled together comes back spread. 0
// when the last pass was not throttled.
func (s *EC2) ThrottledPause() time.Duration { return s.LastPass.Pause(s.InstanceID) }

// Pausing reports whether the pause after a throttled pass still runs at
// now. An outcome stamped after now is from before a backward step of the
// wall clock: no pause.
func (s *EC2) Pausing(now time.Time) bool { return s.LastPass.Pausing(s.InstanceID, now) }

// Pause is ThrottledPause after the pass o of instanceID.
func (o *PassOutcome) Pause(instanceID string) time.Duration {
	if o == nil || o.Result != PassThrottled {
		return 0
	}
	d := ThrottledCap
	if n := max(o.Streak, 1); n < 8 {
		d = min(ThrottledCap, ThrottledBase<<(n-1))
	}
	if o.Pace > 0 {
		d = max(minPause, time.Duration(float64(d)*min(2, max(MinPausePace, o.Pace))))
	}
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", instanceID, o.Streak)
	return d/2 + time.Duration(uint64(h.Sum32())%uint64(d/2+1))
}

// Pausing is Pausing after the pass o of instanceID.
func (o *PassOutcome) Pausing(instanceID string, now time.Time) bool {
	return o != nil && !o.At.After(now) && now.Before(o.At.Add(o.Pause(instanceID)))
}
