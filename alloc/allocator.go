package alloc

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/fault"
)

// ErrPoolExhausted means no address is free right now. It is temporary:
// cooling addresses come back and `eni-cni warm` adds more.
var ErrPoolExhausted = errors.New("no free address")

// ExhaustedError carries the pool counts of a failed allocation so the
// message tells the operator why the pool is empty.
type ExhaustedError struct {
	Counts Counts
	// Family is the family with no free address, on a network of two
	// (Counts are then that family's); "" on a network of one.
	Family string
}

func (e *ExhaustedError) Error() string {
	what := "address"
	if e.Family != "" {
		what = e.Family + " address"
	}
	return fmt.Sprintf("no free %s (%d allocated, %d cooling, %d in pool)",
		what, e.Counts.Allocated, e.Counts.Cooling, e.Counts.Total)
}

func (e *ExhaustedError) Is(target error) bool { return target == ErrPoolExhausted }

// Counts summarises a pool.
type Counts struct {
	Total     int `json:"total"`
	Free      int `json:"free"`
	Cooling   int `json:"cooling"`
	Allocated int `json:"allocated"`
	// Outside counts allocations of addresses the pool no longer holds
	// (static ranges changed, an address gone from the ec2 pool). They are
	// kept, as their pods may still use them, and never handed out again.
	Outside int `json:"outside,omitempty"`
	// Families are the counts of each family, on a network that is not
	// of IPv4 only (the fields above are then their sums, and a pod
	// of a dual-stack network holds one address of each).
	Families *FamilyCounts `json:"families,omitempty"`
}

// FamilyCounts are the counts of each family of a network's pool (a
// pointer, so that Counts stays comparable).
type FamilyCounts struct {
	IPv4 *Counts `json:"ipv4,omitempty"`
	IPv6 *Counts `json:"ipv6,omitempty"`
}

// Of returns the counts of family f, if the network has it.
func (fc *FamilyCounts) Of(f Family) (Counts, bool) {
	if fc == nil {
		return Counts{}, false
	}
	p := fc.IPv4
	if f == IPv6 {
		p = fc.IPv6
	}
	if p == nil {
		return Counts{}, false
	}
	return *p, true
}

// Request is what an ADD knows about the attachment it wants an address for.
type Request struct {
	Key
	PodNamespace, PodName, PodUID string
	Netns                         string
	HostVeth                      string
	// Egress4: the attachment also gets an address of Egress4Range, in
	// the same save as its pod address (an IPv6-only network's IPv4
	// egress).
	Egress4 bool
}

// Manager performs each operation as one locked read-modify-write of the
// store. It never holds the lock across anything but state I/O.
type Manager struct {
	Store       Store
	Pool        Pool
	BootID      string        // current boot; allocations of other boots are dropped
	Cooldown    time.Duration // how long a freed address rests before reuse
	LockTimeout time.Duration
	// Families are the families each attachment gets one address of
	// (nil: IPv4 only). A dual-stack attachment takes one of each in one
	// save, or none.
	Families []Family
	// Network is the network whose calls this manager serves (several
	// networks may share one store). Its saves record it in the store
	// (State.Networks); a store that does not record it is asked about
	// like a missing one (OnMissing). Empty: no such check.
	Network string
	// Now is the wall clock, for the stamps people read; Boot is the clock
	// that does not jump, for grace and cooldown (clock.go). Both default
	// to the system's; tests inject them.
	Now  func() time.Time
	Boot func() time.Duration
	// OnMissing is asked, under the lock, before a state is used that does
	// not know this manager's network: the store had no state file (a new
	// state), or the file does not record Network (State.Records; another
	// network sharing the stateDir wrote it after this one's was lost). An
	// error refuses the operation. A brand-new node (or network)
	// legitimately has no record; a node whose file was lost (or whose
	// stateDir changed) still has pods, and starting from a state that
	// lacks them would hand their addresses out again. The caller, who can
	// see the node, tells the two apart (plugin/plugin.go: stateLost).
	OnMissing func(st *State) error
	// Admit, if set, is asked under the lock before a new address is
	// handed out; its error fails the allocation and changes nothing. The
	// ec2 source uses it to refuse addresses of a boot that has not yet
	// checked the instance's identity.
	Admit func(st *State) error
	// ReadOnly (dry runs) makes Update save nothing: not the housekeeping
	// of a load (a new boot, stamps of an older file), and a change fn
	// reports is refused with ErrReadOnly. The store is made read-only
	// too by whoever sets this (DiskStore.SetReadOnly).
	ReadOnly bool
}

