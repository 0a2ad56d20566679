package gc

import (
	"context"
	"time"
)

// Sandbox is one pod sandbox as the runtime lists it. ID is the identity
// (CNI_CONTAINERID); the pod fields are metadata for people and logs.
type Sandbox struct {
	ID           string
	PodName      string
	PodNamespace string
	PodUID       string
	Ready        bool // false means NOTREADY, which still owns its IPs
	CreatedAt    time.Time
}

// SandboxLister lists every sandbox the runtime knows, in any state.
type SandboxLister interface {
	ListSandboxes(ctx context.Context) ([]Sandbox, error)
}

// RuntimeInfo is the runtime's answer to Version.
type RuntimeInfo struct {
	Name       string // e.g. "containerd"
	Version    string
	APIVersion string // CRI API version, e.g. "v1"
}
