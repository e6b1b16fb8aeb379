// Command airlock-desktop is the Airlock desktop app (Wails): the window,
// the tray and, on Linux and Windows, the host core in one process. On
// macOS the host core and the VM run in the airlock command from the app's
// bundle (Contents/Helpers/airlock serve), which the app starts and stops:
// this program must not link Apple's Virtualization framework beside Wails
// (vm/platform/withvz), and never imports it. The app itself is
// app/desktop; this file only hands it the embedded web UI.
//
// Build it with `make desktop` (tags desktop,production; webkit2_41 on
// Linux). Flags: --no-boot leaves the VM stopped until it is needed;
// --verbose logs debug messages, the helper's included.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"github.com/airlock-sandbox/airlock/app/desktop"
	"github.com/airlock-sandbox/airlock/frontend"
)

func main() {
	noBoot := flag.Bool("no-boot", false, "do not boot the VM until the first task or a start")
	verbose := flag.Bool("verbose", false, "log debug messages to stderr")
	flag.Parse()
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	err := desktop.Run(desktop.Config{UI: frontend.Handler(), NoBoot: *noBoot, GOOS: runtime.GOOS, Verbose: *verbose, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock:", err)
		os.Exit(1)
	}
}