// ErrReadOnly: a write through a store or manager opened for a dry run.
var ErrReadOnly = errors.New("state opened read-only (dry run)")

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Update runs fn on the current state under the lock and saves the result
// when fn reports a change. It is the one place that locks, loads and saves.
func (m *Manager) Update(ctx context.Context, fn func(st *State) (changed bool, err error)) (err error) {
	if m.LockTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.LockTimeout)
		defer cancel()
	}
	if err := m.Store.Lock(ctx); err != nil {
		return err
	}
	defer func() {
		if uerr := m.Store.Unlock(); uerr != nil && err == nil {
			err = uerr
		}
	}()
	st, err := m.Load()
	if err != nil {
		return err
	}
	fault.Point("lock:after-load")
	// Expired cooling entries, a previous boot's allocations and the boot
	// stamps given to an older file's entries are applied in memory and
	// saved with the next change: a look-up (DEL or CHECK of an unknown
	// key, list, a refused gc) never writes the file. Writing it would
	// create a file where there was none, hiding a lost state.
	m.newBoot(st)
	m.stampLegacy(st, m.now(), m.boot())
	m.pruneCooling(st)
	m.pruneDemands(st)
	fnChanged, err := fn(st)
	if err != nil {
		return err
	}
	if m.ReadOnly {
		if fnChanged {
			return ErrReadOnly
		}
		return nil
	}
	if fnChanged {
		// Tombstones are pruned on every save, never a reason for one.
		st.EC2.PruneTombstones(m.now())
		st.RecordNetwork(m.Network)
		return m.Store.Save(st)
	}
	return nil
}

