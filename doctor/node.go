package doctor

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/metrics"
)

func (e *Env) sysctl(key string) (string, error) {
	data, err := os.ReadFile(filepath.Join(e.ProcRoot, "sys", strings.ReplaceAll(key, ".", "/")))
	return strings.TrimSpace(string(data)), err
}

func checkIPForward(e *Env) Result {
	const name = "ip_forward"
	v, err := e.sysctl("net.ipv4.ip_forward")
	switch {
	case err != nil:
		return skip(name, "cannot read net.ipv4.ip_forward: %v", err)
	case v != "1":
		return fail(name, "sysctl -w net.ipv4.ip_forward=1 and persist it: echo net.ipv4.ip_forward=1 > /etc/sysctl.d/90-eni-cni.conf "+
			"(ADD turns it on, but something turned it off since)", "net.ipv4.ip_forward is %s: the node does not route pod traffic", v)
	}
	return ok(name, "net.ipv4.ip_forward=1")
}

// checkRPFilter: replies to pods on a secondary ENI arrive on that ENI
// while the main table routes their source elsewhere; strict reverse-path
// filtering (1) drops them. The kernel uses the larger of "all" and the
// link's own value.
func checkRPFilter(e *Env, src *section.EC2) Result {
	const name = "rp_filter"
	enis := secondaryENIs(src)
	if len(enis) == 0 {
		return skip(name, "no secondary ENI in use")
	}
	all, err := e.sysctl("net.ipv4.conf.all.rp_filter")
	if err != nil {
		return skip(name, "cannot read net.ipv4.conf.all.rp_filter: %v", err)
	}
	byMAC, _ := e.linkNames(src)
	var strict []string
	for _, eni := range enis {
		link := byMAC[normMAC(eni.MAC)]
		if link == "" {
			continue
		}
		own, err := e.sysctl("net.ipv4.conf." + link + ".rp_filter")
		if err != nil {
			continue
		}
		a, _ := strconv.Atoi(all)
		o, _ := strconv.Atoi(own)
		if max(a, o) == 1 {
			strict = append(strict, fmt.Sprintf("%s (%s; all=%s, own=%s)", link, eni.ID, all, own))
		}
	}
	if len(strict) > 0 {
		return fail(name, "sysctl -w net.ipv4.conf.<link>.rp_filter=2 for each (eni-cni sets it when it sets an ENI up; something reset it), "+
			"and keep net.ipv4.conf.all.rp_filter at 0 or 2 in /etc/sysctl.d",
			"strict reverse-path filtering on secondary ENIs drops their pods' replies: %s", strings.Join(strict, ", "))
	}
	return ok(name, "loose or off on the %d secondary ENI links", len(enis))
}

// checkNodePort: without the primary ENI's connection marking, replies to
// NodePort, hostPort and load-balancer traffic DNATed to a pod on a
// secondary ENI leave by that ENI and the VPC drops them (docs/nodeport.md).
func checkNodePort(e *Env, src *section.EC2) Result {
	const name = "nodeport"
	primary, found := src.PrimaryENI()
	if !found {
		return skip(name, "no ec2 store with the primary ENI")
	}
	if e.NodePort == nil {
		return skip(name, "cannot check the NodePort marking here")
	}
	missing, err := e.NodePort(primary.MAC)
	if err != nil {
		return skip(name, "cannot check the NodePort marking: %v", err)
	}
	const fix = "run `eni-cni warm`; see docs/nodeport.md"
	switch {
	case len(missing) == 0:
		return ok(name, "replies of connections entering %s leave by it (connection marking)", primary.ID)
	case len(secondaryENIs(src)) == 0:
		return warn(name, fix, "no secondary ENI in use yet, and the NodePort marking is not set up: %s", strings.Join(missing, "; "))
	}
	return fail(name, fix, "NodePort, hostPort and load balancers to pods on secondary ENIs time out: the node lacks %s", strings.Join(missing, "; "))
}

