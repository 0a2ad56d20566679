package plugin

import (
	"testing"
	"time"
)

func TestHumanAge(t *testing.T) {
	for d, want := range map[time.Duration]string{-time.Second: "0s", 42 * time.Second: "42s", 192 * time.Second: "3m12s",
		125 * time.Minute: "2h5m", 50 * time.Hour: "2d2h"} {
		if got := humanAge(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}
