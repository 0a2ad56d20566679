//go:build !lean

package main

const leanBuild = false
