//go:build !faultinject

package fault

// Point marks a crash point; in a production build it does nothing.
func Point(string) {}
