package ec2fake

// LaunchTemplate gives the instance's primary ENI what a launch template's
// network interface asks EC2 for at launch (SecondaryPrivateIpAddressCount,
// Ipv4PrefixCount): addresses and /28 prefixes assigned before the node
// boots, visible in its IMDS at once, with no API call counted or
// throttled (the launch made them, not the node).
func (h *Instance) LaunchTemplate(secondaries, prefixes int) error {
	defer h.s.flushChanges()
	return h.with(func(in *instance) error {
		e := in.attached[0]
		if _, _, err := h.s.assignLocked(e, assignRequest{count: secondaries, prefixCount: prefixes}); err != nil {
			return err
		}
		h.s.publishLocked(in, false)
		return nil
	})
}
