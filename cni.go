package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	cnins "github.com/containernetworking/cni/pkg/ns"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	cniversion "github.com/containernetworking/cni/pkg/version"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/logfile"
	"github.com/eni-cni/eni-cni/metrics"
	"github.com/eni-cni/eni-cni/netsetup"
)

// errInvalidArgs: CNI environment or CNI_ARGS that cannot be used.
var errInvalidArgs = errors.New("invalid CNI arguments")

// errInvalidNetns: CNI_NETNS that is missing or is the plugin's own.
var errInvalidNetns = errors.New("invalid network namespace")

// cniMain serves one CNI verb and returns the exit code.
func cniMain() int {
	if e := preflight(os.Getenv); e != nil {
		_ = e.Print()
		return 1
	}
	funcs := skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck, Status: cmdStatus, GC: cmdGC}
	if e := skel.PluginMainFuncsWithError(funcs, cniversion.All, "eni-cni "+version); e != nil {
		if err := e.Print(); err != nil {
			fmt.Fprintf(os.Stderr, "eni-cni: print error: %v\n", err)
		}
		return 1
	}
	return 0
}

// preflight rejects a missing container ID with the same code as a bad one
// (skel would call it "unknown container"), before anything else runs.
func preflight(getenv func(string) string) *types.Error {
	switch getenv("CNI_COMMAND") {
	case "ADD", "DEL", "CHECK":
		if getenv("CNI_CONTAINERID") == "" {
			return types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID is missing", "")
		}
	}
	return nil
}

// verbFunc is the body of a verb, given its parsed configuration.
type verbFunc func(ctx context.Context, p *plugin) (logAttrs []any, err error)

// runVerb parses the configuration, builds the plugin, runs fn, logs one
// line and converts the error to a CNI error at this single boundary.
func runVerb(verb string, args *skel.CmdArgs, fn verbFunc) error {
	start := time.Now()
	parse := parseConfig
	if verb == "DEL" {
		// DEL frees even when the entry has a key we do not know (a typo
		// added while pods run): failing would leak their addresses.
		parse = decodeConfig
	}
	cfg, err := parse(args.StdinData)
	if err != nil {
		return toCNIError(err)
	}
	logger := newLogger(cfg)
	if verb == "DEL" {
		if kerr := checkKeys(args.StdinData); kerr != nil {
			logger.Warn(verb, "containerID", args.ContainerID, "warning", kerr.Error())
		}
	}
	var attrs []any
	p, err := newPlugin(cfg)
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

func newPlugin(cfg *config) (*plugin, error) {
	store, err := alloc.NewDiskStore(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	bootID, err := alloc.ReadBootID()
	if err != nil {
		return nil, err
	}
	mgr := &alloc.Manager{
		Store: store, Pool: cfg.Pool, BootID: bootID,
		Cooldown: cfg.Cooldown, LockTimeout: cfg.LockTimeout,
	}
	var src poolSource = staticSource{cfg.Pool}
	if cfg.Source == sourceEC2 {
		ec2src := ec2Source{cfg: cfg, mgr: mgr, warm: newNodeWarm()}
		src, mgr.Admit = ec2src, ec2src.admit
	}
	return newPluginWith(cfg, mgr, kernel{}, src), nil
}

func cmdAdd(args *skel.CmdArgs) error {
	return runVerb("ADD", args, func(ctx context.Context, p *plugin) ([]any, error) {
		at, err := attachmentFrom(args, p.cfg)
		if err != nil {
			return nil, err
		}
		if err := validateNetns(args.Netns); err != nil {
			return nil, err
		}
		res, err := p.add(ctx, at)
		if err != nil {
			return p.addAttrs, err
		}
		attrs := append([]any{"ip", res.IPs[0].Address.IP.String(), "pod", at.PodNamespace + "/" + at.PodName}, p.addAttrs...)
		if err := types.PrintResult(res, p.cfg.CNIVersion); err != nil {
			return attrs, fmt.Errorf("print result: %w", err)
		}
		return attrs, nil
	})
}

func cmdDel(args *skel.CmdArgs) error {
	return runVerb("DEL", args, func(ctx context.Context, p *plugin) ([]any, error) {
		// DEL needs only (network, containerID, ifname): bad pod metadata in
		// CNI_ARGS must not keep it from freeing the address.
		k := alloc.Key{Network: p.cfg.Network, ContainerID: args.ContainerID, IfName: args.IfName}
		return []any{"netns", args.Netns}, p.del(ctx, k)
	})
}

func cmdCheck(args *skel.CmdArgs) error {
	return runVerb("CHECK", args, func(ctx context.Context, p *plugin) ([]any, error) {
		at, err := attachmentFrom(args, p.cfg)
		if err != nil {
			return nil, err
		}
		if err := validateNetns(args.Netns); err != nil {
			return nil, err
		}
		prev, err := prevResult(p.cfg)
		if err != nil {
			return nil, err
		}
		return nil, p.check(ctx, at, prev)
	})
}

func cmdStatus(args *skel.CmdArgs) error {
	return runVerb("STATUS", args, func(ctx context.Context, p *plugin) ([]any, error) {
		c, err := p.status(ctx)
		return []any{"free", c.Free, "allocated", c.Allocated}, err
	})
}

// cmdGC is the CNI 1.1 GC verb: attachments of this network that the
// runtime does not list as valid, and that are older than the grace, are
// freed as by DEL; host leftovers are swept.
func cmdGC(args *skel.CmdArgs) error {
	return runVerb("GC", args, func(ctx context.Context, p *plugin) ([]any, error) {
		valid, err := gc.ValidAttachmentsFromConfig(args.StdinData)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errDecode, err)
		}
		live := gc.FromValidAttachments(p.cfg.Network, valid)
		start := time.Now()
		c, err := p.collect(ctx, live, gc.Options{Grace: p.cfg.GCGrace}, false, hostNetwork{p.cfg.VethPrefix})
		u := metrics.RunUpdate{Job: "gc-verb", Start: start, Duration: time.Since(start), Err: err}
		if c != nil {
			u.Freed, u.Leftovers = len(c.Freed), c.Leftovers.Len()
		}
		p.recordJob(u, io.Discard)
		if err != nil {
			return nil, err
		}
		var lines strings.Builder
		err = c.report(&lines, false)
		return []any{"valid", len(valid), "freed", len(c.Freed), "young", len(c.Plan.Young),
			"leftovers", c.Leftovers.Len(), "report", strings.TrimSpace(lines.String())}, err
	})
}

