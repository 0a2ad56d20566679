package integration

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/eni-cni/eni-cni/ec2/ec2fake"
)

// Pod subnets of the node's zone (subnetDiscovery), in the simulated VPC.
const (
	podSubnetA = "10.98.32.0/27" // 27 free addresses: discovery's first choice
	podSubnetB = "10.98.48.0/28" // 11 free
	roleTag    = "kubernetes.io/role/cni"
)

// TestEC2PodSubnets runs ADD and warm through the binary on a node whose
// zone has two subnets tagged for pods: warm puts the pods' ENI in the one
// with most free addresses, never an address of the primary ENI. When
// other nodes fill that subnet, the next dry ADD's warm pass moves to the
// second and the pod starts; list says which subnet is full. When both are
// full the pass ends subnet-full and the ADD on the dry pool fails with
// code 11 saying so.
func TestEC2PodSubnets(t *testing.T) {
	role := map[string]string{roleTag: "1"}
	en := newDryNode(t, ec2fake.Config{Subnets: []ec2fake.SubnetConfig{
		{CIDR: ec2SubnetCIDR},
		{CIDR: podSubnetA, Tags: role},
		{CIDR: podSubnetB, Tags: role},
		{CIDR: ec2Subnet2CIDR}, // untagged
	}})
	subnets := en.fake.Info().Subnets
	a, b := subnets[1], subnets[2]
	nw := newDryNetwork(t, en, map[string]any{"subnetDiscovery": true, "warmIPTarget": 2, "addWaitSeconds": 20})

	nw.mustWarm(t)
	if p := en.fake.PrimaryENI(); len(p.SecondaryIPs) != 0 {
		t.Errorf("warm assigned %v to the primary ENI: pods in their own subnets never get its addresses", p.SecondaryIPs)
	}
	if got := subnetsOfENIs(en); len(got) != 1 || got[0] != a.ID {
		t.Fatalf("ENIs for pods in %v, want one in %s (most free addresses)", got, a.ID)
	}
	first := nw.addDry(t, newPod(t, "in-a"))
	if !netip.MustParsePrefix(podSubnetA).Contains(first) {
		t.Fatalf("first pod got %s, want an address of %s", first, podSubnetA)
	}
	if r, ok := en.fromRule(t, first); !ok || r.Table != 2 {
		t.Errorf("pod in %s: rule %v (found %t), want `from %s lookup 2`", podSubnetA, r, ok, first)
	}
	if err := ping(t.Context(), en.path(), first); err != nil {
		t.Error(err)
	}

	// Other nodes take the rest of subnet A. The pool's two addresses go
	// to pods, the next ADD finds it dry: its warm pass cannot assign in A
	// and creates an ENI in B instead.
	fillSubnetOf(t, en, a.ID)
	nw.addDry(t, newPod(t, "in-a-2"))
	moved := nw.addDry(t, newPod(t, "moved"))
	if !netip.MustParsePrefix(podSubnetB).Contains(moved) {
		t.Fatalf("pod after subnet A filled up got %s, want an address of %s", moved, podSubnetB)
	}
	if got := subnetsOfENIs(en); len(got) != 2 || got[1] != b.ID {
		t.Errorf("ENIs for pods in %v, want a second one in %s", got, b.ID)
	}
	l := nw.subnetListing(t)
	if len(l.FullSubnets) != 1 || l.FullSubnets[0].ID != a.ID {
		t.Errorf("list: full subnets %+v, want %s", l.FullSubnets, a.ID)
	}
	if l.LastPass == nil || l.LastPass.Result != "done" {
		t.Errorf("list: last pass %+v, want done", l.LastPass)
	}

	// B fills up too: the free addresses go to pods, then the node can
	// grow nowhere (both subnets full, no ENI slot left on t3.medium).
	fillSubnetOf(t, en, b.ID)
	for range 2 {
		nw.addDry(t, newPod(t, "in-b"))
	}
	p := newPod(t, "nowhere")
	o := nw.run(t, dryEnv("ADD", p), nw.config(t))
	wantCNIError(t, "ADD with both pod subnets full", o, 11, "the subnet is full", "every pod subnet of the zone is full", a.ID, b.ID)
	p.assertUnwired(t)
	if l := nw.subnetListing(t); l.LastPass == nil || l.LastPass.Result != "subnet-full" || len(l.FullSubnets) != 2 {
		t.Errorf("list after both filled: last pass %+v, full subnets %+v; want subnet-full and both", l.LastPass, l.FullSubnets)
	}
	if o, err := runIn(t.Context(), nw.node.path(), nil, nil, pluginBin, "list", "--config", nw.confFile); err != nil || !strings.Contains(string(o.stdout), "ended the subnet is full") {
		t.Errorf("eni-cni list does not say the last pass ended subnet-full: %v\n%s", err, o.stdout)
	}
}

// subnetListing is what `eni-cni list --json` says of warm's last pass and
// the subnets it skips as full.
type subnetListing struct {
	LastPass *struct {
		Result  string `json:"result"`
		Message string `json:"message"`
	} `json:"lastPass"`
	FullSubnets []struct {
		ID string `json:"id"`
	} `json:"fullSubnets"`
}

func (nw *network) subnetListing(t *testing.T) subnetListing {
	t.Helper()
	o, err := runIn(t.Context(), nw.node.path(), nil, nil, pluginBin, "list", "--json", "--config", nw.confFile)
	if err != nil || o.exit != 0 {
		t.Fatalf("eni-cni list --json: %v %s", err, o)
	}
	var l subnetListing
	if err := json.Unmarshal(o.stdout, &l); err != nil {
		t.Fatalf("eni-cni list --json: %v\n%s", err, o.stdout)
	}
	return l
}

// addDry runs ADD as a runtime would on an ec2 pool that may be dry (the
// ADD may start warm and wait) and returns the pod's address.
func (nw *network) addDry(t *testing.T, p *pod) netip.Addr {
	t.Helper()
	o := nw.run(t, dryEnv("ADD", p), nw.config(t))
	if o.exit != 0 {
		t.Fatalf("ADD %s: want exit 0, got %s", p.name, o)
	}
	res, err := current.NewResult(o.stdout)
	if err != nil {
		t.Fatalf("ADD %s: %v\n%s", p.name, err, o.stdout)
	}
	return resultIP(t, res.(*current.Result))
}

// subnetsOfENIs are the subnets of the ENIs attached besides the primary.
func subnetsOfENIs(en *ec2Node) []string {
	var out []string
	for _, e := range en.attached() {
		if e.DeviceIndex > 0 {
			out = append(out, e.SubnetID)
		}
	}
	return out
}

// fillSubnetOf takes every free address of a subnet, as ENIs of other
// nodes would.
func fillSubnetOf(t *testing.T, en *ec2Node, subnet string) {
	t.Helper()
	for i := 0; ; i++ {
		if _, err := en.fake.SeedENI(ec2fake.ENISpec{SubnetID: subnet, Detached: true}); err != nil {
			if i == 0 {
				t.Fatalf("subnet %s was full already: %v", subnet, err)
			}
			return
		}
	}
}
