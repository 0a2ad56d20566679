package main

import (
	"fmt"
	"io"
)

func cmdVersion(stdout io.Writer) error {
	fmt.Fprintf(stdout, "eni-cni %s\n", version)
	return nil
}
