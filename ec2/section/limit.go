package section

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

// AtHardLimit reports whether the node can get no more addresses from EC2,
// as warm sees it: every ENI the instance type and maxENIs allow is
// attached on network card 0 (warm creates ENIs only there; ENIs on other
// cards are someone else's and use up none of those), and every ENI warm
// may fill holds all the addresses (or prefixes) its type allows (an
// unmanaged ENI's free slots are not warm's to fill). Unknown limits are
// never a hard limit.
func (s *EC2) AtHardLimit(maxENIs int) bool { return s.AtHardLimitFor(maxENIs, false) }

// AtHardLimitOf is AtHardLimitFor under the pool policy w. A network of
// IPv6 only is never at it: its pool is a /80 (2^48 addresses) whose want
// is one call away, and a primary ENI that refuses it is the pass's
// outcome. A dual-stack one is at it when its IPv4 side is: each pod
// needs an address of both, and IPv4 is the scarce one.
func (s *EC2) AtHardLimitOf(w WarmConfig) bool {
	return !w.IPv6Only() && s.AtHardLimitFor(w.MaxENIs, w.CustomSubnets())
}

// AtHardLimitFor is AtHardLimit where, with custom subnets (createdOnly),
// only the ENIs eni-cni created are warm's to fill (ENI.ForPods): the
// primary ENI's free slots are no room for pods.
func (s *EC2) AtHardLimitFor(maxENIs int, createdOnly bool) bool {
	if s == nil || s.Limits == nil || len(s.ENIs) == 0 {
		return false
	}
	onCard0 := 0
	for _, e := range s.ENIs {
		if e.NetworkCard == 0 {
			onCard0++
		}
	}
	if onCard0 < s.Limits.ENILimit(maxENIs) {
		return false
	}
	for _, e := range s.ENIs {
		fillable := !e.Unmanaged && (!createdOnly || (e.Created && !e.Primary()))
		if fillable && e.Secondary+len(e.Prefixes) < s.Limits.Slots() {
			return false
		}
	}
	return true
}
