//go:build !linux

package mux

import "time"

// procUsage is not measured here.
func procUsage() (cpu time.Duration, switches int64, ok bool) { return 0, 0, false }
