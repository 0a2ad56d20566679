// Command eni-cni is a daemonless CNI plugin for Kubernetes nodes on AWS EC2.
//
// With CNI_COMMAND set it serves the CNI verbs; without it, it runs one of its
// subcommands (version, list, status, gc, warm). See README.md.
package main

import "os"

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if os.Getenv("CNI_COMMAND") != "" {
		os.Exit(cniMain())
	}
	os.Exit(runCommand(os.Args[1:], os.Stdout, os.Stderr))
}
