//go:build !ec2build

package main

const ec2Build = false
