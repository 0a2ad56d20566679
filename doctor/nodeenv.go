package doctor

import (
	"os"
	"os/exec"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/vishvananda/netlink"

	"github.com/eni-cni/eni-cni/alloc"
	eniec2 "github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/gc/cri"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup/connmark"
	"github.com/eni-cni/eni-cni/netsetup/snat"
)

// NodeEnv wires the checks to this node: the network of cfg, its store,
// its host side (host) and the runtime at criEndpoint.
func NodeEnv(cfg *netconf.Config, store alloc.Store, host gc.Host, root, proc, criEndpoint string) *Env {
	e := &Env{
		Root: root, ProcRoot: proc, Now: time.Now(),
		Network: cfg.Network, Source: cfg.Provider, StateDir: cfg.StateDir, VethPrefix: cfg.VethPrefix,
		Store: store, Pool: cfg.Pool, Warm: cfg.Warm,
		IMDSEndpoint: cfg.IMDSEndpoint,
		Host:         host,
	}
	e.EC2 = func(region string) (EC2API, error) {
		return eniec2.NewAPI(cfg.EC2Endpoint, region, eniec2.NewQuickMetadataClient(cfg.IMDSEndpoint, eniec2.MetadataOptions(cfg)...)), nil
	}
	e.CRI = func() (CRI, string, error) {
		c, ep, err := cri.Dial(criEndpoint, 5*time.Second)
		if err != nil {
			if ep.Path == "" {
				return nil, "", err
			}
			return nil, ep.String(), err
		}
		return c, ep.String(), nil
	}
	e.Links = func() ([]Link, error) {
		links, err := netlink.LinkList()
		if err != nil {
			return nil, err
		}
		out := make([]Link, 0, len(links))
		for _, l := range links {
			out = append(out, Link{Name: l.Attrs().Name, MAC: l.Attrs().HardwareAddr.String()})
		}
		return out, nil
	}
	if ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4); err == nil {
		e.Forward = func() ([]string, error) { return ipt.List("filter", "FORWARD") }
	}
	e.NodePort = func(mac string) ([]string, error) {
		return connmark.Check(connmark.Spec{PrimaryMAC: mac, VethPrefix: cfg.VethPrefix})
	}
	if cfg.SNAT {
		e.SNAT = func(src *section.EC2) ([]string, error) {
			spec, err := provider.SNATSpec(src, cfg.Warm.ExcludeIPs)
			if err != nil {
				return nil, err
			}
			return snat.Check(spec)
		}
	}
	if fi, err := os.Stat("/run/systemd/system"); err == nil && fi.IsDir() && root == "/" {
		e.UnitActive = func(unit string) bool {
			return exec.Command("systemctl", "is-active", "--quiet", unit).Run() == nil
		}
	}
	return e
}

// NodeEnvWithoutConfig is the Env of a node with no usable eni-cni
// configuration (none installed yet, or one that does not parse): what an
// operator wants to know before installing needs none (IMDS and the
// instance's permissions, the other network managers, udev, the kernel's
// settings, iptables, the CRI runtime, the timers, kubelet), so those
// checks run as for an ec2 network with the defaults; the store's and the
// wiring's are skipped.
func NodeEnvWithoutConfig(root, proc, criEndpoint string) *Env {
	cfg := &netconf.Config{Provider: netconf.EC2, StateDir: netconf.DefaultStateDir, VethPrefix: netconf.DefaultVethPrefix}
	return NodeEnv(cfg, nil, nil, root, proc, criEndpoint)
}
