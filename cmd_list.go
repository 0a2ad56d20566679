package main

import "io"

func cmdList(args []string, stdout, stderr io.Writer) error {
	f := newFlags("list", stderr)
	asJSON := f.FS.Bool("json", false, "print JSON")
	if err := f.Parse(args); err != nil {
		return err
	}
	p, _, err := f.load()
	if err != nil {
		return err
	}
	return p.List(stdout, *asJSON)
}
