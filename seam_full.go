//go:build !lean && !ec2build

package main

import (
	"fmt"
	"io"
	"os"

	"github.com/eni-cni/eni-cni/delegate"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/provider"
)

// The full build links the CRI client (grpc), the AWS SDK and D-Bus, and
// runs everything in process. The shipped binary is built with -tags lean
// and execs an embedded copy of this build for the commands delegate.For names
// (seam_lean.go), so that CNI verbs, which run once per pod, do not pay for
// initialising those libraries on every exec.

// full reads IMDS in process and runs warm as this binary.
func full() provider.Full { return ec2.InProcess{} }

// runFull runs a command delegate.For names in this process.
func runFull(cmd string, _ delegate.Use, args []string, stdout, stderr io.Writer) error {
	switch cmd {
	case "gc":
		return cmdGC(args, stdout, stderr)
	case "warm":
		return cmdWarm(args, stdout, stderr)
	case "repair":
		return cmdRepair(args, stdout, stderr)
	case "internal":
		return cmdInternal(args, os.Stdin, stdout)
	case "max-pods":
		return cmdMaxPods(args, stdout, stderr)
	case "doctor":
		return cmdDoctor(args, stdout, stderr)
	case "install":
		return cmdInstall(args, stdout, stderr)
	case "uninstall":
		return cmdUninstall(args, stdout, stderr)
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
}
