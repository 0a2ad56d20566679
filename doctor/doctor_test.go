package doctor

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/alloc/allocfake"
	"github.com/eni-cni/eni-cni/ec2/ec2fake"
	"github.com/eni-cni/eni-cni/ec2/section"
	"github.com/eni-cni/eni-cni/gc"
	"github.com/eni-cni/eni-cni/gc/cri"
	"github.com/eni-cni/eni-cni/gc/crifake"
	"github.com/eni-cni/eni-cni/metrics"

	eniec2 "github.com/eni-cni/eni-cni/ec2"
)

// tree writes files under a new root; a value "->target" makes a symlink.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, full)
		} else {
			err = os.WriteFile(full, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func want(t *testing.T, r Result, status Status, substr string) {
	t.Helper()
	if r.Status != status || !strings.Contains(r.Message+" "+r.Fix, substr) {
		t.Errorf("%s: %s %q (fix %q), want %s with %q", r.Name, r.Status, r.Message, r.Fix, status, substr)
	}
}

// An ec2 node with one secondary ENI, known to the store and the kernel.
var (
	eni1 = section.ENI{ID: "eni-1", MAC: "0a:00:00:00:00:01", DeviceNumber: 1, SubnetID: "subnet-1"}
	src  = &section.EC2{InstanceID: "i-1", InstanceType: "m5.large", Region: "us-east-1",
		Limits: &section.Limits{MaxENIs: 3, IPv4PerENI: 10, VCPUs: 2},
		ENIs:   []section.ENI{{ID: "eni-0", MAC: "0a:00:00:00:00:00", SubnetID: "subnet-0"}, eni1}}
	links = func() ([]Link, error) {
		return []Link{{Name: "eth0", MAC: "0a:00:00:00:00:00"}, {Name: "eth1", MAC: "0a:00:00:00:00:01"}}, nil
	}
)

func ec2Env(root string) *Env {
	return &Env{Root: root, Source: "ec2", VethPrefix: "eni", Links: links, Now: time.Now()}
}

func TestNetworkd(t *testing.T) {
	enabled := map[string]string{
		"/usr/lib/systemd/system/systemd-networkd.service":                     "[Unit]\n",
		"/etc/systemd/system/multi-user.target.wants/systemd-networkd.service": "->/usr/lib/systemd/system/systemd-networkd.service",
	}
	dhcpAll := map[string]string{"/etc/systemd/network/50-dhcp.network": "[Match]\nName=eth* en*\n[Network]\nDHCP=yes\n"}
	keep := map[string]string{"/etc/systemd/networkd.conf.d/eni-cni.conf": "[Network]\nManageForeignRoutingPolicyRules=no\nManageForeignRoutes=no\n"}
	unmanaged := map[string]string{"/etc/systemd/network/10-eni-cni-unmanaged.network": "[Match]\nMACAddress=0A:00:00:00:00:01\n[Link]\nUnmanaged=yes\n"}

	rs := checkNetworkd(ec2Env(tree(t, nil)), src)
	want(t, rs[0], Skip, "not running")

	rs = checkNetworkd(ec2Env(tree(t, merge(enabled, dhcpAll))), src)
	want(t, rs[0], Fail, "eth1 by /etc/systemd/network/50-dhcp.network")
	want(t, rs[0], Fail, "MACAddress=0a:00:00:00:00:01")
	want(t, rs[1], Fail, "ManageForeignRoutingPolicyRules=no")

	rs = checkNetworkd(ec2Env(tree(t, merge(enabled, dhcpAll, unmanaged, keep))), src)
	want(t, rs[0], OK, "manages none")
	want(t, rs[1], OK, "keeps foreign")

	// A file that only matches the primary (eth0) manages no ENI of ours;
	// a mask in /etc hides the vendor's catch-all.
	only0 := map[string]string{"/etc/systemd/network/20-eth0.network": "[Match]\nName=eth0\n[Network]\nDHCP=yes\n",
		"/usr/lib/systemd/network/80-ec2.network": "[Match]\nDriver=ena\n[Network]\nDHCP=yes\n",
		"/etc/systemd/network/80-ec2.network":     "->/dev/null"}
	want(t, checkNetworkd(ec2Env(tree(t, merge(enabled, only0, keep))), src)[0], OK, "manages none")
	// Without the mask, the vendor's file matches by driver.
	delete(only0, "/etc/systemd/network/80-ec2.network")
	want(t, checkNetworkd(ec2Env(tree(t, merge(enabled, only0, keep))), src)[0], Fail, "80-ec2.network")
	// No secondary ENI yet: judged on the names the next ones get.
	want(t, checkNetworkd(ec2Env(tree(t, merge(enabled, dhcpAll, keep))), nil)[0], Fail, "ens6")
}

func TestEC2NetUtils(t *testing.T) {
	rule := map[string]string{"/usr/lib/udev/rules.d/99-vpc-policy-routes.rules": "SUBSYSTEM==\"net\"\n"}
	want(t, checkEC2NetUtils(ec2Env(tree(t, nil))), OK, "no active")
	want(t, checkEC2NetUtils(ec2Env(tree(t, rule))), Fail, "ln -s /dev/null /etc/udev/rules.d/99-vpc-policy-routes.rules")
	masked := merge(rule, map[string]string{"/etc/udev/rules.d/99-vpc-policy-routes.rules": "->/dev/null"})
	want(t, checkEC2NetUtils(ec2Env(tree(t, masked))), OK, "no active")
	v1 := map[string]string{"/etc/udev/rules.d/53-ec2-network-interfaces.rules": "x\n"}
	want(t, checkEC2NetUtils(ec2Env(tree(t, v1))), Fail, "53-ec2-network-interfaces.rules")
}

func TestNetworkManager(t *testing.T) {
	nm := map[string]string{
		"/usr/lib/systemd/system/NetworkManager.service":                     "[Unit]\n",
		"/etc/systemd/system/multi-user.target.wants/NetworkManager.service": "->/usr/lib/systemd/system/NetworkManager.service",
		"/etc/NetworkManager/NetworkManager.conf":                            "[main]\nplugins=keyfile\n",
	}
	rs := checkNetworkManager(ec2Env(tree(t, nil)), src)
	want(t, rs[0], Skip, "not running")
	want(t, rs[1], OK, "not enabled")

	rs = checkNetworkManager(ec2Env(tree(t, nm)), src)
	want(t, rs[0], Fail, "eth1")
	want(t, rs[0], Fail, "except:interface-name:eth0")

	conf := map[string]string{"/etc/NetworkManager/conf.d/eni-cni.conf": "[keyfile]\nunmanaged-devices=interface-name:eth*;except:interface-name:eth0\n"}
	want(t, checkNetworkManager(ec2Env(tree(t, merge(nm, conf))), src)[0], OK, "unmanaged")
	byDevice := map[string]string{"/etc/NetworkManager/conf.d/eni-cni.conf": "[device-eni]\nmatch-device=mac:0a:00:00:00:00:01\nmanaged=0\n"}
	want(t, checkNetworkManager(ec2Env(tree(t, merge(nm, byDevice))), src)[0], OK, "unmanaged")
	// except: the ENI itself is excluded from the unmanaged list.
	wrong := map[string]string{"/etc/NetworkManager/conf.d/x.conf": "[keyfile]\nunmanaged-devices=interface-name:eth*;except:interface-name:eth1\n"}
	want(t, checkNetworkManager(ec2Env(tree(t, merge(nm, wrong))), src)[0], Fail, "eth1")

	cloud := map[string]string{
		"/usr/lib/systemd/system/nm-cloud-setup.service":                          "[Unit]\n",
		"/etc/systemd/system/NetworkManager.service.wants/nm-cloud-setup.service": "->/usr/lib/systemd/system/nm-cloud-setup.service",
		"/usr/lib/systemd/system/nm-cloud-setup.timer":                            "[Unit]\n",
		"/etc/systemd/system/timers.target.wants/nm-cloud-setup.timer":            "->/usr/lib/systemd/system/nm-cloud-setup.timer",
	}
	want(t, checkNetworkManager(ec2Env(tree(t, cloud)), src)[1], Fail, "systemctl disable --now nm-cloud-setup")
	// systemd running: asked, not judged by the symlinks.
	e := ec2Env(tree(t, merge(nm, cloud)))
	e.UnitActive = func(string) bool { return false }
	rs = checkNetworkManager(e, src)
	want(t, rs[0], Skip, "not running")
	want(t, rs[1], OK, "not enabled")
}

func TestMACPolicy(t *testing.T) {
	udevd := map[string]string{"/usr/lib/systemd/systemd-udevd": "bin"}
	def := map[string]string{"/usr/lib/systemd/network/99-default.link": "[Match]\nOriginalName=*\n[Link]\nNamePolicy=keep kernel\nMACAddressPolicy=persistent\n"}
	want(t, checkMACPolicy(ec2Env(tree(t, def))), Skip, "no systemd-udevd")
	want(t, checkMACPolicy(ec2Env(tree(t, merge(udevd, def)))), Fail, "OriginalName=eni*")
	ours := map[string]string{"/etc/systemd/network/10-eni-cni-veth.link": "[Match]\nOriginalName=eni*\n[Link]\nMACAddressPolicy=none\n"}
	want(t, checkMACPolicy(ec2Env(tree(t, merge(udevd, def, ours)))), OK, "10-eni-cni-veth.link")
	// The distribution's file overridden in /etc.
	none := map[string]string{"/etc/systemd/network/99-default.link": "[Match]\nOriginalName=*\n[Link]\nMACAddressPolicy=none\n"}
	want(t, checkMACPolicy(ec2Env(tree(t, merge(udevd, def, none)))), OK, "MACAddressPolicy=none")
	// A .link for other drivers does not apply to veths.
	other := map[string]string{"/etc/systemd/network/10-ena.link": "[Match]\nDriver=ena\n[Link]\nMACAddressPolicy=none\n"}
	want(t, checkMACPolicy(ec2Env(tree(t, merge(udevd, def, other)))), Fail, "99-default.link")
}

func procTree(t *testing.T, sysctls map[string]string) string {
	files := map[string]string{}
	for k, v := range sysctls {
		files["/sys/"+strings.ReplaceAll(k, ".", "/")] = v + "\n"
	}
	return tree(t, files)
}

func TestSysctls(t *testing.T) {
	e := ec2Env(t.TempDir())
	e.ProcRoot = procTree(t, map[string]string{"net.ipv4.ip_forward": "0", "net.ipv4.conf.all.rp_filter": "1", "net.ipv4.conf.eth1.rp_filter": "0"})
	want(t, checkIPForward(e), Fail, "net.ipv4.ip_forward=1")
	want(t, checkRPFilter(e, src), Fail, "eth1 (eni-1; all=1, own=0)")
	e.ProcRoot = procTree(t, map[string]string{"net.ipv4.ip_forward": "1", "net.ipv4.conf.all.rp_filter": "1", "net.ipv4.conf.eth1.rp_filter": "2"})
	want(t, checkIPForward(e), OK, "=1")
	want(t, checkRPFilter(e, src), OK, "loose or off")
	want(t, checkRPFilter(e, &section.EC2{ENIs: src.ENIs[:1]}), Skip, "no secondary")
}

func TestSNAT(t *testing.T) {
	e := ec2Env(t.TempDir())
	want(t, checkSNAT(e, src), Skip, "snat is off")
	e.SNAT = func(*section.EC2) ([]string, error) { return nil, nil }
	want(t, checkSNAT(e, nil), Skip, "no ec2 store")
	want(t, checkSNAT(e, src), OK, "INVALID pod packets are dropped")
	e.SNAT = func(*section.EC2) ([]string, error) {
		return []string{"iptables filter chain ENI-CNI-SNAT (the drop of conntrack-INVALID pod traffic SNAT cannot rewrite)"}, nil
	}
	want(t, checkSNAT(e, src), Fail, "lacks iptables filter chain ENI-CNI-SNAT")
	e.SNAT = func(*section.EC2) ([]string, error) { return nil, errors.New("iptables: not found") }
	want(t, checkSNAT(e, src), Skip, "not found")
}

func TestNodePort(t *testing.T) {
	e := ec2Env(t.TempDir())
	want(t, checkNodePort(e, nil), Skip, "no ec2 store")
	want(t, checkNodePort(e, src), Skip, "cannot check")
	var asked string
	missing := func(m ...string) func(string) ([]string, error) {
		return func(mac string) ([]string, error) { asked = mac; return m, nil }
	}
	e.NodePort = missing()
	want(t, checkNodePort(e, src), OK, "eni-0")
	if asked != "0a:00:00:00:00:00" {
		t.Errorf("checked the marking of %q, want the primary ENI's MAC", asked)
	}
	e.NodePort = missing("ip rule 1024: fwmark 0x80/0x80 lookup main")
	want(t, checkNodePort(e, src), Fail, "lacks ip rule 1024")
	want(t, checkNodePort(e, src), Fail, "run `eni-cni warm`; see docs/nodeport.md")
	want(t, checkNodePort(e, &section.EC2{ENIs: src.ENIs[:1]}), Warn, "no secondary ENI in use yet")
	e.NodePort = func(string) ([]string, error) { return nil, errors.New("no link with the primary ENI's MAC") }
	want(t, checkNodePort(e, src), Skip, "no link")
}

func TestForwardPolicy(t *testing.T) {
	e := ec2Env(t.TempDir())
	list := func(rules ...string) func() ([]string, error) { return func() ([]string, error) { return rules, nil } }
	e.Forward = list("-P FORWARD ACCEPT")
	want(t, checkForward(e), OK, "ACCEPT")
	e.Forward = list("-P FORWARD DROP", "-A FORWARD -j DOCKER-USER")
	want(t, checkForward(e), Fail, "iptables -I FORWARD -i eni+ -j ACCEPT")
	e.Forward = list("-P FORWARD DROP", "-A FORWARD -i eni+ -j ACCEPT")
	want(t, checkForward(e), Fail, "both directions")
	e.Forward = list("-P FORWARD DROP", "-A FORWARD -i eni+ -j ACCEPT", "-A FORWARD -o eni+ -j ACCEPT")
	want(t, checkForward(e), OK, "both ways")
	e.Forward = func() ([]string, error) { return nil, errors.New("no iptables") }
	want(t, checkForward(e), Skip, "no iptables")
}

type fakeHost struct {
	veths  []string
	rules  []gc.HostRule
	routes []gc.HostRoute
}

func (h *fakeHost) Veths() ([]string, error)        { return h.veths, nil }
func (h *fakeHost) Rules() ([]gc.HostRule, error)   { return h.rules, nil }
func (h *fakeHost) Routes() ([]gc.HostRoute, error) { return h.routes, nil }
func (h *fakeHost) DeleteVeth(...string) error      { panic("doctor deletes nothing") }
func (h *fakeHost) DeleteRule(gc.HostRule) error    { panic("doctor deletes nothing") }
func (h *fakeHost) DeleteRoute(gc.HostRoute) error  { panic("doctor deletes nothing") }

func TestWiring(t *testing.T) {
	now := time.Now()
	ip1, ip2, ip3 := netip.MustParseAddr("10.0.0.11"), netip.MustParseAddr("10.0.0.12"), netip.MustParseAddr("10.0.0.13")
	st := alloc.NewState("b")
	st.Allocations = []alloc.Allocation{
		{Key: alloc.Key{Network: "pods", ContainerID: "a", IfName: "eth0"}, IP: ip1, HostVeth: "enia", PodNamespace: "ns", PodName: "a", AllocatedAt: now.Add(-time.Hour)},
		{Key: alloc.Key{Network: "pods", ContainerID: "b", IfName: "eth0"}, IP: ip2, HostVeth: "enib", PodNamespace: "ns", PodName: "b", AllocatedAt: now.Add(-time.Hour)},
		// Mid-ADD: not wired yet, and not blamed.
		{Key: alloc.Key{Network: "pods", ContainerID: "c", IfName: "eth0"}, IP: ip3, HostVeth: "enic", AllocatedAt: now},
	}
	h := &fakeHost{veths: []string{"enia", "enib"},
		routes: []gc.HostRoute{{IP: ip1, Veth: "enia"}, {IP: ip2, Veth: "enib"}},
		rules:  []gc.HostRule{{IP: ip1, Priority: 512}, {IP: ip2, Priority: 512}}}
	e := ec2Env(t.TempDir())
	e.Host, e.Now = h, now
	rs := checkWiring(e, st)
	want(t, rs[0], OK, "all 3 allocations")
	want(t, rs[1], OK, "every host veth")

	h.routes = h.routes[:1]
	h.veths = append(h.veths, "enizzz")
	rs = checkWiring(e, st)
	want(t, rs[0], Fail, "ns/b (10.0.0.12): no route 10.0.0.12")
	want(t, rs[1], Warn, "enizzz")
}

func TestCRICheck(t *testing.T) {
	e := ec2Env(t.TempDir())
	want(t, checkCRI(context.Background(), e), Skip, "no CRI")
	srv := crifake.Start(t)
	srv.SetSandboxes(crifake.PodSandbox("a", "ns", "p", "u", true, time.Now()))
	e.CRI = func() (CRI, string, error) {
		c, err := criClient(srv.Endpoint())
		return c, srv.Endpoint(), err
	}
	want(t, checkCRI(context.Background(), e), OK, "1 sandboxes")
	srv.SetVersionError(errors.New("broken"))
	want(t, checkCRI(context.Background(), e), Fail, "does not answer")
	e.CRI = func() (CRI, string, error) { return nil, "", errors.New("no cri endpoint found") }
	want(t, checkCRI(context.Background(), e), Fail, "no cri endpoint found")
}

func TestTimers(t *testing.T) {
	units := map[string]string{
		"/usr/lib/systemd/system/eni-cni-gc.timer":                   "[Timer]\n",
		"/etc/systemd/system/timers.target.wants/eni-cni-gc.timer":   "->/usr/lib/systemd/system/eni-cni-gc.timer",
		"/usr/lib/systemd/system/eni-cni-warm.timer":                 "[Timer]\n",
		"/etc/systemd/system/timers.target.wants/eni-cni-warm.timer": "->/usr/lib/systemd/system/eni-cni-warm.timer",
	}
	now := time.Now()
	e := ec2Env(tree(t, nil))
	e.StateDir, e.Now = t.TempDir(), now
	rs := checkTimers(e)
	want(t, rs[0], Fail, "neither eni-cni-gc.timer nor /etc/cron.d/eni-cni")

	e.Root = tree(t, units)
	rs = checkTimers(e)
	want(t, rs[0], Warn, "has not run yet") // just installed: the first tick is to come
	e.Now = now.Add(staleAfter + time.Minute)
	rs = checkTimers(e)
	want(t, rs[0], Fail, "never run")
	e.Now = now

	metrics.RecordRun(e.StateDir, metrics.RunUpdate{Job: "gc", Start: now.Add(-time.Minute), Duration: time.Second})
	metrics.RecordRun(e.StateDir, metrics.RunUpdate{Job: "warm", Start: now.Add(-10 * time.Second), Err: errors.New("UnauthorizedOperation")})
	rs = checkTimers(e)
	want(t, rs[0], OK, "ran 1m0s ago, ok")
	want(t, rs[1], Fail, "UnauthorizedOperation")

	e.Now = now.Add(time.Hour)
	want(t, checkTimers(e)[0], Fail, "last ran 1h1m0s ago")

	// Cron instead of systemd; a static pool needs no warm.
	e.Root, e.Source, e.Now = tree(t, map[string]string{"/etc/cron.d/eni-cni": "* * * * * root /opt/cni/bin/eni-cni gc\n"}), "static", now
	rs = checkTimers(e)
	if len(rs) != 1 {
		t.Fatalf("static pool: %v", rs)
	}
	want(t, rs[0], OK, "/etc/cron.d/eni-cni")

	// A cron file just installed on a node where gc never ran: pending, not
	// failed (eni-cni install runs doctor right after installing it); an
	// old one that never ran: failed.
	e.StateDir = t.TempDir()
	want(t, checkTimers(e)[0], Warn, "/etc/cron.d/eni-cni installed 0s ago; `eni-cni gc` has not run yet")
	old := now.Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(e.Root, "etc/cron.d/eni-cni"), old, old); err != nil {
		t.Fatal(err)
	}
	want(t, checkTimers(e)[0], Fail, "never run")
}

func TestKubeletMaxPods(t *testing.T) {
	e := ec2Env(tree(t, nil))
	e.ProcRoot = t.TempDir()
	want(t, checkMaxPods(e, src), Skip, "not found")

	e.Root = tree(t, map[string]string{"/var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\nmaxPods: 110\nevictionHard:\n  maxPods: 3\n"})
	want(t, checkMaxPods(e, src), Fail, "set maxPods: 29")
	e.Root = tree(t, map[string]string{"/var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\n"})
	want(t, checkMaxPods(e, src), Fail, "110 pods (/var/lib/kubelet/config.yaml (kubelet's default))")
	e.Warm.PrefixDelegation = true
	want(t, checkMaxPods(e, src), OK, "within 434")
	e.Warm.PrefixDelegation = false

	// The running kubelet's --config, in JSON, and --max-pods.
	e.Root = tree(t, map[string]string{"/etc/kubelet.json": `{"kind":"KubeletConfiguration","maxPods": 20}`})
	e.ProcRoot = tree(t, map[string]string{"/4242/cmdline": "/usr/bin/kubelet\x00--config\x00/etc/kubelet.json\x00"})
	want(t, checkMaxPods(e, src), OK, "20 pods (/etc/kubelet.json)")
	e.ProcRoot = tree(t, map[string]string{"/4242/cmdline": "kubelet\x00--config=/etc/kubelet.json\x00--max-pods=64\x00"})
	want(t, checkMaxPods(e, src), Fail, "64 pods (kubelet --max-pods)")
	want(t, checkMaxPods(e, &section.EC2{}), Skip, "until warm has run")
}

// IMDS reachable with a token; unreachable; the token reply lost.
func TestIMDSCheck(t *testing.T) {
	f, err := ec2fake.New(ec2fake.Config{InstanceType: "m5.large"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e := ec2Env(t.TempDir())
	e.IMDSEndpoint = f.URL()
	r, info := checkIMDS(context.Background(), e)
	want(t, r, OK, "i-0123456789abcdef0 (m5.large, us-east-1)")
	if info == nil || !strings.HasPrefix(info.Subnet, "subnet-") {
		t.Errorf("info %+v", info)
	}

	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := "http://" + l.Addr().String()
	l.Close()
	e.IMDSEndpoint = closed
	r, _ = checkIMDS(context.Background(), e)
	want(t, r, Fail, "nothing answers at "+closed)

	silent, _ := net.Listen("tcp", "127.0.0.1:0")
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	e.IMDSEndpoint = "http://" + silent.Addr().String()
	e.ProcRoot = tree(t, map[string]string{"/self/ns/net": "->net:[4026532001]", "/1/ns/net": "->net:[4026531992]"})
	r, _ = checkIMDS(context.Background(), e)
	want(t, r, Fail, "hop limit of 1")
	want(t, r, Fail, "other than PID 1's")

	e.Source = "static"
	r, _ = checkIMDS(context.Background(), e)
	want(t, r, Skip, "static")
}

// Each EC2 action probed: allowed (DryRunOperation, or not-found on the
// probe ENI), denied (UnauthorizedOperation), unknown.
func TestPermissions(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	f, err := ec2fake.New(ec2fake.Config{InstanceType: "m5.large"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e := ec2Env(t.TempDir())
	e.IMDSEndpoint = f.URL()
	e.EC2 = func(region string) (EC2API, error) {
		return eniec2.NewAPI(f.URL(), region, eniec2.NewMetadataClient(f.URL())), nil
	}
	_, info := checkIMDS(context.Background(), e)
	want(t, checkPermissions(context.Background(), e, nil, info), OK, "all 10")
	calls := f.Calls()
	for _, a := range []string{"DescribeInstanceTypes", "CreateNetworkInterface", "AttachNetworkInterface", "DeleteNetworkInterface",
		"CreateTags", "AssignPrivateIpAddresses", "UnassignPrivateIpAddresses", "ModifyNetworkInterfaceAttribute"} {
		if calls[a] != 1 {
			t.Errorf("%s probed %d times", a, calls[a])
		}
	}
	// Nothing was created, attached or assigned.
	if n := len(f.Info().Subnets); n != 1 {
		t.Fatal(n)
	}
	f.InjectFault("CreateTags", ec2fake.Fault{Code: "UnauthorizedOperation"})
	f.InjectFault("AssignPrivateIpAddresses", ec2fake.Fault{Code: "UnauthorizedOperation"})
	r := checkPermissions(context.Background(), e, src, info)
	want(t, r, Fail, "ec2:AssignPrivateIpAddresses, ec2:CreateTags")
	f.ClearFaults()
	f.InjectFault("DescribeSubnets", ec2fake.Fault{Code: "OptInRequired"})
	want(t, checkPermissions(context.Background(), e, nil, info), Warn, "ec2:DescribeSubnets (OptInRequired")
	want(t, checkPermissions(context.Background(), e, nil, nil), Skip, "unknown")
}

// Run on a bare tree gives every check a result and fails nothing it
// cannot see.
func TestRunStatic(t *testing.T) {
	st := allocfake.NewStore()
	rs, _ := alloc.ParseRanges([]string{"10.99.0.0/29"})
	e := &Env{Root: tree(t, nil), ProcRoot: procTree(t, map[string]string{"net.ipv4.ip_forward": "1"}), Now: time.Now(),
		Network: "pods", Source: "static", StateDir: t.TempDir(), VethPrefix: "eni", Store: st, Pool: rs, Host: &fakeHost{}}
	results := Run(context.Background(), e)
	names := map[string]Status{}
	for _, r := range results {
		names[r.Name] = r.Status
	}
	for _, n := range []string{"store", "imds", "ec2-permissions", "systemd-networkd", "amazon-ec2-net-utils", "NetworkManager",
		"nm-cloud-setup", "udev-mac-policy", "ip_forward", "rp_filter", "iptables-forward", "nodeport", "snat", "cri", "wiring", "foreign-veths", "timer-gc", "kubelet-maxpods"} {
		if _, ok := names[n]; !ok {
			t.Errorf("no %s check in %v", n, names)
		}
	}
	// The only failure on a bare tree: no timer.
	var failed []string
	for _, r := range results {
		if r.Status == Fail {
			failed = append(failed, r.Name)
		}
	}
	if !slices.Equal(failed, []string{"timer-gc"}) || !Failed(results) {
		t.Errorf("failed: %v", failed)
	}
	var b strings.Builder
	Print(&b, results)
	if !strings.Contains(b.String(), "FAIL  timer-gc") || !strings.Contains(b.String(), "1 failed") {
		t.Errorf("print:\n%s", b.String())
	}
}

func criClient(endpoint string) (CRI, error) {
	path, err := cri.SocketPath(endpoint)
	if err != nil {
		return nil, err
	}
	return cri.NewClient(cri.Endpoint{Path: path}, 2*time.Second)
}
