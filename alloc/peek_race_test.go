package alloc_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	. "github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
)

// TestPeekLossCheckSeesAConcurrentAdd: STATUS, list and the metrics read
// through Peek without the lock. On a node (or network) whose file does not
// know it yet, Peek's loss check lists the node's routes after reading the
// file; an ADD that saves and wires in between (it saves before it wires,
// so under the lock its route is always explained) left a route the stale
// read does not explain, and a brand-new node's STATUS failed with
// ErrStateLost. The check must not refuse from a stale read: the routes are
// judged against a state read no earlier than them.
func TestPeekLossCheckSeesAConcurrentAdd(t *testing.T) {
	s := allocfake.NewStore()
	c := newClock()
	routed := map[netip.Addr]bool{} // the kernel: wired by ADD after its save
	var add func()
	check := func(st *State) error {
		if add != nil {
			f := add
			add = nil
			f() // the ADD runs between the read of the file and the route listing
		}
		for ip := range routed {
			explained := false
			for _, a := range st.Allocations {
				explained = explained || a.IP == ip
			}
			if !explained {
				return ErrStateLost
			}
		}
		return nil
	}
	mk := func() *Manager {
		return &Manager{Store: s, Pool: mustRanges(t, "10.0.0.0/24"), BootID: "boot-1", Cooldown: 30 * time.Second,
			Now: c.Now, Network: "pods", OnMissing: check, LockTimeout: time.Second}
	}
	status, adder := mk(), mk()
	add = func() {
		a, _, err := adder.Allocate(context.Background(), req("first"))
		if err != nil {
			t.Fatalf("the ADD: %v", err)
		}
		routed[a.IP] = true
	}
	st, counts, err := status.Peek()
	if err != nil {
		t.Fatalf("Peek on a new node while its first ADD ran: %v (want no loss: the ADD's route is recorded)", err)
	}
	if st.Find(key("first")) < 0 || counts.Allocated != 1 {
		t.Errorf("Peek: allocations %+v, counts %+v; want the ADD's", st.Allocations, counts)
	}
	// A state that is really lost is still refused: another network on
	// the store, which does not record it, and a route nothing explains.
	blue := mk()
	blue.Network = "blue"
	routed[netip.MustParseAddr("10.0.0.77")] = true
	if _, _, err := blue.Peek(); !errors.Is(err, ErrStateLost) {
		t.Errorf("Peek of a lost state (a route nothing records): %v, want ErrStateLost", err)
	}
}