// checkSNAT: without the nat chain pods reach nothing beyond the VPC;
// without the filter chain's drop, packets conntrack calls INVALID leave
// with a pod's address and the VPC drops them (a reset upload's segments
// in flight: docs/ec2.md).
func checkSNAT(e *Env, src *section.EC2) Result {
	const name = "snat"
	if e.SNAT == nil {
		return skip(name, "snat is off, or iptables cannot be read here")
	}
	if _, found := src.PrimaryENI(); !found {
		return skip(name, "no ec2 store with the primary ENI")
	}
	missing, err := e.SNAT(src)
	if err != nil {
		return skip(name, "cannot check the SNAT: %v", err)
	}
	if len(missing) > 0 {
		return fail(name, "run `eni-cni warm`; see docs/ec2.md", "pod traffic leaving the VPC leaves with the pod's address, which the VPC drops: the node lacks %s", strings.Join(missing, "; "))
	}
	return ok(name, "pod traffic leaving the VPC leaves as the primary ENI's address; conntrack-INVALID pod packets are dropped")
}

// checkForward: a FORWARD policy of DROP (Docker sets it) drops pod
// traffic the node routes, unless rules accept it.
func checkForward(e *Env) Result {
	const name = "iptables-forward"
	if e.Forward == nil {
		return skip(name, "iptables not available")
	}
	rules, err := e.Forward()
	if err != nil {
		return skip(name, "cannot list the FORWARD chain: %v", err)
	}
	policy := ""
	for _, r := range rules {
		if f := strings.Fields(r); len(f) == 3 && f[0] == "-P" && f[1] == "FORWARD" {
			policy = f[2]
		}
	}
	if policy == "ACCEPT" || policy == "" {
		return ok(name, "FORWARD policy %s", defaultStr(policy, "unknown (no -P line)"))
	}
	prefix := e.VethPrefix
	if prefix == "" {
		prefix = "eni"
	}
	in, out := false, false
	for _, r := range rules {
		f := strings.Fields(r)
		if !slices.Contains(f, "ACCEPT") || (len(f) > 0 && f[0] != "-A") {
			continue
		}
		for i := 0; i+1 < len(f); i++ {
			if f[i+1] == prefix+"+" || f[i+1] == "+" {
				in = in || f[i] == "-i"
				out = out || f[i] == "-o"
			}
		}
	}
	if in && out {
		return ok(name, "FORWARD policy %s, with ACCEPT rules for %s+ both ways", policy, prefix)
	}
	return fail(name, fmt.Sprintf("iptables -I FORWARD -i %[1]s+ -j ACCEPT; iptables -I FORWARD -o %[1]s+ -j ACCEPT (persist them), or iptables -P FORWARD ACCEPT", prefix),
		"FORWARD policy is %s and no rule accepts traffic of the pods' veths (%s+) in both directions: pods cannot reach other nodes", policy, prefix)
}

