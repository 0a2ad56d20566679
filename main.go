// Command eni-cni is a daemonless CNI plugin for Kubernetes nodes on AWS EC2.
//
// With CNI_COMMAND set it serves the CNI verbs (package plugin); without
// it, it runs one of its subcommands (commands.go, cmd_*.go). This package
// is only the process boundary: everything it runs lives in a package.
// See docs/ARCHITECTURE.md.
package main

import (
	"os"

	"github.com/eni-cni/eni-cni/plugin"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if os.Getenv("CNI_COMMAND") != "" {
		os.Exit(cniMain())
	}
	os.Exit(runCommand(os.Args[1:], os.Stdout, os.Stderr))
}

// cniMain serves one CNI verb and returns the exit code.
func cniMain() int {
	return plugin.CNI{Full: full()}.Main("eni-cni " + version)
}
