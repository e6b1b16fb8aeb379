//go:build !linux || !amd64

package qemu

// HostTSCkHz: only an amd64 Linux host's TSC is measured (see tsc.go); a
// guest elsewhere calibrates its own clock.
func HostTSCkHz() int { return 0 }

func hostTSC(string) int { return 0 }

func timeHostTSC() int { return 0 }
