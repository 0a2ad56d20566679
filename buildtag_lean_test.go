//go:build lean

package main

// leanBuild: the lean build runs gc and warm by exec'ing the full build in
// place of the calling process; a test calling them would be replaced by it.
const leanBuild = true
