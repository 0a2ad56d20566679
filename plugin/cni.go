package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	cnins "github.com/containernetworking/cni/pkg/ns"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	cniversion "github.com/containernetworking/cni/pkg/version"

	"golang.org/x/sys/unix"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/metrics"
	"github.com/eni-cni/eni-cni/netconf"
	"github.com/eni-cni/eni-cni/netsetup"
)

// errInvalidArgs: CNI environment or CNI_ARGS that cannot be used.
var errInvalidArgs = errors.New("invalid CNI arguments")

// errInvalidNetns: CNI_NETNS that is missing or is the plugin's own.
var errInvalidNetns = errors.New("invalid network namespace")

// Preflight rejects a missing container ID with the same code as a bad one
// (skel would call it "unknown container"), before anything else runs.
func Preflight(getenv func(string) string) *types.Error {
	switch getenv("CNI_COMMAND") {
	case "ADD", "DEL", "CHECK":
		if getenv("CNI_CONTAINERID") == "" {
			return types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID is missing", "")
		}
	}
	return nil
}

// Main serves the CNI verb the environment names, with stdin and stdout
// as the runtime gave them, and returns the process's exit code: the
// whole invocation, which main runs and FuzzVerb drives.
func (c CNI) Main(about string) int {
	if e := Preflight(os.Getenv); e != nil {
		_ = e.Print()
		return 1
	}
	if e := skel.PluginMainFuncsWithError(c.Funcs(), cniversion.All, about); e != nil {
		if err := e.Print(); err != nil {
			fmt.Fprintf(os.Stderr, "eni-cni: print error: %v\n", err)
		}
		return 1
	}
	return 0
}

// verbFunc is the body of a verb, given its parsed configuration.
type verbFunc func(ctx context.Context, p *Plugin) (logAttrs []any, err error)

// CNI serves the verbs; Full is what the lean build cannot link (the EC2
// provider's IMDS reads and warm command).
type CNI struct {
	Full provider.Full
	// Wire and Host are the node's kernel for the verbs and for the GC
	// verb's sweep; nil: the real ones (Kernel, HostNetwork). Tests of
	// whole invocations inject fakes.
	Wire Wirer
	Host func(vethPrefix string) gc.Host
}

// Funcs are the verbs as skel calls them.
func (c CNI) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: c.Add, Del: c.Del, Check: c.Check, Status: c.Status, GC: c.GC}
}

// runVerb parses the configuration, builds the plugin, runs fn, logs one
// line and converts the error to a CNI error at this single boundary.
func (c CNI) runVerb(verb string, args *skel.CmdArgs, fn verbFunc) error {
	start := time.Now()
	cfg, ignored, err := parse(verb, args.StdinData)
	if err != nil {
		return toCNIError(err)
	}
	logger := cfg.Logger()
	if ignored != nil {
		logger.Warn(verb, "network", cfg.Network, "containerID", args.ContainerID, "ifname", args.IfName,
			"warning", "DEL ignores what it does not use of the configuration: "+ignored.Error())
	}
	var attrs []any
	p, err := c.open(cfg)
	if err == nil {
		p.log = logger
		attrs, err = fn(context.Background(), p)
	} else if verb == "STATUS" {
		err = fmt.Errorf("%w: %w", errNotReady, err)
	}
	took := time.Since(start)
	recordVerb(cfg, verb, err == nil, took)
	base := []any{"network", cfg.Network, "containerID", args.ContainerID, "ifname", args.IfName,
		"ms", float64(took.Microseconds()) / 1000}
	if err != nil {
		logger.Error(verb, append(append(base, attrs...), "err", err)...)
		return toCNIError(err)
	}
	logger.Info(verb, append(base, attrs...)...)
	return nil
}

// parse reads the configuration of a verb. DEL frees even when the entry
// has a key we do not know or a value it does not use that is invalid (a
// typo added while pods run): failing would strand their pods in
// Terminating. ignored is what DEL let pass.
func parse(verb string, data []byte) (cfg *netconf.Config, ignored error, err error) {
	if verb != "DEL" {
		cfg, err = netconf.Parse(data)
		return cfg, nil, err
	}
	cfg, ignored, err = netconf.DecodeForDel(data)
	if err != nil {
		return nil, nil, err
	}
	return cfg, errors.Join(ignored, netconf.CheckKeys(data)), nil
}

func (c CNI) open(cfg *netconf.Config) (*Plugin, error) {
	if c.Wire == nil {
		return Open(cfg, c.Full)
	}
	return OpenWith(cfg, c.Full, c.Wire)
}

