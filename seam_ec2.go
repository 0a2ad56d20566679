//go:build ec2build

package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/eni-cni/eni-cni/delegate"
	"github.com/eni-cni/eni-cni/ec2"
	"github.com/eni-cni/eni-cni/ec2/provider"
)

// The ec2 build is the full build without the commands that need the CRI
// client or D-Bus (gc, repair, doctor, install, uninstall): what the EC2 pool
// runs on every timer tick and a dry pool's ADD (delegate.For: EC2), starting
// milliseconds sooner than the full build, which initialises grpc and cri-api.

// errNotInEC2Build: a command the lean build sends to the full build.
var errNotInEC2Build = errors.New("not in the ec2 build")

// full reads IMDS in process and runs warm as this binary.
func full() provider.Full { return ec2.InProcess{} }

// runFull runs a command delegate.For sends to the ec2 build, in this process.
func runFull(cmd string, _ delegate.Use, args []string, stdout, stderr io.Writer) error {
	// The warm timer's published copy runs warm once it proved itself.
	if run, err := delegate.AsWarmTimer(cmd, stderr); !run {
		return err
	}
	switch cmd {
	case "warm":
		return cmdWarm(args, stdout, stderr)
	case "internal":
		return cmdInternal(args, os.Stdin, stdout)
	case "max-pods":
		return cmdMaxPods(args, stdout, stderr)
	}
	return fmt.Errorf("%w: %q: %w", errUsage, cmd, errNotInEC2Build)
}
