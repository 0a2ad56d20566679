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
// carries the full build (the same source without -tags lean) inside it
// and runs that (package delegate) for what needs those libraries.
// `make build` produces embedded/eni-cni-full before this build.
//
//go:embed embedded/eni-cni-full
var fullBinary []byte

// fullDigest is the sha256 of fullBinary, computed by `make build`. The
// cached copy on disk must have it (hashed once per file and boot); the
// embedded bytes themselves are part of this binary, which root installed.
//
//go:embed embedded/eni-cni-full.sha256
var fullDigest string

func embedded() delegate.Full {
	return delegate.Full{Build: fullexec.Build{Data: fullBinary, Digest: strings.TrimSpace(fullDigest)}}
}

// full serves the EC2 provider's IMDS reads and warm command through the
// embedded full build.
func full() provider.Full { return embedded() }

// runFull replaces this process with the full build running the same
// subcommand, so exit code, stdout and stderr are the full build's own.
func runFull(cmd string, use delegate.Use, args []string, _, _ io.Writer) error {
	return embedded().Exec(cmd, args, use)
}
