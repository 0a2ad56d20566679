package alloc

import (
	"time"

	"golang.org/x/sys/unix"
)

// Grace and cooldown are measured on CLOCK_BOOTTIME, not on the wall clock.
// The wall clock jumps: NTP steps it at boot, an operator sets it, a VM is
// resumed. A forward step larger than gcGraceSeconds made every young
// allocation look old to gc, which then freed the address of a pod still
// being created; a backward step kept freed addresses cooling for as long
// as the step. CLOCK_BOOTTIME only moves forward, counts time spent
// suspended (so a cooldown still expires across a suspend), and restarts at
// a reboot, which is fine: allocations and cooling entries are per boot and
// the boot ID check drops them when it changes.
//
// The wall-clock stamps (AllocatedAt, Cooling.Until) are still written: they
// are what people read in `eni-cni list` and in the file, and what an
// older eni-cni that does not know the boot stamps uses.

// BootClock returns the time since boot (CLOCK_BOOTTIME), or 0 if the
// kernel will not say; 0 makes the callers fall back to the wall clock.
func BootClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// fakeBootEpoch anchors the boot clock derived from an injected wall clock.
var fakeBootEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// boot is the manager's monotonic clock: Boot if injected; derived from Now
// when only the wall clock is injected (tests written before the boot clock
// existed move both by advancing Now); else CLOCK_BOOTTIME.
func (m *Manager) boot() time.Duration {
	switch {
	case m.Boot != nil:
		return m.Boot()
	case m.Now != nil:
		return m.Now().Sub(fakeBootEpoch)
	}
	return BootClock()
}

// cooling reports whether c still keeps its address out of use. An entry
// with a boot stamp is judged on the boot clock only. An entry written by
// an older eni-cni has only the wall-clock Until and is judged on the wall
// clock. Either way, an entry with more than one cooldown left cannot be
// right (a wall clock stepped back since the release, a file edited by
// hand): it no longer holds the address, so nothing in the file can freeze
// an address for longer than configured. The cooldown is the releasing
// network's (c.For): several networks may share a stateDir, and the one
// with the shortest cooldown must not end the others' (an address freed by
// a 300 s network was reused 30 ms later by a 5 s one). Entries of older
// versions record none and are bounded by this manager's.
func (m *Manager) cooling(c Cooling, now time.Time, boot time.Duration) bool {
	left := c.Until.Sub(now)
	if c.UntilBoot != 0 && boot > 0 {
		left = c.UntilBoot - boot
	}
	bound := m.Cooldown
	if c.For > 0 {
		bound = min(c.For, maxCooldown)
	}
	return left > 0 && (bound <= 0 || left <= bound)
}

// maxCooldown bounds a recorded cooldown as the configuration bounds it: a
// hand-edited entry cannot freeze an address for longer.
const maxCooldown = 365 * 24 * time.Hour

// stampLegacy gives entries of an older file boot stamps, in memory, so
// the next save writes them: a cooling entry what is left of its
// wall-clock cooldown, an allocation the age its wall-clock stamp says (at
// least zero). Until then each load derives them again from the wall
// clock; reads do not save (list and the other read-only commands must not
// write). Only entries of the current boot reach here (newBoot drops the
// others), so the boot clock applies to them.
func (m *Manager) stampLegacy(st *State, now time.Time, boot time.Duration) {
	if boot <= 0 {
		return
	}
	for i := range st.Cooling {
		c := &st.Cooling[i]
		if c.UntilBoot == 0 && m.cooling(*c, now, boot) {
			c.UntilBoot = boot + c.Until.Sub(now)
		}
	}
	for i := range st.Allocations {
		a := &st.Allocations[i]
		if a.AllocatedBoot != 0 || a.AllocatedAt.IsZero() {
			continue
		}
		age := min(max(now.Sub(a.AllocatedAt), 0), boot-1)
		a.AllocatedBoot = boot - age
	}
}

// Age is how long ago a was allocated, on the boot clock when a has a boot
// stamp, else on the wall clock. gc and `list` use it.
func (m *Manager) Age(a Allocation) time.Duration {
	if boot := m.boot(); a.AllocatedBoot != 0 && boot > 0 {
		return boot - a.AllocatedBoot
	}
	return m.now().Sub(a.AllocatedAt)
}

// Clock is the manager's wall clock (Now if injected, else time.Now).
func (m *Manager) Clock() time.Time { return m.now() }
