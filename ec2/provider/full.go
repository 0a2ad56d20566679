package provider

import (
	"context"
	"os/exec"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/netconf"
)

// Full is what the ADD side needs of the libraries the lean build leaves
// out: IMDS reads (the AWS SDK) and the command that runs a warm pass. The
// full build does them in process (ec2.InProcess); the lean build runs its
// embedded full build for them (package delegate). Injecting them keeps
// this package, and so every ADD, free of the SDK's initialisation.
type Full interface {
	// RefreshIMDS checks the instance's identity and merges what IMDS
	// lists into the store; ADD calls it on the first allocation of a boot
	// and when the pool is empty.
	RefreshIMDS(ctx context.Context, cfg *netconf.Config, mgr *alloc.Manager) (Refreshed, error)
	// CheckIMDS reports whether IMDS can be read (STATUS on an empty pool).
	CheckIMDS(ctx context.Context, cfg *netconf.Config) error
	// WarmCommand is the command a dry-pool ADD starts as `eni-cni warm
	// --config confPath`; done releases what it holds once it has started.
	WarmCommand(cfg *netconf.Config, confPath string) (cmd *exec.Cmd, done func(), err error)
}