func (c CNI) host(prefix string) gc.Host {
	if c.Host == nil {
		return HostNetwork{prefix}
	}
	return c.Host(prefix)
}

// Open builds the plugin of a network: its store, and its provider (full
// serves the EC2 provider's IMDS reads and warm command).
func Open(cfg *netconf.Config, full provider.Full) (*Plugin, error) {
	return OpenWith(cfg, full, Kernel{})
}

// OpenWith is Open with the node's wiring done by w.
func OpenWith(cfg *netconf.Config, full provider.Full, w Wirer) (*Plugin, error) {
	store, err := alloc.NewDiskStore(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	bootID, err := alloc.ReadBootID()
	if err != nil {
		return nil, err
	}
	mgr := &alloc.Manager{
		Store: store, Pool: cfg.Pool, BootID: bootID, Families: cfg.Families,
		Cooldown: cfg.Cooldown, LockTimeout: cfg.LockTimeout,
	}
	var prov Provider = staticProvider{cfg.Pool}
	if cfg.Provider == netconf.EC2 {
		ec2 := provider.EC2{Cfg: cfg, Mgr: mgr, Full: full, Warm: provider.NewNodeWarm(full)}
		prov, mgr.Admit = ec2, ec2.Admit
	}
	return newPluginWith(cfg, mgr, w, prov), nil
}

func (c CNI) Add(args *skel.CmdArgs) error {
	return c.runVerb("ADD", args, func(ctx context.Context, p *Plugin) ([]any, error) {
		res, attrs, err := p.Attach(ctx, args)
		if err != nil {
			return attrs, err
		}
		if err := types.PrintResult(res, p.Cfg.CNIVersion); err != nil {
			return attrs, fmt.Errorf("print result: %w", err)
		}
		return attrs, nil
	})
}

// Attach is ADD without its boundary (configuration, log line, printed
// result): the attachment args names gets an address and its wiring. attrs
// are for the ADD's log line.
func (p *Plugin) Attach(ctx context.Context, args *skel.CmdArgs) (res *current.Result, attrs []any, err error) {
	at, err := attachmentFrom(args, p.Cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := validateIfName(args.IfName); err != nil {
		return nil, nil, err
	}
	if err := validateNetns(args.Netns); err != nil {
		return nil, nil, err
	}
	res, err = p.add(ctx, at)
	if err != nil {
		return nil, p.addAttrs, err
	}
	attrs = []any{"ip", res.IPs[0].Address.IP.String()}
	if len(res.IPs) > 1 {
		attrs = append(attrs, "ip2", res.IPs[1].Address.IP.String())
	}
	return res, append(append(attrs, "pod", at.PodNamespace+"/"+at.PodName), p.addAttrs...), nil
}

func (c CNI) Del(args *skel.CmdArgs) error {
	return c.runVerb("DEL", args, func(ctx context.Context, p *Plugin) ([]any, error) {
		return []any{"netns", args.Netns}, p.Detach(ctx, args)
	})
}

// Detach is DEL without its boundary: the attachment args names loses its
// wiring and its address.
func (p *Plugin) Detach(ctx context.Context, args *skel.CmdArgs) error {
	// DEL needs only (network, containerID, ifname): bad pod metadata in
	// CNI_ARGS must not keep it from freeing the address.
	return p.del(ctx, alloc.Key{Network: p.Cfg.Network, ContainerID: args.ContainerID, IfName: args.IfName}, args.Netns)
}

func (c CNI) Check(args *skel.CmdArgs) error {
	return c.runVerb("CHECK", args, func(ctx context.Context, p *Plugin) ([]any, error) {
		at, err := attachmentFrom(args, p.Cfg)
		if err != nil {
			return nil, err
		}
		prev, err := prevResult(p.Cfg)
		if err != nil {
			return nil, err
		}
		if err := validateNetns(args.Netns); err != nil {
			return nil, err
		}
		return nil, p.check(ctx, at, prev)
	})
}

func (c CNI) Status(args *skel.CmdArgs) error {
	return c.runVerb("STATUS", args, func(ctx context.Context, p *Plugin) ([]any, error) {
		c, err := p.Status(ctx)
		return []any{"free", c.Free, "allocated", c.Allocated}, err
	})
}

// GC is the CNI 1.1 GC verb: attachments of this network that the
// runtime does not list as valid, and that are older than the grace, are
// freed as by DEL; host leftovers are swept.
func (c CNI) GC(args *skel.CmdArgs) error {
	return c.runVerb("GC", args, func(ctx context.Context, p *Plugin) ([]any, error) {
		valid, err := gc.ValidAttachmentsFromConfig(args.StdinData)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", netconf.ErrDecode, err)
		}
		live := gc.FromValidAttachments(p.Cfg.Network, valid)
		start := time.Now()
		c, err := p.Collect(ctx, live, gc.Options{Grace: p.Cfg.GCGrace}, false, c.host(p.Cfg.VethPrefix))
		u := metrics.RunUpdate{Job: "gc-verb", Start: start, Duration: time.Since(start), Err: err}
		if c != nil {
			u.Freed, u.Leftovers = len(c.Freed), c.Leftovers.Len()
		}
		p.RecordJob(u, io.Discard)
		if err != nil {
			return nil, err
		}
		var lines strings.Builder
		err = c.Report(&lines, false)
		return []any{"valid", len(valid), "freed", len(c.Freed), "young", len(c.Plan.Young),
			"leftovers", c.Leftovers.Len(), "report", strings.TrimSpace(lines.String())}, err
	})
}

// attachmentFrom reads the attachment's identity and pod metadata.
func attachmentFrom(args *skel.CmdArgs, cfg *netconf.Config) (attachment, error) {
	at := attachment{Key: alloc.Key{Network: cfg.Network, ContainerID: args.ContainerID, IfName: args.IfName}, Netns: args.Netns}
	kv, err := parseCNIArgs(args.Args)
	if err != nil {
		return at, err
	}
	at.PodNamespace, at.PodName, at.PodUID = kv["K8S_POD_NAMESPACE"], kv["K8S_POD_NAME"], kv["K8S_POD_UID"]
	return at, nil
}

// parseCNIArgs parses CNI_ARGS ("K1=V1;K2=V2"). Unknown keys are ignored,
// as every runtime passes some; malformed pairs are an error.
func parseCNIArgs(s string) (map[string]string, error) {
	kv := map[string]string{}
	if s == "" {
		return kv, nil
	}
	for _, pair := range strings.Split(s, ";") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: CNI_ARGS entry %q is not KEY=VALUE", errInvalidArgs, pair)
		}
		if len(v) > 253 || !printable(v) {
			return nil, fmt.Errorf("%w: CNI_ARGS value of %s is too long, has control characters or is not UTF-8", errInvalidArgs, k)
		}
		kv[k] = v
	}
	return kv, nil
}

