//go:build linux && amd64

package qemu

import (
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// rdtsc reads the time-stamp counter (rdtsc_amd64.s).
func rdtsc() uint64

// HostTSCkHz is the rate of this host's TSC in kHz when an amd64 guest
// under TCG can take it as its clock (see tsc.go), else 0: the rate such a
// guest is booted with. Measured once per process (~20 ms), unless an
// earlier process of this host boot remembered it (hostTSC).
func HostTSCkHz() int { return hostTSC("") }

var tscMemo struct {
	sync.Mutex
	done bool
	khz  int
}

// hostTSC is HostTSCkHz, remembering the rate in cacheDir (when not
// empty) for the rest of the host's boot, and taking it from there.
func hostTSC(cacheDir string) int {
	tscMemo.Lock()
	defer tscMemo.Unlock()
	if tscMemo.done {
		return tscMemo.khz
	}
	tscMemo.done = true
	cs, _ := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	ci, _ := os.ReadFile("/proc/cpuinfo")
	if !tscTrusted(string(cs), string(ci)) {
		return 0
	}
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	boot := strings.TrimSpace(string(b))
	if khz := loadTSC(cacheDir, boot); khz > 0 {
		tscMemo.khz = khz
		return khz
	}
	tscMemo.khz = timeHostTSC()
	saveTSC(cacheDir, boot, tscMemo.khz)
	return tscMemo.khz
}

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
