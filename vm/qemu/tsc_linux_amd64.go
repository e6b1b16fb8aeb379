//go:build linux && amd64

package qemu

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// rdtsc reads the time-stamp counter (rdtsc_amd64.s).
func rdtsc() uint64

// HostTSCkHz is the rate of this host's TSC in kHz when an amd64 guest
// under TCG can take it as its clock (see tsc.go), else 0: the rate such a
// guest is booted with. Measured once per process: ~20 ms.
var HostTSCkHz = sync.OnceValue(func() int {
	cs, _ := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	ci, _ := os.ReadFile("/proc/cpuinfo")
	if !tscTrusted(string(cs), string(ci)) {
		return 0
	}
	return timeHostTSC()
})

// timeHostTSC measures the TSC's rate against CLOCK_MONOTONIC_RAW.
func timeHostTSC() int {
	now := func() int64 {
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &ts) != nil {
			return 0
		}
		return ts.Nano()
	}
	return measureTSC(rdtsc, now, func() { time.Sleep(tscWindow) })
}
