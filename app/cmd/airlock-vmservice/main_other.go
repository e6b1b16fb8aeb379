//go:build !windows

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "airlock-vmservice runs only on Windows")
	os.Exit(2)
}
