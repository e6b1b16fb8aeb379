package main

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/guest/boot"
)

func main() {
	if os.Getpid() != 1 && (len(os.Args) < 2 || os.Args[1] != "init") {
		fmt.Fprintln(os.Stderr, "usage: airlock-guest init (as PID 1 it runs init, with the agent in it)")
		os.Exit(2)
	}
	boot.Run()
}
