//go:build ec2build

package main

// ec2Build: the ec2 build runs only the commands delegate.For sends there; a test
// calling gc (or repair, doctor, install, uninstall) in process would get
// a usage error from it.
const ec2Build = true