// attachmentFrom reads the attachment's identity and pod metadata.
func attachmentFrom(args *skel.CmdArgs, cfg *config) (attachment, error) {
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
		if len(v) > 253 || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fmt.Errorf("%w: CNI_ARGS value of %s is too long or has control characters", errInvalidArgs, k)
		}
		kv[k] = v
	}
	return kv, nil
}

// validateNetns refuses a netns that does not exist or is the plugin's own:
// wiring "the pod" into the node's namespace would break the node.
func validateNetns(path string) error {
	if path == "" {
		return fmt.Errorf("%w: CNI_NETNS is empty", errInvalidNetns)
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%w: %s: %v", errInvalidNetns, path, err)
	}
	same, e := cnins.CheckNetNS(path)
	if e != nil {
		return e
	}
	if same {
		return fmt.Errorf("%w: %s is the plugin's own network namespace", errInvalidNetns, path)
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
func prevResult(cfg *config) (*current.Result, error) {
	if cfg.conf.RawPrevResult == nil {
		if gte, err := cniversion.GreaterThanOrEqualTo(cfg.CNIVersion, "1.0.0"); err == nil && gte {
			return nil, fmt.Errorf("%w: cniVersion %s requires the ADD result as prevResult", errNoPrevResult, cfg.CNIVersion)
		}
		return nil, nil
	}
	if err := cniversion.ParsePrevResult(&cfg.conf.PluginConf); err != nil {
		return nil, fmt.Errorf("%w: prevResult: %v", errDecode, err)
	}
	res, err := current.NewResultFromResult(cfg.conf.PrevResult)
	if err != nil {
		return nil, fmt.Errorf("%w: prevResult: %v", errDecode, err)
	}
	return res, nil
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
	case errors.Is(err, errDecode):
		code = types.ErrDecodingFailure
	case errors.Is(err, errInvalidConfig):
		code = types.ErrInvalidNetworkConfig
	case errors.Is(err, errInvalidArgs):
		code = types.ErrInvalidEnvironmentVariables
	case errors.Is(err, errInvalidNetns), errors.Is(err, netsetup.ErrNetNS):
		code = types.ErrInvalidNetNS
	case errors.Is(err, errNotReady):
		code = types.ErrPluginNotAvailable
	case errors.Is(err, alloc.ErrLockTimeout), errors.Is(err, alloc.ErrPoolExhausted), errors.Is(err, netsetup.ErrNoLink),
		errors.Is(err, errIdentityUnchecked),
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

// newLogger logs to the configured file (size-capped, rotated), or to
// stderr (which runtimes capture) when none is set or it cannot be opened.
// Stdout is reserved for CNI results.
func newLogger(cfg *config) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(strings.ToUpper(defaultString(cfg.LogLevel, "info"))))
	var out io.Writer = os.Stderr
	if cfg.LogFile != "" {
		if w, err := logfile.Open(cfg.LogFile, cfg.LogMaxSize, cfg.LogMaxFiles); err == nil {
			out = w
		}
	}
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: lv}))
}

func defaultString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