// Load reads the state without the lock (for STATUS, which must not queue
// behind a busy ADD: saves replace the file by rename, so a read sees one
// whole state), with the OnMissing check that Update makes.
func (m *Manager) Load() (*State, error) {
	st, err := m.Store.Load()
	if err != nil {
		return nil, err
	}
	if m.OnMissing != nil && (st.Missing() || (m.Network != "" && !st.Records(m.Network))) {
		if err := m.OnMissing(st); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// newBoot drops the allocations of a previous boot. Pods and their veths do
// not survive a reboot but /var/lib does; without this the addresses of
// dead pods would stay taken forever. The pool itself is kept.
func (m *Manager) newBoot(st *State) {
	if m.BootID == "" || st.BootID == m.BootID {
		return
	}
	if st.BootID != "" {
		st.Allocations = []Allocation{}
		st.Cooling = []Cooling{}
		st.Demands = nil
	}
	st.BootID = m.BootID
}

func (m *Manager) pruneCooling(st *State) {
	now, boot := m.now(), m.boot()
	kept := st.Cooling[:0]
	for _, c := range st.Cooling {
		if m.cooling(c, now, boot) {
			kept = append(kept, c)
		}
	}
	st.Cooling = kept
}

// Allocate returns the address of req's attachment, taking a free one if the
// attachment has none yet. existed is true when ADD is being repeated.
func (m *Manager) Allocate(ctx context.Context, req Request) (a Allocation, existed bool, err error) {
	a, existed, _, err = m.AllocateWithSection(ctx, req)
	return a, existed, err
}

// AllocateWithSection is Allocate that also returns the ec2 section
// (State.EC2, nil for a static pool) as read in the same locked read,
// so the ec2 provider can prepare the address's ENI without reading the state
// again. The section is the caller's copy; changing it changes nothing.
func (m *Manager) AllocateWithSection(ctx context.Context, req Request) (a Allocation, existed bool, sec *section.EC2, err error) {
	err = m.Update(ctx, func(st *State) (changed bool, err error) {
		sec = st.EC2
		a, existed, changed, err = m.AllocateIn(st, req)
		return changed, err
	})
	if err != nil {
		return Allocation{}, false, nil, fmt.Errorf("allocate ip for %s: %w", req.Key, err)
	}
	return a, existed, sec, nil
}

// AllocateIn is Allocate on a state the caller holds under the lock (in an
// Update): the attachment's address, or a free one taken for it. A
// waiting ADD's demand is fulfilled with it. changed reports whether st
// must be saved. The pool being empty is an *ExhaustedError.
func (m *Manager) AllocateIn(st *State, req Request) (a Allocation, existed, changed bool, err error) {
	if i := st.Find(req.Key); i >= 0 {
		return st.Allocations[i], true, st.DropDemand(req.Key), nil
	}
	if m.Admit != nil {
		if err := m.Admit(st); err != nil {
			return Allocation{}, false, false, err
		}
	}
	fams := m.families()
	var ips [2]netip.Addr
	var eni string
	for i, f := range fams {
		ip, e, ok := m.pick(st, f)
		if !ok {
			if len(fams) == 1 {
				return Allocation{}, false, false, &ExhaustedError{Counts: m.Counts(st)}
			}
			return Allocation{}, false, false, &ExhaustedError{Counts: m.familyCounts(st, f), Family: f.String()}
		}
		ips[i] = ip
		if i == 0 {
			eni = e
		}
	}
	var egress netip.Addr
	if req.Egress4 {
		var ok bool
		if egress, ok = pickEgress4(st); !ok {
			return Allocation{}, false, false, &ExhaustedError{Counts: egress4Counts(st), Family: "ipv4 egress"}
		}
		st.LastEgress4 = egress
	}
	a = Allocation{
		Key: req.Key, IP: ips[0], IP6: ips[1], Egress4: egress, ENI: eni,
		PodNamespace: req.PodNamespace, PodName: req.PodName, PodUID: req.PodUID,
		Netns: req.Netns, HostVeth: req.HostVeth, AllocatedAt: m.now().UTC(), AllocatedBoot: m.boot(),
	}
	st.Allocations = append(st.Allocations, a)
	for _, ip := range a.Addrs() {
		if ip.Is4() {
			st.LastIP = ip
		} else {
			st.LastIP6 = ip
		}
	}
	st.DropDemand(req.Key)
	return a, false, true, nil
}

// pick returns the first usable address of family f after the last one
// given (LastIP, LastIP6), wrapping around.
func (m *Manager) pick(st *State, f Family) (netip.Addr, string, bool) {
	if len(m.Families) == 0 {
		return m.pickFrom(st, m.Pool.Addrs(st), st.LastIP)
	}
	if f == IPv4 {
		return m.pickFrom(st, addrsOf(m.Pool, st, IPv4), st.LastIP)
	}
	last := st.LastIP6
	if !last.IsValid() && st.LastIP.Is6() {
		last = st.LastIP
	}
	if s, ok := m.Pool.(seeker); ok {
		return m.pickAfter(st, s, last)
	}
	return m.pickFrom(st, addrsOf(m.Pool, st, IPv6), last)
}

// taken are the addresses held or cooling.
func taken(st *State) map[netip.Addr]bool {
	t := make(map[netip.Addr]bool, len(st.Allocations)+len(st.Cooling))
	for _, a := range st.Allocations {
		for _, ip := range a.Wired() {
			t[ip] = true
		}
	}
	for _, c := range st.Cooling {
		t[c.IP] = true
	}
	return t
}

// pickFrom returns the first address of addrs not taken after last,
// wrapping around.
func (m *Manager) pickFrom(st *State, addrs iter.Seq2[netip.Addr, string], last netip.Addr) (netip.Addr, string, bool) {
	taken := taken(st)
	var first netip.Addr
	var firstENI string
	seenLast := !last.IsValid()
	for ip, eni := range addrs {
		if taken[ip] {
			if ip == last {
				seenLast = true
			}
			continue
		}
		if seenLast {
			return ip, eni, true
		}
		if !first.IsValid() {
			first, firstENI = ip, eni
		}
		if ip == last {
			seenLast = true
		}
	}
	// Nothing free after last (or last left the pool): wrap around.
	return first, firstENI, first.IsValid()
}

// seeker is a pool that can start its walk anywhere: an IPv6 range holds
// up to 2^64 addresses or more, and pickFrom walks from the first one to
// the last given on every ADD.
type seeker interface {
	// AddrsAfter yields the IPv6 addresses after a (from the first when
	// a is not in the pool), then from the first up to a, in pool order.
	AddrsAfter(st *State, a netip.Addr) iter.Seq2[netip.Addr, string]
}

func (m *Manager) pickAfter(st *State, s seeker, last netip.Addr) (netip.Addr, string, bool) {
	taken := taken(st)
	for ip, eni := range s.AddrsAfter(st, last) {
		if !taken[ip] {
			return ip, eni, true
		}
	}
	return netip.Addr{}, "", false
}

// Release frees the address of k into cooldown. If ip is valid the
// allocation is only released while it still holds ip, so a slow DEL cannot
// free an address that was given out again. found is false when there was
// nothing to release; that is not an error (DEL is idempotent).
func (m *Manager) Release(ctx context.Context, k Key, ip netip.Addr) (a Allocation, found bool, err error) {
	return m.release(ctx, k, ip, m.Cooldown)
}

// Undo releases an allocation that never reached a pod (ADD failed after
// allocating), so no cooldown is needed.
func (m *Manager) Undo(ctx context.Context, k Key, ip netip.Addr) error {
	_, _, err := m.release(ctx, k, ip, 0)
	return err
}

func (m *Manager) release(ctx context.Context, k Key, ip netip.Addr, cooldown time.Duration) (a Allocation, found bool, err error) {
	err = m.Update(ctx, func(st *State) (bool, error) {
		a, found = m.releaseIn(st, k, ip, cooldown)
		return found, nil
	})
	if err != nil {
		return Allocation{}, false, fmt.Errorf("release ip of %s: %w", k, err)
	}
	if found && cooldown <= 0 {
		// Free at once: an ADD waiting on a dry pool may take it.
		_ = m.Wake()
	}
	return a, found, nil
}

// Held names an allocation by key and the address it is expected to hold.
type Held struct {
	Key
	IP netip.Addr
}

// ReleaseAll releases several allocations into cooldown in one
// read-modify-write, so a GC of hundreds of pods saves once. Allocations
// that are gone or hold another address by now are skipped.
func (m *Manager) ReleaseAll(ctx context.Context, held []Held) (released []Allocation, err error) {
	err = m.Update(ctx, func(st *State) (bool, error) {
		for _, h := range held {
			if a, ok := m.releaseIn(st, h.Key, h.IP, m.Cooldown); ok {
				released = append(released, a)
			}
		}
		return len(released) > 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("release %d allocations: %w", len(held), err)
	}
	return released, nil
}

func (m *Manager) releaseIn(st *State, k Key, ip netip.Addr, cooldown time.Duration) (Allocation, bool) {
	i := st.Find(k)
	if i < 0 || (ip.IsValid() && st.Allocations[i].IP != ip) {
		return Allocation{}, false
	}
	a := st.Allocations[i]
	st.Allocations = append(st.Allocations[:i], st.Allocations[i+1:]...)
	if cooldown > 0 {
		// A dual-stack attachment's two addresses cool down together,
		// and an egress address with them: conntrack may still map
		// replies of the old pod's flows to it.
		for _, ip := range a.Wired() {
			c := Cooling{IP: ip, Until: m.now().Add(cooldown).UTC(), For: cooldown}
			if boot := m.boot(); boot > 0 {
				c.UntilBoot = boot + cooldown
			}
			st.Cooling = append(st.Cooling, c)
		}
	}
	return a, true
}

// Get returns the allocation of k, if any.
func (m *Manager) Get(ctx context.Context, k Key) (a Allocation, found bool, err error) {
	a, found, _, err = m.GetWithSection(ctx, k)
	return a, found, err
}

// GetWithSection is Get that also returns State.EC2.
func (m *Manager) GetWithSection(ctx context.Context, k Key) (a Allocation, found bool, sec *section.EC2, err error) {
	err = m.Update(ctx, func(st *State) (bool, error) {
		sec = st.EC2
		if i := st.Find(k); i >= 0 {
			a, found = st.Allocations[i], true
		}
		return false, nil
	})
	if err != nil {
		return Allocation{}, false, nil, fmt.Errorf("look up %s: %w", k, err)
	}
	return a, found, sec, nil
}

// Snapshot returns a copy of the state and its pool counts.
func (m *Manager) Snapshot(ctx context.Context) (st *State, c Counts, err error) {
	err = m.Update(ctx, func(s *State) (bool, error) {
		st, c = s, m.Counts(s)
		return false, nil
	})
	return st, c, err
}

// Peek reads the state without the lock and without writing anything, for
// read-only commands: saves replace the file by rename, so a read sees one
// whole state. What the next locked call would change (allocations of a
// previous boot, expired cooling) is applied to the copy returned only.
//
// A lost state is refused here too (OnMissing), but only once confirmed
// under the lock: the check lists the node's wiring after this unlocked
// read, and an ADD that saved and wired in between (the first ADDs of a
// new node or network) leaves a route the read does not explain. Under
// the lock every route is explained by the state read after it: ADD saves
// before it wires, DEL and gc unroute before they release. Only a state
// that looks lost pays for the wait. A store without a lock file (a
// DiskStore: ADD creates it before its first save) has had no ADD, and a
// read-only command must not create one: the refusal stands.
func (m *Manager) Peek() (*State, Counts, error) {
	st, err := m.Load()
	if errors.Is(err, ErrStateLost) {
		if l, ok := m.Store.(interface{ LockExists() bool }); ok && !l.LockExists() {
			return nil, Counts{}, err
		}
		return m.Snapshot(context.Background())
	}
	if err != nil {
		return nil, Counts{}, err
	}
	m.newBoot(st)
	m.stampLegacy(st, m.now(), m.boot())
	m.pruneCooling(st)
	return st, m.Counts(st), nil
}

// Counts summarises st against the pool, with the counts of each family
// on a network that is not of IPv4 only.
func (m *Manager) Counts(st *State) Counts {
	if len(m.Families) == 0 {
		return m.countsOf(st, m.Pool.Size(st), func(netip.Addr) bool { return true })
	}
	var c Counts
	c.Families = &FamilyCounts{}
	for _, f := range m.families() {
		fc := m.familyCounts(st, f)
		if f == IPv4 {
			c.Families.IPv4 = &fc
		} else {
			c.Families.IPv6 = &fc
		}
		c.Total, c.Free, c.Cooling = addSat(c.Total, fc.Total), addSat(c.Free, fc.Free), c.Cooling+fc.Cooling
		c.Allocated, c.Outside = c.Allocated+fc.Allocated, c.Outside+fc.Outside
	}
	return c
}

// familyCounts are the counts of family f's addresses.
func (m *Manager) familyCounts(st *State, f Family) Counts {
	total := 0
	if s, ok := m.Pool.(interface{ FamilySize(Family) int }); ok {
		total = s.FamilySize(f)
	} else if s, ok := m.Pool.(interface{ FamilySizeIn(*State, Family) int }); ok {
		total = s.FamilySizeIn(st, f)
	} else {
		for range addrsOf(m.Pool, st, f) {
			total++
		}
	}
	return m.countsOf(st, total, func(ip netip.Addr) bool { return FamilyOf(ip) == f })
}

func (m *Manager) countsOf(st *State, total int, of func(netip.Addr) bool) Counts {
	c := Counts{Total: total}
	allocated := make(map[netip.Addr]bool, len(st.Allocations))
	for _, a := range st.Allocations {
		for _, ip := range a.Addrs() {
			if !of(ip) {
				continue
			}
			if m.Pool.Contains(st, ip) {
				c.Allocated++
				allocated[ip] = true
			} else {
				c.Outside++
			}
		}
	}
	now, boot := m.now(), m.boot()
	for _, cl := range st.Cooling {
		if of(cl.IP) && !allocated[cl.IP] && m.cooling(cl, now, boot) && m.Pool.Contains(st, cl.IP) {
			c.Cooling++
		}
	}
	c.Free = c.Total - c.Allocated - c.Cooling
	return c
}

// ReadBootID returns the kernel's boot ID.
func ReadBootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