// printable reports whether s is UTF-8 without control characters, C0
// (and DEL) or C1: pod metadata is printed by `list` and logged, and must
// not carry terminal escapes (SECURITY.md).
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// validateIfName refuses an interface name that cannot be the pod's end
// of a veth. skel has checked the name's syntax; lo exists in every
// namespace and is the pod's loopback.
func validateIfName(name string) error {
	if name == "lo" {
		return fmt.Errorf("%w: CNI_IFNAME %q is the loopback interface", errInvalidArgs, name)
	}
	return nil
}

// validateNetns refuses a netns that does not exist, is not a network
// namespace, or is the plugin's own: wiring "the pod" into the node's
// namespace would break the node.
func validateNetns(path string) error {
	if path == "" {
		return fmt.Errorf("%w: CNI_NETNS is empty", errInvalidNetns)
	}
	if err := isNetNS(path); err != nil {
		return fmt.Errorf("%w: %s: %w", errInvalidNetns, path, err)
	}
	same, e := cnins.CheckNetNS(path)
	if e != nil {
		return fmt.Errorf("%w: %s: %v", errInvalidNetns, path, e)
	}
	if same {
		return fmt.Errorf("%w: %s is the plugin's own network namespace", errInvalidNetns, path)
	}
	return nil
}

// errNotNetNS: a file that is not a network namespace.
var errNotNetNS = errors.New("not a network namespace")

// nsGetNSType is NS_GET_NSTYPE, _IO(0xb7, 0x3), which x/sys/unix lacks.
const nsGetNSType = 0xb703

// isNetNS asks the kernel whether path is a network namespace. The file
// system alone does not tell: CheckNetNS compares inodes only, and procfs
// holds /proc/1/status as well as the /proc/PID/ns/net links, so
// /etc/hostname and then /proc/1/status reached the veth's creation, which
// failed (code 999) after an address had been taken. The ioctl is only
// sent to files of nsfs and procfs: another file system's device could
// give the number a meaning of its own.
func isNetNS(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return err
	}
	if fs.Type != unix.NSFS_MAGIC && fs.Type != unix.PROC_SUPER_MAGIC {
		return errNotNetNS
	}
	typ, err := unix.IoctlRetInt(fd, nsGetNSType)
	if err != nil || typ != unix.CLONE_NEWNET {
		return errNotNetNS
	}
	return nil
}

