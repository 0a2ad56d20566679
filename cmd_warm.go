//go:build !lean

package main

import (
	"bytes"
	"io"
	"strings"
	"time"

	"github.com/eni-cni/eni-cni/alloc"
	"github.com/eni-cni/eni-cni/cmdline"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/metrics"
)

func cmdWarm(args []string, stdout, stderr io.Writer) error {
	f := newFlags("warm", stderr)
	asJSON := f.FS.Bool("json", false, "print the outcome as JSON (the actions, the pool, the error)")
	if err := f.Parse(args); err != nil {
		return err
	}
	p, _, err := f.load()
	if err != nil {
		return err
	}
	out := stdout
	var lines bytes.Buffer
	if *asJSON {
		out = &lines
	}
	start := time.Now()
	calls := ec2.NewCallCounter()
	ran, err := ec2.WarmPass(p.Cfg, p.Mgr, out, calls)
	if ran {
		u := metrics.RunUpdate{Job: "warm", Start: start, Duration: time.Since(start), Err: err, EC2: map[string]metrics.APICalls{}}
		n, e := calls.Counts()
		for api, c := range n {
			u.EC2[api] = metrics.APICalls{Calls: c, Errors: e[api]}
		}
		p.RecordJob(u, stderr)
	}
	if !*asJSON {
		return err
	}
	r := warmReport{OK: err == nil, Actions: nonEmptyLines(lines.String())}
	if err != nil {
		r.Error = err.Error()
	}
	if _, c, perr := p.Mgr.Peek(); perr == nil {
		r.Pool = &c
	}
	if jerr := cmdline.PrintJSON(stdout, r); jerr != nil {
		return jerr
	}
	if err != nil {
		return errReported{err}
	}
	return nil
}

// warmReport is what `eni-cni warm --json` prints.
type warmReport struct {
	OK      bool          `json:"ok"`
	Actions []string      `json:"actions"`
	Pool    *alloc.Counts `json:"pool,omitempty"`
	Error   string        `json:"error,omitempty"`
}

func nonEmptyLines(s string) []string {
	out := []string{}
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
