package plugin

import (
	"context"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/gc"
)

// TestInterfacesOfOneSandboxAreApart: eth0 and net1 of one sandbox are two
// attachments: each its own address and veth; CHECK, DEL and GC act on the
// one they name and leave the other.
func TestInterfacesOfOneSandboxAreApart(t *testing.T) {
	p, w, s := newTestPlugin(t, "10.99.0.0/24")
	ctx := context.Background()
	eth0, net1 := att("c1"), att("c1")
	net1.IfName = "net1"
	r0, err := p.add(ctx, eth0)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := p.add(ctx, net1)
	if err != nil {
		t.Fatal(err)
	}
	if r0.IPs[0].Address.IP.Equal(r1.IPs[0].Address.IP) || r0.Interfaces[0].Name == r1.Interfaces[0].Name {
		t.Fatalf("eth0 %v on %s and net1 %v on %s share an address or a veth", r0.IPs[0].Address, r0.Interfaces[0].Name, r1.IPs[0].Address, r1.Interfaces[0].Name)
	}
	for _, at := range []attachment{eth0, net1} {
		if err := p.check(ctx, at, nil); err != nil {
			t.Errorf("CHECK %s: %v", at.IfName, err)
		}
	}
	// GC with only eth0 valid frees net1, once it is older than the grace.
	err = p.Mgr.Update(ctx, func(st *alloc.State) (bool, error) {
		for i := range st.Allocations {
			age(&st.Allocations[i], time.Hour)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	live := gc.FromValidAttachments("pods", []gc.ValidAttachment{{ContainerID: "c1", IfName: "eth0"}})
	c, err := p.Collect(ctx, live, gc.Options{Grace: 10 * time.Minute}, false, &fakeHost{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Freed) != 1 || c.Freed[0].IfName != "net1" {
		t.Fatalf("GC freed %+v, want net1 only", c.Freed)
	}
	if err := p.check(ctx, eth0, nil); err != nil {
		t.Errorf("CHECK eth0 after net1 was collected: %v", err)
	}
	if _, ok := w.wired[r1.Interfaces[0].Name]; ok {
		t.Error("net1's veth is still wired after GC")
	}
	if err := p.del(ctx, eth0.Key, ""); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Load()
	if len(st.Allocations) != 0 || len(st.Cooling) != 2 {
		t.Errorf("after GC of net1 and DEL of eth0: %+v allocations, %d cooling", st.Allocations, len(st.Cooling))
	}
}