// errNoPrevResult: CHECK from cniVersion 1.0.0 on without prevResult. The
// spec has the plugin consult prevResult to know what ADD returned; a
// runtime that sends none is misconfigured, and checking without it would
// hide a result that no longer matches.
var errNoPrevResult = errors.New("CHECK needs prevResult")

// prevResult returns the prevResult of a CHECK: required from 1.0.0 on,
// optional before (0.4.0 runtimes may leave it out).
func prevResult(cfg *netconf.Config) (*current.Result, error) {
	if cfg.PluginConf.RawPrevResult == nil {
		if gte, err := cniversion.GreaterThanOrEqualTo(cfg.CNIVersion, "1.0.0"); err == nil && gte {
			return nil, fmt.Errorf("%w: cniVersion %s requires the ADD result as prevResult", errNoPrevResult, cfg.CNIVersion)
		}
		return nil, nil
	}
	if err := cniversion.ParsePrevResult(cfg.PluginConf); err != nil {
		return nil, fmt.Errorf("%w: prevResult: %v", netconf.ErrDecode, err)
	}
	res, err := current.NewResultFromResult(cfg.PluginConf.PrevResult)
	if err != nil {
		return nil, fmt.Errorf("%w: prevResult: %v", netconf.ErrDecode, err)
	}
	if err := noNulls(res); err != nil {
		return nil, fmt.Errorf("%w: prevResult: %w", netconf.ErrDecode, err)
	}
	return res, nil
}

// noNulls refuses a result with null entries: JSON decodes `"ips": [null]`
// into a nil pointer, which the checks below would follow.
func noNulls(r *current.Result) error {
	for i, itf := range r.Interfaces {
		if itf == nil {
			return fmt.Errorf("interfaces[%d] is null", i)
		}
	}
	for i, c := range r.IPs {
		if c == nil {
			return fmt.Errorf("ips[%d] is null", i)
		}
	}
	for i, rt := range r.Routes {
		if rt == nil {
			return fmt.Errorf("routes[%d] is null", i)
		}
	}
	return nil
}

// Plugin-specific CNI error codes (the spec leaves 100 and up to plugins)
// for CHECK, so a runtime or an operator can tell what disagrees.
const (
	codeCheckPrevResult = 101 // prevResult is not the allocation's result
	codeCheckHost       = 102 // the node's side (host veth, /32 route, rules) differs
	codeCheckPod        = 103 // the pod's side (address, routes, gateway neighbour) differs
	codeCheckRouting    = 104 // the store cannot say which ENI table the address uses
)

// toCNIError maps an error to the CNI error code the runtime acts on.
func toCNIError(err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	var pathErr *fs.PathError
	code := types.ErrInternal
	switch {
	case errors.Is(err, errPrevResult):
		code = codeCheckPrevResult
	case errors.Is(err, netsetup.ErrHostMismatch):
		code = codeCheckHost
	case errors.Is(err, netsetup.ErrPodMismatch):
		code = codeCheckPod
	case errors.Is(err, errCheckRouting):
		code = codeCheckRouting
	case errors.Is(err, errNoPrevResult):
		code = types.ErrInvalidNetworkConfig
	case errors.Is(err, netconf.ErrDecode):
		code = types.ErrDecodingFailure
	case errors.Is(err, netconf.ErrInvalidConfig):
		code = types.ErrInvalidNetworkConfig
	case errors.Is(err, errInvalidArgs), errors.Is(err, netsetup.ErrIfNameTaken):
		code = types.ErrInvalidEnvironmentVariables
	case errors.Is(err, errInvalidNetns), errors.Is(err, netsetup.ErrNetNS):
		code = types.ErrInvalidNetNS
	case errors.Is(err, errNotReady):
		code = types.ErrPluginNotAvailable
	case errors.Is(err, alloc.ErrLockTimeout), errors.Is(err, alloc.ErrPoolExhausted), errors.Is(err, netsetup.ErrNoLink),
		errors.Is(err, provider.ErrIdentityUnchecked),
		errors.Is(err, netsetup.ErrRouteTaken): // the address is given back; a retry takes another
		code = types.ErrTryAgainLater
	case errors.Is(err, errNoAllocation):
		code = types.ErrUnknownContainer
	case errors.Is(err, alloc.ErrCorrupt), errors.Is(err, alloc.ErrUnsupportedVersion), errors.Is(err, alloc.ErrIO),
		errors.Is(err, alloc.ErrInsecure), errors.Is(err, alloc.ErrStateLost), errors.As(err, &pathErr):
		code = types.ErrIOFailure
	}
	return types.NewError(code, err.Error(), "")
}

func defaultString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
