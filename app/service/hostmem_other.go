//go:build !linux && !darwin && !windows

package service

// hostMemoryMiB is 0 (unknown) where Airlock has no way to ask.
func hostMemoryMiB() int { return 0 }
