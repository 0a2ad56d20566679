package ec2

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/netconf"
)

// InProcess is the ADD side's provider.Full in the full build: IMDS read
// in this process, warm run as this very binary.
type InProcess struct{}

// RefreshIMDS checks the instance's identity and merges what IMDS lists
// into the store; ADD calls it on the first allocation of a boot and when
// the pool is empty.
func (InProcess) RefreshIMDS(ctx context.Context, cfg *netconf.Config, mgr *alloc.Manager) (provider.Refreshed, error) {
	r, err := RefreshTargets(ctx, mgr, NewQuickMetadataClient(cfg.IMDSEndpoint, MetadataOptions(cfg)...), time.Now(), &cfg.Warm)
	if err != nil {
		return provider.Refreshed{}, ExplainIMDS(err, cfg.IMDSEndpoint)
	}
	return provider.Refreshed{Added: r.Added, Dropped: r.Dropped, InstanceID: r.Instance.ID}, nil
}

// CheckIMDS reports whether IMDS can be read (STATUS on an empty pool).
func (InProcess) CheckIMDS(ctx context.Context, cfg *netconf.Config) error {
	_, err := Discover(ctx, NewQuickMetadataClient(cfg.IMDSEndpoint, MetadataOptions(cfg)...))
	return ExplainIMDS(err, cfg.IMDSEndpoint)
}

// WarmCommand is the command a dry-pool ADD starts as `eni-cni warm`:
// this build.
func (InProcess) WarmCommand(_ *netconf.Config, confPath string) (cmd *exec.Cmd, done func(), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	return exec.Command(exe, "warm", "--config", confPath), func() {}, nil
}

// ExplainIMDSOf adds the likely causes to an error from reading IMDS, and
// leaves other errors (EC2, the store) as they are.
func ExplainIMDSOf(err error, cfg *netconf.Config) error {
	if errors.Is(err, ErrIMDS) {
		return ExplainIMDS(err, cfg.IMDSEndpoint)
	}
	return err
}

// MetadataOptions: IMDSv2 only, unless the configuration allows IMDSv1.
func MetadataOptions(cfg *netconf.Config) []MetadataOption {
	if cfg.IMDSv1Fallback {
		return []MetadataOption{AllowIMDSv1()}
	}
	return nil
}

// DiscoverPool fills an ec2 pool lost with the state from IMDS (what is
// assigned to the node's ENIs), so that `eni-cni repair` knows the ENI of
// each address it records. Which addresses are eni-cni's to give back, and
// which ENIs it may use, the next warm pass learns from EC2 as for any new
// section.
func DiscoverPool(cfg *netconf.Config) func(ctx context.Context, st *alloc.State) (string, error) {
	return func(ctx context.Context, st *alloc.State) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		md := NewQuickMetadataClient(cfg.IMDSEndpoint, MetadataOptions(cfg)...)
		inst, err := Discover(ctx, md)
		if err != nil {
			return "", err
		}
		if cfg.Warm.IPv6 {
			// Discovery reads IPv6 prefixes only where the store has some:
			// without the primary ENI's /80 the pods' IPv6 addresses
			// would be recorded on no ENI, and CHECK, which routes by it,
			// would fail for them until they are deleted.
			if err := ReadIPv6Prefixes(ctx, md, inst, inst.PrimaryMAC); err != nil {
				return "", err
			}
		}
		// A fresh section: what IMDS lists now is this instance's (ENIs other
		// than the primary stay unverified until warm has read their tags).
		st.EC2 = &section.EC2{}
		section.Reconcile(st.EC2, inst, time.Now())
		n := len(st.EC2.Addrs)
		msg := fmt.Sprintf("read the ec2 pool from IMDS: %s (%s), %d ENIs, %d addresses", inst.ID, inst.Type, len(inst.ENIs), n)
		if cfg.Warm.IPv6 {
			primary, _ := st.EC2.PrimaryENI()
			msg += fmt.Sprintf(", %d IPv6 prefixes", len(primary.IPv6Prefixes))
		}
		return msg, nil
	}
}
