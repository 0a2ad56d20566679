// Package doctor owns `eni-cni doctor`: checks of a node for what breaks
// pod networking (IMDS, IAM, other network managers, udev, sysctls,
// iptables, the NodePort marking, SNAT and its INVALID drop, the CRI runtime, the store against the kernel, the timers,
// kubelet's maxPods). Each check is a small function over the inputs in
// Env (a root directory for files, the /proc of the network namespace,
// endpoints, listings), so tests give it a temporary tree and fakes.
package doctor

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/gc"
)

// Status of a check.
type Status string

const (
	OK   Status = "ok"
	Warn Status = "warn" // may be fine; worth a look
	Fail Status = "fail" // breaks pods: doctor exits non-zero
	Skip Status = "skip" // does not apply here, or cannot be checked
)

// Result is one check's outcome: what is wrong and how to fix it.
type Result struct {
	Name    string `json:"name"`
	Status  Status `json:"status"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

func ok(name, format string, a ...any) Result {
	return Result{Name: name, Status: OK, Message: fmt.Sprintf(format, a...)}
}

func skip(name, format string, a ...any) Result {
	return Result{Name: name, Status: Skip, Message: fmt.Sprintf(format, a...)}
}

func fail(name, fix, format string, a ...any) Result {
	return Result{Name: name, Status: Fail, Message: fmt.Sprintf(format, a...), Fix: fix}
}

func warn(name, fix, format string, a ...any) Result {
	return Result{Name: name, Status: Warn, Message: fmt.Sprintf(format, a...), Fix: fix}
}

// Link is a network interface of the node.
type Link struct {
	Name string
	MAC  string
}

// CRI is the part of the CRI client doctor uses.
type CRI interface {
	Version(ctx context.Context) (gc.RuntimeInfo, error)
	ListSandboxes(ctx context.Context) ([]gc.Sandbox, error)
}

// Env is everything the checks read. Zero fields skip their checks.
type Env struct {
	Root     string // files: "/" on a node, a temporary tree in tests
	ProcRoot string // /proc of the namespace checked (sysctls, processes)
	Now      time.Time

	Network, Source, StateDir, VethPrefix string
	Store                                 alloc.Store // read with Load only
	Pool                                  alloc.Pool
	Warm                                  section.WarmConfig

	IMDSEndpoint string // "" = the link-local default
	// EC2 builds the client for the permission probes once the region is
	// known; nil skips them.
	EC2 func(region string) (EC2API, error)

	// CRI connects to the runtime (resolving its socket); nil skips.
	CRI func() (CRI, string, error)

	// Host lists our veths, rules and routes; Links the node's links.
	Host  gc.Host
	Links func() ([]Link, error)
	// Forward lists the filter table's FORWARD chain (iptables -S).
	Forward func() ([]string, error)
	// NodePort lists what the node lacks of the primary ENI's connection
	// marking (connmark.Check), the ENI named by its MAC.
	NodePort func(primaryMAC string) ([]string, error)
	// SNAT lists what the node lacks of the SNAT the ec2 store calls for
	// (snat.Check); nil when the network does not SNAT.
	SNAT func(src *section.EC2) ([]string, error)
	// UnitActive asks systemd whether a unit is active; nil when systemd
	// is not running (units are then judged by being enabled).
	UnitActive func(unit string) bool
}

func (e *Env) path(p string) string { return filepath.Join(e.Root, p) }

func (e *Env) readFile(p string) ([]byte, error) { return os.ReadFile(e.path(p)) }

func (e *Env) exists(p string) bool {
	_, err := os.Lstat(e.path(p))
	return err == nil
}

// Run runs every check.
func Run(ctx context.Context, e *Env) []Result {
	var out []Result
	st, src, res := e.loadStore()
	out = append(out, res)
	imds, info := checkIMDS(ctx, e)
	out = append(out, imds)
	out = append(out, checkPermissions(ctx, e, src, info))
	out = append(out, checkIPv6(ctx, e, info))
	out = append(out, checkNetworkd(e, src)...)
	out = append(out, checkEC2NetUtils(e))
	out = append(out, checkNetworkManager(e, src)...)
	out = append(out, checkMACPolicy(e))
	out = append(out, checkIPForward(e))
	out = append(out, checkRPFilter(e, src))
	out = append(out, checkForward(e))
	out = append(out, checkNodePort(e, src))
	out = append(out, checkSNAT(e, src))
	out = append(out, checkCRI(ctx, e))
	out = append(out, checkWiring(e, st)...)
	out = append(out, checkTimers(e)...)
	out = append(out, checkMaxPods(e, src))
	out = append(out, checkPodSubnets(e, src))
	return out
}

// Failed reports whether any check failed.
func Failed(rs []Result) bool {
	for _, r := range rs {
		if r.Status == Fail {
			return true
		}
	}
	return false
}

// Print writes the results for people: one line each, the fix indented
// under it.
func Print(w io.Writer, rs []Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(string(r.Status)), r.Name, r.Message)
		if r.Fix != "" {
			for _, l := range strings.Split(r.Fix, "\n") {
				fmt.Fprintf(tw, "\t\t  fix: %s\n", l)
			}
		}
	}
	tw.Flush()
	var n [4]int
	for _, r := range rs {
		switch r.Status {
		case OK:
			n[0]++
		case Warn:
			n[1]++
		case Fail:
			n[2]++
		case Skip:
			n[3]++
		}
	}
	fmt.Fprintf(w, "%d ok, %d warnings, %d failed, %d skipped\n", n[0], n[1], n[2], n[3])
}

// loadStore reads the state without the lock (doctor writes nothing).
func (e *Env) loadStore() (*alloc.State, *section.EC2, Result) {
	const name = "store"
	if e.Store == nil {
		return nil, nil, skip(name, "no store configured")
	}
	st, err := e.Store.Load()
	if err != nil {
		return nil, nil, fail(name, "inspect it with `jq . "+filepath.Join(e.StateDir, alloc.StateFileName)+
			"`; move it aside only after checking which pods still run (eni-cni never resets it)", "%v", err)
	}
	src := st.EC2
	if _, err := os.Stat(filepath.Join(e.StateDir, alloc.StateFileName)); err != nil {
		return st, src, ok(name, "no state file yet in %s (no pod was added on this node)", e.StateDir)
	}
	return st, src, ok(name, "%s readable: %d allocations, %d pool addresses", filepath.Join(e.StateDir, alloc.StateFileName), len(st.Allocations), poolSize(e, st))
}

