package main

import (
	"fmt"
	"io"

	"github.com/eni-cni/eni-cni/cmdline"
	"github.com/eni-cni/eni-cni/plugin"
)

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	f := newFlags("status", stderr)
	asJSON := f.FS.Bool("json", false, "print JSON (also when not ready; the exit code still says)")
	if err := f.Parse(args); err != nil {
		return err
	}
	p, path, err := f.load()
	r, err := plugin.StatusOf(p, path, err)
	if *asJSON {
		if jerr := cmdline.PrintJSON(stdout, r); jerr != nil {
			return jerr
		}
		if err != nil {
			return errReported{err}
		}
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ready: network %q (%s), pool %s: %d addresses, %d free, %d allocated; state in %s\n",
		r.Network, r.Config, r.Source, r.Pool.Total, r.Pool.Free, r.Pool.Allocated, r.StateDir)
	// Ready with addresses left, though warm could not add more: said
	// before the pods that need them fail.
	if note := r.WarmNote(); note != "" {
		fmt.Fprintln(stdout, note)
	}
	return nil
}
