//go:build !lean && !ec2build

package main

import (
	"io"

	"github.com/eni-cni/eni-cni/install/cli"
)

func cmdUninstall(args []string, stdout, stderr io.Writer) error {
	return cli.Uninstall(args, stdout, stderr)
}
