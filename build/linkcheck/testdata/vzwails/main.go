// Command vzwails links vz and the Wails desktop frontend together, as the
// desktop app did while it reached vz through vm/platform: linkcheck must
// find the AppDelegate both define (go test ./build/linkcheck).
package main

import (
	_ "github.com/Code-Hex/vz/v3"
	_ "github.com/wailsapp/wails/v2"
)

func main() {}
