package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
)

// ReadOnly opens p's store for a dry run: nothing is created or saved
// (alloc.Manager.ReadOnly, DiskStore.SetReadOnly).
func (p *Plugin) ReadOnly() {
	p.Mgr.ReadOnly = true
	if d, ok := p.Mgr.Store.(interface{ SetReadOnly() }); ok {
		d.SetReadOnly()
	}
}

// listing is the JSON form of `eni-cni list`.
type listing struct {
	Network     string             `json:"network"`
	StateFile   string             `json:"stateFile"`
	Pool        alloc.Counts       `json:"pool"`
	Allocations []alloc.Allocation `json:"allocations"`
	// Lost are allocated addresses EC2 no longer assigns to this instance
	// (unassigned, or their ENI detached, behind eni-cni's back). Their
	// pods have no working address; they are never handed out again.
	Lost []lostAddr `json:"lost,omitempty"`
}

// lostAddr is a lost address and the attachment holding it.
type lostAddr struct {
	IP  netip.Addr `json:"ip"`
	ENI string     `json:"eni"`
	Key alloc.Key  `json:"attachment"`
	Pod string     `json:"pod,omitempty"`
}

func lostOf(st *alloc.State) []lostAddr {
	var out []lostAddr
	for _, l := range st.EC2.Lost() {
		la := lostAddr{IP: l.IP, ENI: l.ENI}
		if i := slices.IndexFunc(st.Allocations, func(a alloc.Allocation) bool { return a.IP == l.IP }); i >= 0 {
			a := st.Allocations[i]
			la.Key, la.Pod = a.Key, a.PodNamespace+"/"+a.PodName
		}
		out = append(out, la)
	}
	return out
}

// List prints the network's allocations, its pool and the addresses EC2
// took away (`eni-cni list`), as a table or as JSON.
func (p *Plugin) List(w io.Writer, asJSON bool) error {
	// Without the lock: a read-only command must not create state.lock (or
	// the state directory) on a node that never ran the plugin.
	st, counts, err := p.Mgr.Peek()
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	allocs := append([]alloc.Allocation{}, st.Allocations...)
	sort.Slice(allocs, func(i, j int) bool { return allocs[i].IP.Less(allocs[j].IP) })
	l := listing{Network: p.Cfg.Network, StateFile: p.Cfg.StateDir + "/" + alloc.StateFileName, Pool: counts, Allocations: allocs, Lost: lostOf(st)}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(l)
	}
	printListing(w, l, p.Mgr.Age)
	return nil
}

// shown is a recorded string for the terminal: "-" when empty, quoted
// with escapes when it is not printable (a state file written before ADD
// refused control characters, or edited by hand, must not drive the
// operator's terminal).
func shown(s string) string {
	if s == "" {
		return "-"
	}
	if !printable(s) || strings.ContainsAny(s, "\t ") {
		return strconv.QuoteToASCII(s)
	}
	return s
}

// printListing prints the allocations as an aligned table, by address,
// and the pool summary. AGE is on the boot clock (alloc.Manager.Age), so a
// stepped wall clock does not make pods look older or younger.
func printListing(w io.Writer, l listing, age func(alloc.Allocation) time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tNAMESPACE\tIP\tENI\tAGE\tCONTAINER\tIFNAME\tHOST VETH")
	for _, a := range l.Allocations {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shown(a.PodName), shown(a.PodNamespace),
			addrList(a), shown(a.ENI), humanAge(age(a)), shown(shortContainerID(a.ContainerID)), shown(a.IfName), shown(a.HostVeth))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nnetwork %q: %d allocations; pool: total %d, free %d, cooling %d, allocated %d (state %s)\n",
		l.Network, len(l.Allocations), l.Pool.Total, l.Pool.Free, l.Pool.Cooling, l.Pool.Allocated, l.StateFile)
	for _, f := range []alloc.Family{alloc.IPv4, alloc.IPv6} {
		if c, ok := l.Pool.Families.Of(f); ok {
			fmt.Fprintf(w, "  %s: total %d, free %d, cooling %d, allocated %d\n", f, c.Total, c.Free, c.Cooling, c.Allocated)
		}
	}
	for _, x := range l.Lost {
		fmt.Fprintf(w, "LOST: %s of %s (pod %s) is no longer assigned to this instance by EC2; the pod has no working address, recreate it\n",
			x.IP, x.Key, shown(x.Pod))
	}
	if l.Pool.Outside > 0 {
		fmt.Fprintf(w, "%d allocations hold addresses outside the pool (ranges changed?); they stay until their pods' DEL\n", l.Pool.Outside)
	}
}

// humanAge is a duration as kubectl shows ages: two units at most.
func humanAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

func shortContainerID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// StatusReport is the JSON form of `eni-cni status --json`.
type StatusReport struct {
	Ready    bool          `json:"ready"`
	Network  string        `json:"network,omitempty"`
	Config   string        `json:"config,omitempty"`
	Source   string        `json:"source,omitempty"`
	StateDir string        `json:"stateDir,omitempty"`
	Pool     *alloc.Counts `json:"pool,omitempty"`
	Error    string        `json:"error,omitempty"`
}

// StatusOf is `eni-cni status`: whether the plugin built from the
// configuration at path (loadErr: it could not be) is ready for pods. It
// only reads: it starts no warm pass, as the STATUS verb may.
func StatusOf(p *Plugin, path string, loadErr error) (StatusReport, error) {
	r := StatusReport{Config: path}
	if loadErr != nil {
		err := fmt.Errorf("%w: %w", errNotReady, loadErr)
		r.Error = err.Error()
		return r, err
	}
	r.Network, r.Source, r.StateDir = p.Cfg.Network, p.Cfg.Provider, p.Cfg.StateDir
	c, err := p.status(context.Background(), false)
	if err != nil {
		r.Error = err.Error()
		return r, err
	}
	r.Ready, r.Pool = true, &c
	return r, nil
}
