package section

import "testing"

// The numbers the AWS VPC CNI publishes (misc/eni-max-pods.txt, secondary
// addresses, no cap) and those of its max-pods-calculator.sh (with the
// 110/250 cap by vCPU count, and with prefix delegation).
func TestMaxPodsPublished(t *testing.T) {
	tests := []struct {
		name       string
		l          Limits
		pd         bool
		maxENIs    int
		allowed    int // eni-max-pods.txt, or the calculator's --show-max-allowed
		maxPods    int // the calculator's recommendation
		podAddress int
	}{
		{"t3.micro", Limits{MaxENIs: 2, IPv4PerENI: 2, VCPUs: 2}, false, 0, 4, 4, 2},
		{"t3.small", Limits{MaxENIs: 3, IPv4PerENI: 4, VCPUs: 2}, false, 0, 11, 11, 9},
		{"t3.medium", Limits{MaxENIs: 3, IPv4PerENI: 6, VCPUs: 2}, false, 0, 17, 17, 15},
		{"m5.large", Limits{MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2}, false, 0, 29, 29, 27},
		{"m5.xlarge", Limits{MaxENIs: 4, IPv4PerENI: 15, VCPUs: 4}, false, 0, 58, 58, 56},
		{"m5.4xlarge", Limits{MaxENIs: 8, IPv4PerENI: 30, VCPUs: 16}, false, 0, 234, 110, 232},
		{"c5.18xlarge", Limits{MaxENIs: 15, IPv4PerENI: 50, VCPUs: 72}, false, 0, 737, 250, 735},
		{"m5.24xlarge", Limits{MaxENIs: 15, IPv4PerENI: 50, VCPUs: 96}, false, 0, 737, 250, 735},
		{"p5.48xlarge (default card)", Limits{MaxENIs: 2, IPv4PerENI: 50, VCPUs: 192}, false, 0, 100, 100, 98},
		// Prefix delegation: every slot but the primary holds a /28.
		{"m5.large pd", Limits{MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2}, true, 0, 434, 110, 432},
		{"t3.micro pd", Limits{MaxENIs: 2, IPv4PerENI: 2, VCPUs: 2}, true, 0, 34, 34, 32},
		{"c5.18xlarge pd", Limits{MaxENIs: 15, IPv4PerENI: 50, VCPUs: 72}, true, 0, 11762, 250, 11760},
		// maxENIs as the calculator's --cni-max-eni.
		{"m5.xlarge maxENIs 2", Limits{MaxENIs: 4, IPv4PerENI: 15, VCPUs: 4}, false, 2, 30, 30, 28},
		{"m5.large maxENIs above the limit", Limits{MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2}, false, 9, 29, 29, 27},
		{"m5.large pd maxENIs 1", Limits{MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2}, true, 1, 146, 110, 144},
		// Unknown vCPUs get the smaller cap.
		{"c5.18xlarge without vCPUs", Limits{MaxENIs: 15, IPv4PerENI: 50}, false, 0, 737, 110, 735},
		{"no limits", Limits{}, false, 0, 2, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PodAddresses(tt.l, tt.pd, tt.maxENIs); got != tt.podAddress {
				t.Errorf("PodAddresses = %d, want %d", got, tt.podAddress)
			}
			if got := MaxAllowedPods(tt.l, tt.pd, tt.maxENIs); got != tt.allowed {
				t.Errorf("MaxAllowedPods = %d, want %d", got, tt.allowed)
			}
			if got := MaxPods(tt.l, tt.pd, tt.maxENIs); got != tt.maxPods {
				t.Errorf("MaxPods = %d, want %d", got, tt.maxPods)
			}
		})
	}
}

// A network of IPv6 counts as prefix delegation does: the cap binds on
// every type with room for 110 (or 250) pods.
func TestMaxPodsIPv6(t *testing.T) {
	for _, tt := range []struct {
		name    string
		l       Limits
		maxPods int
	}{
		{"t3.micro", Limits{MaxENIs: 2, IPv4PerENI: 2, VCPUs: 2}, 34},
		{"m5.large", Limits{MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2}, 110},
		{"c5.18xlarge", Limits{MaxENIs: 15, IPv4PerENI: 50, VCPUs: 72}, 250},
	} {
		if got := MaxPodsOf(tt.l, WarmConfig{IPv6: true}); got != tt.maxPods {
			t.Errorf("%s: maxPods %d, want %d", tt.name, got, tt.maxPods)
		}
	}
}

// A dual-stack network counts its IPv4 side, the scarcer: the figure of
// the same network without IPv6, with or without prefix delegation.
func TestMaxPodsDualStack(t *testing.T) {
	for _, l := range []Limits{{MaxENIs: 2, IPv4PerENI: 2, VCPUs: 2}, {MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2}, {MaxENIs: 15, IPv4PerENI: 50, VCPUs: 72}} {
		for _, pd := range []bool{false, true} {
			dual := WarmConfig{IPv6: true, DualStack: true, PrefixDelegation: pd}
			if got, want := MaxPodsOf(l, dual), MaxPods(l, pd, 0); got != want {
				t.Errorf("%+v prefix delegation %v: maxPods %d, want IPv4's %d", l, pd, got, want)
			}
		}
	}
	if got := MaxPodsOf(Limits{MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2}, WarmConfig{IPv6: true, DualStack: true}); got != 29 {
		t.Errorf("m5.large dual-stack: maxPods %d, want 29", got)
	}
}