func poolSize(e *Env, st *alloc.State) int {
	if e.Pool == nil {
		return 0
	}
	return e.Pool.Size(st)
}

// secondaryENIs are the store's ENIs other than the primary that eni-cni
// uses (an ENI tagged no_manage belongs to someone else).
func secondaryENIs(src *section.EC2) []section.ENI {
	if src == nil {
		return nil
	}
	var out []section.ENI
	for _, eni := range src.ENIs {
		if (eni.DeviceNumber > 0 || eni.NetworkCard > 0) && !eni.Unmanaged {
			out = append(out, eni)
		}
	}
	return out
}

// linkNames maps the store's ENI MACs to the node's link names.
func (e *Env) linkNames(src *section.EC2) (byMAC map[string]string, primary string) {
	byMAC = map[string]string{}
	if e.Links == nil || src == nil {
		return byMAC, ""
	}
	links, err := e.Links()
	if err != nil {
		return byMAC, ""
	}
	for _, l := range links {
		byMAC[normMAC(l.MAC)] = l.Name
	}
	for _, eni := range src.ENIs {
		if eni.DeviceNumber == 0 {
			primary = byMAC[normMAC(eni.MAC)]
		}
	}
	return byMAC, primary
}

func normMAC(s string) string {
	if hw, err := net.ParseMAC(s); err == nil {
		return hw.String()
	}
	return strings.ToLower(s)
}

// NoConfig is the one finding of a node without a usable configuration;
// the checks of NodeEnvWithoutConfig follow it.
func NoConfig(err error) Result {
	return fail("config", "install one (`eni-cni install`, docs/install.md), or point --config at the conflist with the eni-cni plugin",
		"%v; the checks below need none", err)
}
