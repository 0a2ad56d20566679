// Command eni-cni is a daemonless CNI plugin for Kubernetes nodes on AWS EC2.
//
// With CNI_COMMAND set it serves the CNI verbs; without it, it runs one of its
// subcommands (version, list, status, gc, warm). See README.md.
package main
