//go:build !lean && !ec2build

package main

import (
	"embed"
	"io"
	"io/fs"

	"github.com/eni-cni/eni-cni/install/cli"
)

// The timers' units and the cron file ship inside the binary, so the
// binary alone (a DaemonSet image without a shell, a node without the
// source tree) can install them.
//
//go:embed scripts/systemd/*.service scripts/systemd/*.timer scripts/systemd/eni-cni.cron
var shippedUnits embed.FS

func unitsFS() fs.FS {
	sub, err := fs.Sub(shippedUnits, "scripts/systemd")
	if err != nil {
		panic(err) // a constant path into an embedded tree
	}
	return sub
}

func cmdInstall(args []string, stdout, stderr io.Writer) error {
	return cli.Install(args, unitsFS(), stdout, stderr)
}
