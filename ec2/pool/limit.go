package pool

// Slots is how many secondary addresses (or /28 prefixes) one ENI can take:
// every IPv4 slot of the type but the one of the ENI's primary address.
func (l Limits) Slots() int { return l.IPv4PerENI - 1 }

// ENILimit is how many ENIs eni-cni may have attached: the type's maximum,
// or maxENIs (the configuration) when it is positive and lower.
func (l Limits) ENILimit(maxENIs int) int {
	if maxENIs > 0 && maxENIs < l.MaxENIs {
		return maxENIs
	}
	return max(l.MaxENIs, 0)
}

// AtHardLimit reports whether the node can get no more addresses from EC2:
// every ENI the instance type and maxENIs allow is attached and every one
// holds all the addresses (or prefixes) its type allows. Unknown limits are
// never a hard limit.
func (s *EC2) AtHardLimit(maxENIs int) bool {
	if s == nil || s.Limits == nil || len(s.ENIs) == 0 || len(s.ENIs) < s.Limits.ENILimit(maxENIs) {
		return false
	}
	for _, e := range s.ENIs {
		if e.Secondary+len(e.Prefixes) < s.Limits.Slots() {
			return false
		}
	}
	return true
}
