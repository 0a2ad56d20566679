package cri

import "time"

// Dial finds the runtime's endpoint (explicit, else as ResolveEndpoint
// looks for one) and connects to it; every command that asks the runtime
// (gc, repair, doctor) dials through here. ep is the endpoint found, also
// when connecting failed.
func Dial(explicit string, timeout time.Duration) (c *Client, ep Endpoint, err error) {
	ep, err = ResolveEndpoint(explicit, Lookup{})
	if err != nil {
		return nil, ep, err
	}
	c, err = NewClient(ep, timeout)
	return c, ep, err
}
