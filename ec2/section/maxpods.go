package section

// Pod density, as the AWS VPC CNI's max-pods-calculator.sh computes it, so
// that a node moved from the VPC CNI to eni-cni keeps its kubelet maxPods.

// hostNetworkPods are the pods that need no pod address: the calculator
// counts two (the VPC CNI's aws-node and kube-proxy), and eni-cni keeps the
// same number so the published values still apply.
const hostNetworkPods = 2

// Caps of the calculator's recommendation: Kubernetes is tested up to 110
// pods a node, and AWS recommends at most 250 on large instances.
const (
	maxPodsSmall       = 110
	maxPodsLarge       = 250
	largeInstanceVCPUs = 30 // more vCPUs than this get the larger cap
)

// PodAddresses is how many pod addresses the node can hold: every usable
// ENI's slots but its primary address, each slot one address, or one /28
// (16 addresses) with prefix delegation. maxENIs limits the ENIs (0: the
// instance type's limit), as the maxENIs configuration key does.
func PodAddresses(l Limits, prefixDelegation bool, maxENIs int) int {
	return podAddresses(l, prefixDelegation, maxENIs, false)
}

// podAddresses is PodAddresses, where custom subnets leave the primary ENI
// out: its addresses are in the node's subnet, never a pod's. That is the
// VPC CNI's formula with custom networking, (ENIs - 1) x (addresses - 1).
func podAddresses(l Limits, prefixDelegation bool, maxENIs int, custom bool) int {
	enis := l.MaxENIs
	if maxENIs > 0 && maxENIs < enis {
		enis = maxENIs
	}
	if custom {
		enis--
	}
	if enis <= 0 || l.IPv4PerENI <= 1 {
		return 0
	}
	perENI := l.IPv4PerENI - 1
	if prefixDelegation {
		perENI *= 16
	}
	return enis * perENI
}

// MaxAllowedPods is the most pods the node can run: its pod addresses plus
// the host-network pods. Without prefix delegation it is the number the
// VPC CNI publishes in eni-max-pods.txt.
func MaxAllowedPods(l Limits, prefixDelegation bool, maxENIs int) int {
	return PodAddresses(l, prefixDelegation, maxENIs) + hostNetworkPods
}

// MaxPods is the value recommended for kubelet's maxPods, as the VPC CNI's
// max-pods-calculator.sh gives it: MaxAllowedPods, capped at 110 on
// instance types with up to 30 vCPUs and at 250 above. When the vCPU count
// is unknown (l.VCPUs == 0) the smaller cap applies: a maxPods too high
// leaves pods stuck in ContainerCreating, one too low only wastes room.
func MaxPods(l Limits, prefixDelegation bool, maxENIs int) int {
	return capPods(l, MaxAllowedPods(l, prefixDelegation, maxENIs))
}

// PodAddressesOf, MaxAllowedPodsOf and MaxPodsOf are PodAddresses,
// MaxAllowedPods and MaxPods under the pool policy w: custom subnets
// (w.CustomSubnets) take the primary ENI out of the count. A network of
// IPv6 counts as prefix delegation does, as the VPC CNI's IPv6 nodes are
// given it: the /80 itself holds 2^48 addresses, so the cap (110 or 250)
// is what binds on any type with a few ENIs. A dual-stack network counts
// its IPv4 side, the scarcer: each pod holds one address of each.
func PodAddressesOf(l Limits, w WarmConfig) int {
	return podAddresses(l, w.PrefixDelegation || w.IPv6Only(), w.MaxENIs, w.CustomSubnets())
}

func MaxAllowedPodsOf(l Limits, w WarmConfig) int { return PodAddressesOf(l, w) + hostNetworkPods }

func MaxPodsOf(l Limits, w WarmConfig) int { return capPods(l, MaxAllowedPodsOf(l, w)) }

func capPods(l Limits, n int) int {
	limit := maxPodsSmall
	if l.VCPUs > largeInstanceVCPUs {
		limit = maxPodsLarge
	}
	return min(n, limit)
}
