package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-sandbox/airlock/guest/agent"
	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/boot"
	"github.com/airlock-sandbox/airlock/guest/console"
)

func main() {
	mode := ""
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch {
	case mode == "agent":
		os.Exit(runAgent())
	case mode == "init" || os.Getpid() == 1:
		boot.Run()
	default:
		fmt.Fprintln(os.Stderr, "usage: airlock-guest init|agent (as PID 1 it runs init)")
		os.Exit(2)
	}
}

func runAgent() int {
	// Started through /proc/self/exe (init may have switched to a root
	// disk), the agent would be "exe" in ps and top; name it.
	_ = os.WriteFile("/proc/self/comm", []byte("airlock-agent"), 0)
	debug := false
	if b, err := os.ReadFile("/proc/cmdline"); err == nil {
		if cfg, err := api.ParseCmdline(string(b)); err == nil {
			debug = cfg.Debug
		}
	}
	log := console.NewLogger(os.Stderr, "agent", debug)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := agent.Run(ctx, log); err != nil {
		log.Error("agent stopped", "err", err)
		return 1
	}
	return 0
}
