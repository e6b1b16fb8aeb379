// Command airlock-desktop is the Airlock desktop app (Wails): the window,
// the tray and the host core in one process. The app itself is
// app/desktop; this file only embeds the built web UI and hands over.
//
// Build it with `make desktop` (tags desktop,production; webkit2_41 on
// Linux). Flags: --no-boot leaves the VM stopped until it is needed.
package main

import (
	"embed"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"

	"github.com/airlock-sandbox/airlock/app/desktop"
)

//go:embed all:frontend/dist
var assets embed.FS

func main() {
	noBoot := flag.Bool("no-boot", false, "do not boot the VM until the first task or a start")
	verbose := flag.Bool("verbose", false, "log to stderr")
	flag.Parse()
	ui, err := fs.Sub(assets, "frontend/dist")
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock:", err)
		os.Exit(1)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	err = desktop.Run(desktop.Config{UI: ui, NoBoot: *noBoot, GOOS: runtime.GOOS, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock:", err)
		os.Exit(1)
	}
}
