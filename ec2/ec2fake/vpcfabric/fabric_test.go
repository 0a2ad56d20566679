package vpcfabric

import (
	"encoding/xml"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

func newNS(t *testing.T) string {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create network namespace: %v", err)
	}
	t.Cleanup(func() {
		n.Close()
		if err := testutils.UnmountNS(n); err != nil {
			t.Errorf("remove network namespace: %v", err)
		}
	})
	return n.Path()
}

// newWorld starts a fake world (one VPC, one subnet) and adds the
// instance the tests put on the fabric.
func newWorld(t *testing.T) (*ec2fake.Server, *ec2fake.Instance) {
	t.Helper()
	srv, err := ec2fake.New(ec2fake.Config{InstanceType: "t3.medium", VPCCIDRs: []string{"10.95.0.0/16"},
		Subnets: []ec2fake.SubnetConfig{{CIDR: "10.95.0.0/20"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	inst, err := srv.AddInstance(ec2fake.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return srv, inst
}

// call makes one EC2 Query API call and returns the reply's body.
func call(t *testing.T, srv *ec2fake.Server, action string, kv ...string) []byte {
	t.Helper()
	form := url.Values{"Action": {action}, "Version": {"2016-11-15"}}
	for i := 0; i+1 < len(kv); i += 2 {
		form.Set(kv[i], kv[i+1])
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, err := client.PostForm(srv.EC2URL(), form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", action, b)
	}
	return b
}

// routed is what the router delivers to the port of ENI id.
func routed(t *testing.T, f *Fabric, id string) []string {
	t.Helper()
	f.mu.Lock()
	p := f.ports[id]
	f.mu.Unlock()
	if p == nil {
		return nil
	}
	l, err := f.rh.LinkByName(p.name)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := f.rh.RouteList(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		if r.Dst != nil {
			out = append(out, r.Dst.String())
		}
	}
	slices.Sort(out)
	return out
}

// TestFollowsTheAPI: an ENI created, attached, given addresses, losing one,
// detached and deleted through the EC2 API gets its link on the node when
// the fake says it appears, and the router routes exactly its addresses at
// each reply; after the detach the link is gone.
func TestFollowsTheAPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	srv, second := newWorld(t)
	// The namespaces first: cleanups run last-in first-out, and a
	// namespace's mount cannot be removed while the fabric holds it open.
	router, node := newNS(t), newNS(t)
	f, err := New(srv, Config{Router: router})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	if err := f.AddNode(second.ID(), node); err != nil {
		t.Fatal(err)
	}
	primary := second.PrimaryENI()
	if got := routed(t, f, primary.ID); !slices.Equal(got, []string{primary.PrimaryIP + "/32"}) {
		t.Errorf("primary ENI routed %v", got)
	}

	var created struct {
		ENI struct {
			ID        string `xml:"networkInterfaceId"`
			PrimaryIP string `xml:"privateIpAddress"`
		} `xml:"networkInterface"`
	}
	if err := xml.Unmarshal(call(t, srv, "CreateNetworkInterface", "SubnetId", primary.SubnetID), &created); err != nil {
		t.Fatal(err)
	}
	id := created.ENI.ID
	call(t, srv, "AttachNetworkInterface", "NetworkInterfaceId", id, "InstanceId", second.ID(), "DeviceIndex", "1")
	waitLink(t, f, node, "ens6", true)
	call(t, srv, "AssignPrivateIpAddresses", "NetworkInterfaceId", id, "PrivateIpAddress.1", "10.95.1.10", "PrivateIpAddress.2", "10.95.1.11")
	if got := routed(t, f, id); !slices.Equal(got, []string{created.ENI.PrimaryIP + "/32", "10.95.1.10/32", "10.95.1.11/32"}) {
		t.Errorf("after the assign: routed %v", got)
	}
	call(t, srv, "UnassignPrivateIpAddresses", "NetworkInterfaceId", id, "PrivateIpAddress.1", "10.95.1.10")
	if got := routed(t, f, id); !slices.Equal(got, []string{created.ENI.PrimaryIP + "/32", "10.95.1.11/32"}) {
		t.Errorf("after the unassign: routed %v", got)
	}
	e, _ := srv.ENI(id)
	call(t, srv, "DetachNetworkInterface", "AttachmentId", e.AttachmentID)
	if got := routed(t, f, id); got != nil {
		t.Errorf("after the detach: routed %v", got)
	}
	waitLink(t, f, node, "ens6", false)
	call(t, srv, "DeleteNetworkInterface", "NetworkInterfaceId", id)
	c, err := f.Counters()
	if err != nil || c.Dropped() != 0 || len(c.Ports) != 2 {
		t.Errorf("counters %+v %v; want the primary's port and the detached one's, nothing dropped", c, err)
	}
	if err := f.Err(); err != nil {
		t.Error(err)
	}
}

func waitLink(t *testing.T, f *Fabric, nsPath, name string, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var have bool
		_ = ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
			_, err := netlink.LinkByName(name)
			have = err == nil
			return nil
		})
		if have == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("link %s on the node: present %t, want %t (fabric errors: %v)", name, have, want, f.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCheckFailsClosed: when taking an unassigned address off its port
// fails (here its route was already gone), the source check has still
// stopped letting that address through: the check may be stricter than
// the routes after a failure, never looser, or a drop counter of 0 could
// hide a node that sends from an address its ENI lost.
func TestCheckFailsClosed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	srv, inst := newWorld(t)
	router, node := newNS(t), newNS(t)
	f, err := New(srv, Config{Router: router})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	if err := f.AddNode(inst.ID(), node); err != nil {
		t.Fatal(err)
	}
	primary := inst.PrimaryENI()
	call(t, srv, "AssignPrivateIpAddresses", "NetworkInterfaceId", primary.ID, "PrivateIpAddress.1", "10.95.2.20")
	rule := "-s 10.95.2.20/32 -j RETURN"
	if !strings.Contains(checkRules(t, f, router, primary.ID), rule) {
		t.Fatalf("after the assign the check does not let 10.95.2.20 through:\n%s", checkRules(t, f, router, primary.ID))
	}
	f.mu.Lock()
	l, err := f.rh.LinkByName(f.ports[primary.ID].name)
	f.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rh.RouteDel(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(netip.MustParsePrefix("10.95.2.20/32")), Scope: netlink.SCOPE_LINK}); err != nil {
		t.Fatal(err)
	}
	call(t, srv, "UnassignPrivateIpAddresses", "NetworkInterfaceId", primary.ID, "PrivateIpAddress.1", "10.95.2.20")
	if f.Err() == nil {
		t.Error("the failed route delete was not reported by Err")
	}
	if got := checkRules(t, f, router, primary.ID); strings.Contains(got, rule) {
		t.Errorf("after a failed unassign the check still lets 10.95.2.20 through:\n%s", got)
	}
}

// checkRules lists the source check's chain of ENI id's port.
func checkRules(t *testing.T, f *Fabric, router, id string) string {
	t.Helper()
	f.mu.Lock()
	name := f.ports[id].name
	f.mu.Unlock()
	out, err := run(router, nil, "iptables", "-w", "5", "-t", "raw", "-S", CheckChain(name))
	if err != nil {
		t.Fatal(err)
	}
	return out
}
