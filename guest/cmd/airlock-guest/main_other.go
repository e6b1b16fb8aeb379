//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "airlock-guest runs only inside the Linux guest")
	os.Exit(2)
}
