//go:build !lean

package main

// leanBuild: see leanbuild_lean_test.go.
const leanBuild = false
