package ec2

import (
	"hash/fnv"
	"time"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// A fleet launched together (an autoscaler's scale-up, a morning ramp)
// would otherwise make its hourly check and its leak sweep in the same
// minute of every hour, an hour after their first passes: a thousand
// Describe calls in a few seconds against the account's bucket of 100.
// Spread, each node makes them in its own window of the hour, chosen by
// its instance ID, so the fleet's calls arrive evenly (a thousand nodes:
// one every 3.6 s).
const (
	// slotWindow is how long a node's window lasts: long enough for a pass
	// of the timer (every 30 s, or every minute from cron) to fall into it.
	slotWindow = 5 * time.Minute
	// sweepShift puts the sweep half an hour after the node's check.
	sweepShift = 30 * time.Minute
)

// hourSlot is where in the hour the node of instanceID has its window.
func hourSlot(instanceID string) time.Duration {
	h := fnv.New64a()
	_, _ = h.Write([]byte(instanceID))
	return time.Duration(h.Sum64() % uint64(time.Hour/time.Second) * uint64(time.Second))
}

// inWindow reports whether now falls in the window that begins at slot
// past the hour.
func inWindow(now time.Time, slot time.Duration) bool {
	into := (time.Duration(now.UnixNano()) - slot) % time.Hour
	if into < 0 {
		into += time.Hour
	}
	return into < slotWindow
}

// hourlyDue reports whether the safety net's describe is due. Without
// Spread: an hour after the last. With it: in the node's window, at least
// half an hour after the last, and in any case 90 minutes after it (a node
// whose passes missed its window).
func (w *Warmer) hourlyDue(src *section.EC2) bool {
	now := w.now()
	if !w.Spread {
		return section.Elapsed(now, src.LastDescribe, describeEvery)
	}
	if section.Elapsed(now, src.LastDescribe, describeEvery+describeEvery/2) {
		return true
	}
	return section.Elapsed(now, src.LastDescribe, describeEvery/2) && inWindow(now, hourSlot(src.InstanceID))
}

// sweepWindow reports whether the node's once-a-boot sweep may run now:
// always without Spread, else in its own window of the hour.
func (w *Warmer) sweepWindow(src *section.EC2) bool {
	return !w.Spread || inWindow(w.now(), hourSlot(src.InstanceID)+sweepShift)
}