func checkCRI(ctx context.Context, e *Env) Result {
	const name = "cri"
	if e.CRI == nil {
		return skip(name, "no CRI client")
	}
	c, ep, err := e.CRI()
	if err != nil {
		return fail(name, "start the container runtime, or give gc its socket: --cri-endpoint, $CONTAINER_RUNTIME_ENDPOINT or runtime-endpoint in /etc/crictl.yaml", "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := c.Version(ctx)
	if err != nil {
		return fail(name, "check the runtime's CRI plugin and socket permissions", "%s does not answer: %v", ep, err)
	}
	sbs, err := c.ListSandboxes(ctx)
	if err != nil {
		return fail(name, "check the runtime's logs", "%s (%s %s) cannot list sandboxes: %v", ep, info.Name, info.Version, err)
	}
	return ok(name, "%s %s at %s answers: %d sandboxes", info.Name, info.Version, ep, len(sbs))
}

// checkWiring compares the store with the kernel: every allocation has its
// host veth, /32 route and `to` rule, and no veth of ours is unexplained.
// Allocations younger than a few seconds may be mid-ADD and are skipped.
func checkWiring(e *Env, st *alloc.State) []Result {
	const name = "wiring"
	if st == nil || e.Host == nil {
		return []Result{skip(name, "no store or no host listing")}
	}
	veths, err1 := e.Host.Veths()
	routes, err2 := e.Host.Routes()
	rules, err3 := e.Host.Rules()
	if err1 != nil || err2 != nil || err3 != nil {
		return []Result{fail(name, "", "list host veths, routes and rules: %v %v %v", err1, err2, err3)}
	}
	hasVeth := map[string]bool{}
	for _, v := range veths {
		hasVeth[v] = true
	}
	routeOf := map[netip.Addr]string{}
	for _, r := range routes {
		routeOf[r.IP] = r.Veth
	}
	toRule := map[netip.Addr]bool{}
	for _, r := range rules {
		if !r.From {
			toRule[r.IP] = true
		}
	}
	var broken []string
	ours := map[string]bool{}
	for _, a := range st.Allocations {
		ours[a.HostVeth] = true
		if e.Now.Sub(a.AllocatedAt) < 10*time.Second {
			continue
		}
		var missing []string
		if !hasVeth[a.HostVeth] {
			missing = append(missing, "veth "+a.HostVeth)
		}
		if routeOf[a.IP] != a.HostVeth {
			missing = append(missing, "route "+a.IP.String())
		}
		if !toRule[a.IP] {
			missing = append(missing, "rule to "+a.IP.String())
		}
		if len(missing) > 0 {
			broken = append(broken, fmt.Sprintf("%s/%s (%s): no %s", a.PodNamespace, a.PodName, a.IP, strings.Join(missing, ", ")))
		}
	}
	var foreign []string
	for _, v := range veths {
		if !ours[v] {
			foreign = append(foreign, v)
		}
	}
	var out []Result
	if len(broken) > 0 {
		out = append(out, fail(name, "delete the pods (their next ADD wires them anew); if their sandboxes are gone, `eni-cni gc` frees them",
			"%d of %d allocations are not wired: %s", len(broken), len(st.Allocations), strings.Join(broken, "; ")))
	} else {
		out = append(out, ok(name, "all %d allocations have their veth, route and rule", len(st.Allocations)))
	}
	const fname = "foreign-veths"
	if len(foreign) > 0 {
		out = append(out, warn(fname, "`eni-cni gc` removes those routed into this network's pool; others may belong to another eni-cni network on this node",
			"%d veths named like ours are not in this store: %s", len(foreign), strings.Join(foreign, ", ")))
	} else {
		out = append(out, ok(fname, "every host veth named like ours is in the store"))
	}
	return out
}

// staleAfter is how old the last run of a timer's job may be: the timers
// run every 30 s (warm) and every minute (gc).
const staleAfter = 5 * time.Minute

// checkTimers: the timers (or the cron file) are installed and their jobs
// ran recently, and successfully, according to the run record.
func checkTimers(e *Env) []Result {
	jobs := []string{"gc"}
	if e.Source == "ec2" {
		jobs = append(jobs, "warm")
	}
	var out []Result
	cron, _ := e.readFile("/etc/cron.d/eni-cni")
	runs, err := metrics.LoadRuns(e.StateDir)
	for _, job := range jobs {
		name := "timer-" + job
		unit := "eni-cni-" + job + ".timer"
		var how string
		var files []string // what installed the job: their age tells a fresh install
		switch {
		case e.unitInstalled(unit) && (e.unitRuns(unit) || e.unitEnabled(unit)):
			how = unit
			for _, d := range []string{"/etc/systemd/system", "/etc/systemd/system/timers.target.wants", "/usr/lib/systemd/system", "/lib/systemd/system"} {
				files = append(files, d+"/"+unit)
			}
		case strings.Contains(string(cron), "eni-cni "+job) || strings.Contains(string(cron), "eni-cni\" "+job):
			how = "/etc/cron.d/eni-cni"
			files = []string{how}
		default:
			out = append(out, fail(name, "install and enable the timers: scripts/install.sh (systemctl enable --now "+unit+"), or the cron file where systemd does not run",
				"neither %s nor /etc/cron.d/eni-cni runs `eni-cni %s`", unit, job))
			continue
		}
		if err != nil {
			out = append(out, warn(name, "", "%s installed; run record unreadable: %v", how, err))
			continue
		}
		r := runs.Jobs[job]
		switch {
		case r == nil && e.Now.Sub(e.newestMtime(files)) < staleAfter:
			// Just installed (eni-cni install runs doctor right away): the
			// first tick is still to come. Not a failure yet.
			age := max(e.Now.Sub(e.newestMtime(files)), 0)
			out = append(out, warn(name, "run `eni-cni doctor` again in a minute or two",
				"%s installed %s ago; `eni-cni %s` has not run yet", how, age.Round(time.Second), job))
		case r == nil:
			out = append(out, fail(name, "check the timer: systemctl status "+unit+" (or cron's log); run `eni-cni "+job+"` by hand to see its error",
				"%s installed, but `eni-cni %s` has never run on this node", how, job))
		case e.Now.Sub(r.Last) > staleAfter:
			out = append(out, fail(name, "check the timer: systemctl status "+unit+" (or cron's log)",
				"%s installed, but `eni-cni %s` last ran %s ago", how, job, e.Now.Sub(r.Last).Round(time.Second)))
		case !r.OK:
			out = append(out, fail(name, "run `eni-cni "+job+"` by hand to see the whole error",
				"`eni-cni %s` ran %s ago and failed: %s", job, e.Now.Sub(r.Last).Round(time.Second), r.Error))
		default:
			out = append(out, ok(name, "%s: `eni-cni %s` ran %s ago, ok, in %.2fs", how, job, e.Now.Sub(r.Last).Round(time.Second), r.DurationSec))
		}
	}
	return out
}

// newestMtime is the latest modification time of those files that exist
// (a link's own time, not its target's); zero when none does.
func (e *Env) newestMtime(files []string) time.Time {
	var t time.Time
	for _, f := range files {
		if fi, err := os.Lstat(e.path(f)); err == nil && fi.ModTime().After(t) {
			t = fi.ModTime()
		}
	}
	return t
}

// kubeletMaxPods finds kubelet's maxPods: --max-pods or --config of a
// running kubelet, else /var/lib/kubelet/config.yaml; 110 (kubelet's
// default) when the config does not set it.
func (e *Env) kubeletMaxPods() (int, string, bool) {
	configPath := "/var/lib/kubelet/config.yaml"
	if e.ProcRoot != "" {
		procs, _ := filepath.Glob(filepath.Join(e.ProcRoot, "[0-9]*", "cmdline"))
		for _, p := range procs {
			data, err := os.ReadFile(p)
			if err != nil || len(data) == 0 {
				continue
			}
			args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
			if filepath.Base(args[0]) != "kubelet" {
				continue
			}
			for i, a := range args {
				val := func(flag string) (string, bool) {
					if v, ok := strings.CutPrefix(a, flag+"="); ok {
						return v, true
					}
					if a == flag && i+1 < len(args) {
						return args[i+1], true
					}
					return "", false
				}
				if v, ok := val("--max-pods"); ok {
					if n, err := strconv.Atoi(v); err == nil {
						return n, "kubelet --max-pods", true
					}
				}
				if v, ok := val("--config"); ok {
					configPath = v
				}
			}
		}
	}
	data, err := e.readFile(configPath)
	if err != nil {
		return 0, "", false
	}
	if m := maxPodsRe.FindSubmatch(data); m != nil {
		n, _ := strconv.Atoi(string(m[1]))
		return n, configPath, true
	}
	return 110, configPath + " (kubelet's default)", true
}

func checkMaxPods(e *Env, src *section.EC2) Result {
	const name = "kubelet-maxpods"
	maxPods, where, found := e.kubeletMaxPods()
	if !found {
		return skip(name, "kubelet's configuration not found")
	}
	var capacity int
	var basis string
	switch {
	case e.Source == "ec2" && src != nil && src.Limits != nil:
		capacity = section.MaxAllowedPodsOf(*src.Limits, e.Warm)
		basis = fmt.Sprintf("%s: %d pod addresses + 2 host-network pods", src.InstanceType, capacity-2)
		if e.Warm.CustomSubnets() {
			basis += ", none on the primary ENI (custom subnets)"
		}
		if rec := section.MaxPodsOf(*src.Limits, e.Warm); maxPods > capacity {
			return fail(name, fmt.Sprintf("set maxPods: %d in %s (`eni-cni max-pods` prints it) and restart kubelet", rec, where),
				"kubelet allows %d pods (%s) but this node can address %d (%s): pods beyond sit in ContainerCreating", maxPods, where, capacity, basis)
		}
	case e.Source == "static" && e.Pool != nil:
		capacity = e.Pool.Size(alloc.NewState("")) + 2
		basis = "the static pool + 2 host-network pods"
		if maxPods > capacity {
			return warn(name, fmt.Sprintf("set maxPods: %d or widen pool.ranges", capacity),
				"kubelet allows %d pods (%s) but the static pool has %d addresses", maxPods, where, capacity-2)
		}
	default:
		return skip(name, "kubelet allows %d pods (%s); this node's limits are unknown until warm has run", maxPods, where)
	}
	return ok(name, "kubelet allows %d pods (%s), within %d (%s)", maxPods, where, capacity, basis)
}
