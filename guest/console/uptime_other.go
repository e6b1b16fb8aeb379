//go:build !linux

package console

import "time"

var start = time.Now()

// Uptime is the time since the process started (the guest is Linux; this
// serves host-side tests).
func Uptime() time.Duration { return time.Since(start) }
