package qemu

import (
	"slices"
	"strings"
	"time"
)

// Under TCG an x86 guest's TSC is the host's own counter, read by QEMU with
// an offset, so it ticks at the host's TSC rate. The guest kernel does not
// know that: it calibrates the TSC against the emulated PIT in a busy loop
// a descheduled vCPU thread disturbs (rates 8-43x too low were seen here),
// and with QEMU's default CPU (an AMD model without constant_tsc) and two
// vCPUs it declares the TSC unsynchronized and falls back on the HPET,
// whose every read is an emulated device access. Told the rate
// (tsc_early_khz, which the kernel still refines against the HPET within
// 1%) and that the counter is reliable, the guest keeps the TSC.
//
// That is only true when the host's TSC is itself a clock: invariant
// (constant_tsc, nonstop_tsc) and chosen by the host kernel as its
// clocksource, which it does only for a TSC that is synchronized across
// CPUs and stable.

// tscTrusted reports whether a host whose current clocksource and
// /proc/cpuinfo are given has a TSC a guest can take as its clock.
func tscTrusted(clocksource, cpuinfo string) bool {
	if strings.TrimSpace(clocksource) != "tsc" {
		return false
	}
	for line := range strings.Lines(cpuinfo) {
		name, flags, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != "flags" {
			continue
		}
		f := strings.Fields(flags)
		return slices.Contains(f, "constant_tsc") && slices.Contains(f, "nonstop_tsc")
	}
	return false
}

// Bounds of a plausible TSC rate, in kHz.
const (
	minTSCkHz = 100_000    // 100 MHz
	maxTSCkHz = 10_000_000 // 10 GHz
)

// tscWindow is how long the counter is timed. A reading is bracketed by
// two clock reads a few hundred nanoseconds apart, so the rate is good to
// a few parts in 10^5, far inside the 1% the guest kernel refines.
const tscWindow = 10 * time.Millisecond

// measureTSC times the counter tsc against now (nanoseconds) across a
// wait, twice, and returns its rate in kHz, or 0 when the two disagree by
// more than 0.1% in three tries (the thread was preempted mid-reading, or
// the counter is not steady) or the rate is implausible.
func measureTSC(tsc func() uint64, now func() int64, wait func()) int {
	// sample reads the counter between two clock reads; of five, the
	// tightest pair dates it best.
	sample := func() (t int64, c uint64) {
		best := int64(-1)
		for range 5 {
			a := now()
			x := tsc()
			b := now()
			if d := b - a; d >= 0 && (best < 0 || d < best) {
				best, t, c = d, a+d/2, x
			}
		}
		return t, c
	}
	rate := func() int64 {
		t0, c0 := sample()
		wait()
		t1, c1 := sample()
		if t1 <= t0 || c1 <= c0 {
			return 0
		}
		// kHz = cycles per nanosecond × 10^6; cycles over 10 ms at
		// 10 GHz times 10^6 is far from overflowing.
		return int64((c1 - c0) * 1_000_000 / uint64(t1-t0))
	}
	for range 3 {
		a, b := rate(), rate()
		if a < minTSCkHz || a > maxTSCkHz || b < minTSCkHz || b > maxTSCkHz {
			continue
		}
		if d := a - b; d*1000 <= a && -d*1000 <= a {
			return int((a + b) / 2)
		}
	}
	return 0
}
