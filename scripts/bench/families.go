package main

import (
	"context"
	"fmt"
	"path/filepath"
)

// familyRun is one address-family set of the families phase: an eni-cni
// network and the reference ptp + host-local network with the same
// families, the reference's ranges in host-local's form.
type familyRun struct {
	name, label string
	families    []string
	eniRanges   []string
	refRanges   [][]map[string]string
	refRoutes   []map[string]string
	// extra are further keys of the eni-cni network.
	extra map[string]any
}

var familyRuns = []familyRun{
	{"4", "IPv4", []string{"ipv4"}, []string{"10.97.0.0/24"},
		[][]map[string]string{{{"subnet": "10.96.0.0/24"}}}, []map[string]string{{"dst": "0.0.0.0/0"}}, nil},
	{"6", "IPv6", []string{"ipv6"}, []string{"fd00:97::/120"},
		[][]map[string]string{{{"subnet": "fd00:96::/120"}}}, []map[string]string{{"dst": "::/0"}}, nil},
	{"46", "dual-stack", []string{"ipv4", "ipv6"}, []string{"10.95.0.0/24", "fd00:95::/120"},
		[][]map[string]string{{{"subnet": "10.94.0.0/24"}}, {{"subnet": "fd00:94::/120"}}},
		[]map[string]string{{"dst": "0.0.0.0/0"}, {"dst": "::/0"}}, nil},
	// IPv6 with the IPv4 egress address and its masquerade, forced on: the
	// bench's node has no IPv4 default route, which the default asks for.
	{"6e", "IPv6 + IPv4 egress", []string{"ipv6"}, []string{"fd00:93::/120"},
		[][]map[string]string{{{"subnet": "fd00:92::/120"}}}, []map[string]string{{"dst": "::/0"}}, map[string]any{"ipv4Egress": true}},
}

// familyPlugins are the plugins of run r, on the nodes and pods of the
// main comparison (pods [off, off+n)), each with a network of its own.
func (b *bench) familyPlugins(r familyRun, off, n int) (eni, ref *plugin) {
	eni = &plugin{key: "eni" + r.name, label: "eni-cni " + r.label, bin: b.eni.bin, cniPath: b.eni.cniPath, node: b.eni.node,
		pods: b.eni.pods[off : off+n], stateDir: filepath.Join(b.work, "eni-state-"+r.name)}
	eni.conf = map[string]any{
		"cniVersion": "1.0.0", "name": "bench-eni-" + r.name, "type": "eni-cni",
		"stateDir": eni.stateDir, "mtu": b.cfg.mtu, "cooldownSeconds": b.cfg.cooldown, "ipFamilies": r.families,
		"pool": map[string]any{"source": "static", "ranges": r.eniRanges},
	}
	for k, v := range r.extra {
		eni.conf[k] = v
	}
	ref = &plugin{key: "ref" + r.name, label: "ptp+host-local " + r.label, bin: b.ref.bin, cniPath: b.ref.cniPath, node: b.ref.node,
		pods: b.ref.pods[off : off+n], stateDir: filepath.Join(b.work, "host-local-"+r.name)}
	ref.conf = map[string]any{
		"cniVersion": "1.0.0", "name": "bench-ref-" + r.name, "type": "ptp", "ipMasq": false, "mtu": b.cfg.mtu,
		"ipam": map[string]any{"type": "host-local", "dataDir": ref.stateDir, "ranges": r.refRanges, "routes": r.refRoutes},
	}
	return eni, ref
}

// phaseFamilies times sequential ADDs (then DELs) of familyN pods per
// plugin and family set, every plugin's i-th pod before any plugin's
// (i+1)-th, the order rotating, so that all of them share the machine's noise.
// ptp + host-local waits for IPv6 duplicate address detection to settle
// on every ADD of an IPv6 address (pkg/ipam ConfigureIface), about 1-2 s,
// so the count is smaller than the main comparison's.
func (b *bench) phaseFamilies(ctx context.Context) error {
	n := b.cfg.familyN
	if n == 0 {
		return nil
	}
	var ps []*plugin
	for i, r := range familyRuns {
		eni, ref := b.familyPlugins(r, i*n, n)
		ps = append(ps, eni, ref)
	}
	for _, op := range []string{"ADD", "DEL"} {
		for i := range n {
			if err := ctx.Err(); err != nil {
				return err
			}
			for j := range ps {
				p := ps[(i+j)%len(ps)]
				var r execResult
				var err error
				if op == "ADD" {
					r, err = b.add(p, p.pods[i])
				} else {
					r, err = b.del(p, p.pods[i], p.pods[i].path)
				}
				if err != nil {
					return err
				}
				b.recordExec("family", p.key, op, i, 0, r)
			}
		}
		b.logf("  families %s: %d per plugin and family done", op, n)
	}
	return nil
}

// familyRows are the families phase's rows of the results table.
func (b *bench) familyRows() []row {
	sec := fmt.Sprintf("address families (%d pods each, sequential, interleaved)", b.cfg.familyN)
	var rows []row
	for _, op := range []string{"ADD", "DEL"} {
		for _, r := range familyRuns {
			e, ref := summarize(walls(b.sel("family", "eni"+r.name, op))), summarize(walls(b.sel("family", "ref"+r.name, op)))
			if e.N == 0 {
				continue
			}
			rows = append(rows, distRow(sec, fmt.Sprintf("%s %s: wall min / p50 / p90 / p99 (ms)", r.label, op), e, ref))
		}
	}
	return rows
}
