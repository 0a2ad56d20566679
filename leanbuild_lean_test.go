//go:build lean

package main

// leanBuild: this test binary is the lean build, whose gc and warm replace
// the process with the embedded full build (lean.go), so tests that run
// those subcommands in-process cannot run in it.
const leanBuild = true
