// Command airlock-desktop is the Airlock desktop app. Until the desktop
// issue lands it is a placeholder that embeds the (empty) web UI and points
// at the CLI, so the Wails layout exists and builds.
package main

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
)

//go:embed all:frontend/dist
var assets embed.FS

func main() {
	n := 0
	_ = fs.WalkDir(assets, "frontend/dist", func(string, fs.DirEntry, error) error { n++; return nil })
	fmt.Fprintf(os.Stderr, "The Airlock desktop app is not built yet (%d UI assets embedded); use bin/airlock run.\n", n)
	os.Exit(2)
}
