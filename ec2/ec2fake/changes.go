package ec2fake

// Change is one ENI as EC2 has it right after a change took effect: created,
// addresses or prefixes assigned or unassigned, attached, detached, deleted.
// Whoever plays the VPC's data plane (package vpcfabric) follows these.
type Change struct {
	// Seq orders the changes of the world: of two Changes of one ENI, the
	// higher Seq is the newer. Hooks may see them out of order when calls
	// run at once; a follower keeps the newest.
	Seq     uint64
	ENI     ENI
	Deleted bool
}

// OnChange registers fn to run after each EC2 change of an ENI, through the
// API, seeding or drift: when it has taken effect (after the action's
// latency), before the reply is sent, without the server's lock. fn may
// run on several goroutines at once.
func (s *Server) OnChange(fn func(Change)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changeHooks = append(s.changeHooks, fn)
}

// noteLocked records e's new state for the OnChange hooks; nothing when
// there are none, so a world nobody follows pays nothing.
func (s *Server) noteLocked(e *eni) {
	if len(s.changeHooks) == 0 {
		return
	}
	s.changeSeq++
	s.changes = append(s.changes, Change{Seq: s.changeSeq, ENI: s.snapshotLocked(e)})
}

func (s *Server) noteGoneLocked(e *eni) {
	if len(s.changeHooks) == 0 {
		return
	}
	s.changeSeq++
	s.changes = append(s.changes, Change{Seq: s.changeSeq, ENI: s.snapshotLocked(e), Deleted: true})
}

// flushChanges gives the recorded changes to the hooks. Every method that
// changes state defers it before taking the lock, so it runs unlocked.
func (s *Server) flushChanges() {
	s.mu.Lock()
	changes, hooks := s.changes, s.changeHooks
	s.changes = nil
	s.mu.Unlock()
	for _, c := range changes {
		for _, fn := range hooks {
			fn(c)
		}
	}
}

// Current is ENI id as it is now, as a Change: its Seq is the newest any
// hook has been or will be given, so a follower that starts from it (a link
// that appears, a node that joins) can ignore older Changes still on
// their way. ok is false for an ENI that does not exist.
func (s *Server) Current(id string) (c Change, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.enis[id]
	if e == nil {
		return Change{}, false
	}
	return Change{Seq: s.changeSeq, ENI: s.snapshotLocked(e)}, true
}
