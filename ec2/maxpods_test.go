package ec2

import (
	"context"
	"testing"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/ec2/section"
)

// With the limits cached in the store (warm fetched them), max-pods needs
// neither IMDS nor EC2.
func TestMaxPodsFromStore(t *testing.T) {
	st := allocfake.NewStore()
	s := alloc.NewState("b")
	s.EC2 = &section.EC2{InstanceID: "i-1", InstanceType: "c5.18xlarge", Limits: &section.Limits{MaxENIs: 15, IPv4PerENI: 50, VCPUs: 72}}
	st.Save(s)
	d := MaxPodsDeps{Store: st, NewAPI: func(string) TypesAPI { t.Fatal("EC2 called"); return nil }}
	r, err := MaxPodsFor(context.Background(), d, section.WarmConfig{}, "")
	if err != nil || r.MaxPods != 250 || r.MaxAllowed != 737 || r.LimitsFrom != "store" {
		t.Errorf("%+v %v", r, err)
	}
}
