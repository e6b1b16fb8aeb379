package main

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/guest/agent"
	"github.com/airlock-sandbox/airlock/guest/boot"
)

func main() {
	// First: a task's init is PID 1 of its own namespace.
	if len(os.Args) > 1 && os.Args[1] == agent.TaskInitArg {
		agent.RunTaskInit()
	}
	if os.Getpid() != 1 && (len(os.Args) < 2 || os.Args[1] != "init") {
		fmt.Fprintln(os.Stderr, "usage: airlock-guest init (as PID 1 it runs init, with the agent in it)")
		os.Exit(2)
	}
	boot.Run()
}
