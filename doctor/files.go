package doctor

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/eni-cni/eni-cni/ec2/section"
)

// unitFile is a parsed systemd-style INI file (.network, .link, .conf):
// section -> key -> values in order (keys may repeat).
type unitFile map[string]map[string][]string

func parseUnit(data []byte) unitFile {
	u := unitFile{}
	section := ""
	s := bufio.NewScanner(bytes.NewReader(data))
	for s.Scan() {
		l := strings.TrimSpace(s.Text())
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case l[0] == '[' && strings.HasSuffix(l, "]"):
			section = l[1 : len(l)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, found := strings.Cut(l, "=")
			if found && section != "" {
				u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
			}
		}
	}
	return u
}

func (u unitFile) last(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// networkDirs are systemd-networkd's and udev's .network/.link search
// path, highest priority first: a file in /etc hides one of the same name
// further down.
var networkDirs = []string{"/etc/systemd/network", "/run/systemd/network", "/usr/local/lib/systemd/network", "/usr/lib/systemd/network", "/lib/systemd/network"}

type confFile struct {
	path string
	unit unitFile
}

// configFiles returns the files with ext in dirs, by file name (the order
// systemd applies them), a file in an earlier dir hiding later ones of
// the same name, and /dev/null symlinks (masks) hiding them with nothing.
func (e *Env) configFiles(dirs []string, ext string) []confFile {
	seen := map[string]bool{}
	var names []string
	where := map[string]string{}
	for _, d := range dirs {
		entries, err := os.ReadDir(e.path(d))
		if err != nil {
			continue
		}
		for _, ent := range entries {
			n := ent.Name()
			if !strings.HasSuffix(n, ext) || seen[n] {
				continue
			}
			seen[n] = true
			names = append(names, n)
			where[n] = path.Join(d, n)
		}
	}
	sort.Strings(names)
	var out []confFile
	for _, n := range names {
		p := where[n]
		if t, err := os.Readlink(e.path(p)); err == nil && t == "/dev/null" {
			continue
		}
		data, err := e.readFile(p)
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		out = append(out, confFile{path: p, unit: parseUnit(data)})
	}
	return out
}

// iface is what [Match] sections are matched against.
type iface struct {
	name, mac, kind, driver string
}

// matches applies a [Match] section the way networkd and udev do: every
// key given must match (each a list of globs, "!" negating the list); a
// section without keys matches everything.
func matches(m map[string][]string, i iface) bool {
	for key, vals := range m {
		var subject string
		switch key {
		case "Name", "OriginalName":
			subject = i.name
		case "MACAddress", "PermanentMACAddress":
			subject = i.mac
		case "Kind", "Type":
			subject = i.kind
		case "Driver":
			subject = i.driver
		default:
			continue // Host=, Virtualization=, …: not about the device
		}
		for _, v := range vals {
			if v == "" {
				continue
			}
			if !matchList(v, subject, key == "MACAddress" || key == "PermanentMACAddress") {
				return false
			}
		}
	}
	return true
}

func matchList(list, subject string, mac bool) bool {
	neg := strings.HasPrefix(list, "!")
	list = strings.TrimPrefix(list, "!")
	hit := false
	for _, pat := range strings.Fields(list) {
		if mac {
			if normMAC(pat) == normMAC(subject) {
				hit = true
			}
			continue
		}
		if ok, _ := path.Match(pat, subject); ok {
			hit = true
		}
	}
	return hit != neg
}

// firstMatch returns the file that configures i: the first in order whose
// [Match] matches.
func firstMatch(files []confFile, i iface) *confFile {
	for k := range files {
		if matches(files[k].unit["Match"], i) {
			return &files[k]
		}
	}
	return nil
}

// eniIfaces are the secondary ENIs as the kernel names them, or typical
// names of hot-plugged ENIs when none is known yet.
func (e *Env) eniIfaces(src *section.EC2) []iface {
	byMAC, _ := e.linkNames(src)
	var out []iface
	for _, eni := range secondaryENIs(src) {
		name := byMAC[normMAC(eni.MAC)]
		if name == "" {
			name = "eth" + strconv.Itoa(eni.DeviceNumber)
		}
		out = append(out, iface{name: name, mac: normMAC(eni.MAC), kind: "ether", driver: "ena"})
	}
	if len(out) == 0 {
		// No secondary ENI yet: the names the next ones will get on
		// Amazon Linux (eth1) and on Debian/Ubuntu (ens6).
		out = []iface{{name: "eth1", mac: "02:00:00:00:00:01", kind: "ether", driver: "ena"}, {name: "ens6", mac: "02:00:00:00:00:01", kind: "ether", driver: "ena"}}
	}
	return out
}

// unitEnabled reports whether a systemd unit is enabled: a symlink to it in
// a *.wants directory of /etc/systemd/system.
func (e *Env) unitEnabled(unit string) bool {
	m, _ := filepath.Glob(e.path("/etc/systemd/system/*.wants/" + unit))
	return len(m) > 0
}

// unitInstalled reports whether a unit file exists.
func (e *Env) unitInstalled(unit string) bool {
	for _, d := range []string{"/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"} {
		if e.exists(d + "/" + unit) {
			return true
		}
	}
	return false
}

// unitRuns reports whether a unit runs (systemd asked) or, without a
// running systemd, would run at boot (enabled).
func (e *Env) unitRuns(unit string) bool {
	if e.UnitActive != nil {
		return e.UnitActive(unit)
	}
	return e.unitEnabled(unit)
}

const unmanagedNetworkFile = "/etc/systemd/network/10-eni-cni-unmanaged.network"

// checkNetworkd: systemd-networkd configuring our ENIs (DHCP, routes of
// its own) or removing our rules and routes as foreign.
func checkNetworkd(e *Env, src *section.EC2) []Result {
	const name = "systemd-networkd"
	if !e.unitInstalled("systemd-networkd.service") || !(e.unitRuns("systemd-networkd.service") || e.unitEnabled("dbus-org.freedesktop.network1.service")) {
		return []Result{skip(name, "not running")}
	}
	var out []Result
	files := e.configFiles(networkDirs, ".network")
	var managed []string
	var macs []string
	for _, i := range e.eniIfaces(src) {
		macs = append(macs, i.mac)
		if f := firstMatch(files, i); f != nil && !strings.EqualFold(f.unit.last("Link", "Unmanaged"), "yes") {
			managed = append(managed, fmt.Sprintf("%s by %s", i.name, f.path))
		}
	}
	fix := fmt.Sprintf("create %s with:\n[Match]\nMACAddress=%s\n[Link]\nUnmanaged=yes\n(list the MACs of eni-cni's ENIs, or match Name= on their names), then `networkctl reload`",
		unmanagedNetworkFile, strings.Join(macs, " "))
	if len(managed) > 0 {
		out = append(out, fail(name, fix, "manages secondary ENIs: %s", strings.Join(managed, "; ")))
	} else {
		out = append(out, ok(name, "manages none of the secondary ENIs"))
	}
	// Since systemd 246 networkd removes routing rules and routes it did not
	// make whenever it reconfigures a link: ours included.
	conf := parseUnit(e.mergedConf("/etc/systemd/networkd.conf", "/etc/systemd/networkd.conf.d", "/usr/lib/systemd/networkd.conf.d"))
	if !strings.EqualFold(conf.last("Network", "ManageForeignRoutingPolicyRules"), "no") || !strings.EqualFold(conf.last("Network", "ManageForeignRoutes"), "no") {
		out = append(out, fail(name+"-foreign", "create /etc/systemd/networkd.conf.d/eni-cni.conf with:\n[Network]\nManageForeignRoutingPolicyRules=no\nManageForeignRoutes=no\nthen `systemctl restart systemd-networkd`",
			"networkd removes routing rules and routes it did not create (ManageForeignRoutingPolicyRules, ManageForeignRoutes): pods lose their rules when it reconfigures a link"))
	} else {
		out = append(out, ok(name+"-foreign", "keeps foreign routing rules and routes"))
	}
	return out
}

// mergedConf concatenates a main config file and its drop-ins in the
// order systemd reads them (later wins).
func (e *Env) mergedConf(main string, dropinDirs ...string) []byte {
	var buf bytes.Buffer
	for _, d := range dropinDirs {
		m, _ := filepath.Glob(e.path(d + "/*.conf"))
		sort.Strings(m)
		for _, p := range m {
			if data, err := os.ReadFile(p); err == nil {
				buf.Write(data)
				buf.WriteByte('\n')
			}
		}
	}
	data, _ := e.readFile(main)
	return append(data, append([]byte{'\n'}, buf.Bytes()...)...)
}

// ec2NetUtilsRules are amazon-ec2-net-utils' udev rules (v2, then v1): on
// every hot-plugged ENI they set up policy routing of their own.
var ec2NetUtilsRules = []string{"99-vpc-policy-routes.rules", "53-ec2-network-interfaces.rules"}

func checkEC2NetUtils(e *Env) Result {
	const name = "amazon-ec2-net-utils"
	for _, rule := range ec2NetUtilsRules {
		etc := "/etc/udev/rules.d/" + rule
		if t, err := os.Readlink(e.path(etc)); err == nil && t == "/dev/null" {
			continue // masked
		}
		for _, dir := range []string{"/etc/udev/rules.d", "/usr/lib/udev/rules.d", "/lib/udev/rules.d"} {
			if e.exists(dir + "/" + rule) {
				return fail(name, fmt.Sprintf("mask its udev rule: `ln -s /dev/null %s && udevadm control --reload` "+
					"(or uninstall amazon-ec2-net-utils); eni-cni sets up the ENIs it attaches itself", etc),
					"%s/%s sets up policy routing on every hot-plugged ENI, fighting eni-cni's tables and rules", dir, rule)
			}
		}
	}
	return ok(name, "no active udev rule")
}

// nmDeviceRule matches a device the way NetworkManager's device specs do
// (interface-name:, mac:, except:), enough for unmanaged-devices.
func nmSpecMatches(spec string, i iface) bool {
	var include, exclude bool
	for _, item := range strings.FieldsFunc(spec, func(r rune) bool { return r == ';' || r == ',' }) {
		item = strings.TrimSpace(item)
		ex := strings.HasPrefix(item, "except:")
		item = strings.TrimPrefix(item, "except:")
		var hit bool
		switch {
		case strings.HasPrefix(item, "interface-name:"):
			pat := strings.TrimPrefix(strings.TrimPrefix(item, "interface-name:"), "=")
			hit, _ = path.Match(strings.TrimPrefix(pat, "~"), i.name)
		case strings.HasPrefix(item, "mac:"):
			hit = normMAC(strings.TrimPrefix(item, "mac:")) == i.mac
		case strings.HasPrefix(item, "driver:"):
			hit, _ = path.Match(strings.TrimPrefix(item, "driver:"), i.driver)
		case item == "*":
			hit = true
		}
		if ex && hit {
			exclude = true
		} else if !ex && hit {
			include = true
		}
	}
	return include && !exclude
}

func checkNetworkManager(e *Env, src *section.EC2) []Result {
	var out []Result
	const name = "NetworkManager"
	if !e.unitInstalled("NetworkManager.service") || !e.unitRuns("NetworkManager.service") {
		out = append(out, skip(name, "not running"))
	} else {
		conf := parseUnit(e.mergedConf("/etc/NetworkManager/NetworkManager.conf", "/usr/lib/NetworkManager/conf.d", "/etc/NetworkManager/conf.d"))
		var managed []string
		for _, i := range e.eniIfaces(src) {
			unmanaged := nmSpecMatches(strings.Join(conf["keyfile"]["unmanaged-devices"], ";"), i)
			for section, kv := range conf {
				if strings.HasPrefix(section, "device") && nmSpecMatches(strings.Join(kv["match-device"], ";"), i) && strings.TrimSpace(strings.Join(kv["managed"], "")) == "0" {
					unmanaged = true
				}
			}
			if !unmanaged {
				managed = append(managed, i.name)
			}
		}
		_, primary := e.linkNames(src)
		if primary == "" {
			primary = "eth0"
		}
		if len(managed) > 0 {
			out = append(out, fail(name, fmt.Sprintf("create /etc/NetworkManager/conf.d/eni-cni.conf with:\n[keyfile]\nunmanaged-devices=interface-name:eth*;interface-name:ens*;except:interface-name:%s\nthen `nmcli general reload`", primary),
				"would manage secondary ENIs (DHCP, routes of its own): %s", strings.Join(managed, ", ")))
		} else {
			out = append(out, ok(name, "leaves the secondary ENIs unmanaged"))
		}
	}
	const cloud = "nm-cloud-setup"
	if e.unitInstalled("nm-cloud-setup.service") && (e.unitRuns("nm-cloud-setup.service") || e.unitRuns("nm-cloud-setup.timer")) {
		out = append(out, fail(cloud, "systemctl disable --now nm-cloud-setup.service nm-cloud-setup.timer",
			"nm-cloud-setup adds the ENIs' secondary addresses to the node and routes of its own for them: pod addresses would be answered by the node"))
	} else {
		out = append(out, ok(cloud, "not enabled"))
	}
	return out
}

// checkMACPolicy: udev's 99-default.link gives new links a "persistent"
// MAC (MACAddressPolicy=persistent). On host veths that rewrites the MAC
// after ADD pinned it in the pod's neighbour entry for 169.254.1.1: the
// pod's traffic then goes nowhere.
func checkMACPolicy(e *Env) Result {
	const name = "udev-mac-policy"
	udevd := false
	for _, p := range []string{"/usr/lib/systemd/systemd-udevd", "/lib/systemd/systemd-udevd", "/sbin/udevd", "/usr/sbin/udevd"} {
		udevd = udevd || e.exists(p)
	}
	if !udevd {
		return skip(name, "no systemd-udevd")
	}
	prefix := e.VethPrefix
	if prefix == "" {
		prefix = "eni"
	}
	veth := iface{name: prefix + "0123456789ab", mac: "02:00:00:00:00:02", kind: "veth", driver: "veth"}
	f := firstMatch(e.configFiles(networkDirs, ".link"), veth)
	if f == nil {
		return ok(name, "no .link file applies to host veths")
	}
	switch policy := f.unit.last("Link", "MACAddressPolicy"); policy {
	case "persistent", "random":
		return fail(name, fmt.Sprintf("create /etc/systemd/network/10-eni-cni-veth.link with:\n[Match]\nOriginalName=%s*\n[Link]\nMACAddressPolicy=none\nthen `udevadm control --reload`", prefix),
			"%s sets MACAddressPolicy=%s for host veths: udev changes their MAC after ADD pinned it in the pod", f.path, policy)
	default:
		return ok(name, "%s applies to host veths (MACAddressPolicy=%s)", f.path, defaultStr(policy, "unset"))
	}
}

func defaultStr(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// maxPodsRe finds maxPods in a KubeletConfiguration, YAML (a top-level
// key) or JSON.
var maxPodsRe = regexp.MustCompile(`(?m)(?:^maxPods|"maxPods")\s*:\s*"?([0-9]+)`)
