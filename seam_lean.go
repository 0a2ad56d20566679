//go:build lean

package main

import (
	_ "embed"
	"io"
	"strings"

	"github.com/eni-cni/eni-cni/delegate"
	"github.com/eni-cni/eni-cni/ec2/provider"
	"github.com/eni-cni/eni-cni/fullexec"
)

// The shipped binary is this lean build: the CNI verbs and the light
// subcommands, without the CRI client (grpc) and the AWS SDK, whose package
// initialisation alone would add milliseconds to every pod's ADD. It
// carries two builds of the same source inside it and runs them (package
// delegate) for what needs those libraries: the ec2 build (-tags ec2build:
// the AWS SDK only) for the EC2 pool's commands, which the timer runs every
// minute and a dry-pool ADD waits for, and the full build (no tags) for the
// rest. `make build` produces both in embedded/ before this build.
//
//go:embed embedded/eni-cni-full
var fullBinary []byte

// fullDigest is the sha256 of fullBinary, computed by `make build`. The
// cached copy on disk must have it (hashed once per file and boot); the
// embedded bytes themselves are part of this binary, which root installed.
//
//go:embed embedded/eni-cni-full.sha256
var fullDigest string

//go:embed embedded/eni-cni-ec2
var ec2Binary []byte

//go:embed embedded/eni-cni-ec2.sha256
var ec2Digest string

// embedded is the build that runs cmd.
func embedded(cmd string) delegate.Full {
	ec2B := fullexec.Build{Name: "ec2", Data: ec2Binary, Digest: strings.TrimSpace(ec2Digest)}
	fullB := fullexec.Build{Name: "full", Data: fullBinary, Digest: strings.TrimSpace(fullDigest)}
	ec2B.Siblings, fullB.Siblings = []fullexec.Build{fullB}, []fullexec.Build{ec2B}
	if to, _ := delegate.For(cmd); to.EC2 {
		return delegate.Full{Build: ec2B, Warm: &ec2B}
	}
	return delegate.Full{Build: fullB, Warm: &ec2B}
}

// full serves the EC2 provider's IMDS reads and warm command through the
// embedded ec2 build.
func full() provider.Full { return embedded("internal") }

// runFull replaces this process with the embedded build running the same
// subcommand, so exit code, stdout and stderr are that build's own.
func runFull(cmd string, use delegate.Use, args []string, _, _ io.Writer) error {
	return embedded(cmd).Exec(cmd, args, use)
}
