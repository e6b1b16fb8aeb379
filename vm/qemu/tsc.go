package qemu

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Under TCG an x86 guest's TSC is the host's own counter, read by QEMU with
// an offset, so it ticks at the host's TSC rate. The guest kernel does not
// know that: it calibrates the TSC against the emulated PIT in a busy loop
// a descheduled vCPU thread disturbs (the rate can come out many times too
// low: docs/performance.md, The guest's clock under TCG),
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

// tscCacheFile is where a measured rate is remembered, in Options.CacheDir.
const tscCacheFile = "tsc.json"

// tscCache is a rate measured in one boot of the host: an invariant TSC
// (which tscTrusted requires) keeps its rate until the host reboots, so
// the next process of the same boot takes it instead of timing the counter
// again (~20 ms of every `airlock run`).
type tscCache struct {
	BootID string `json:"boot_id"`
	KHz    int    `json:"khz"`
}

// loadTSC returns the rate remembered in dir for boot, or 0.
func loadTSC(dir, boot string) int {
	if dir == "" || boot == "" {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, tscCacheFile))
	if err != nil || len(b) > 4<<10 {
		return 0
	}
	var c tscCache
	if json.Unmarshal(b, &c) != nil || c.BootID != boot || c.KHz < minTSCkHz || c.KHz > maxTSCkHz {
		return 0
	}
	return c.KHz
}

// saveTSC remembers khz for boot in dir; failing costs only a measurement
// later.
func saveTSC(dir, boot string, khz int) {
	if dir == "" || boot == "" || khz == 0 {
		return
	}
	b, _ := json.Marshal(tscCache{BootID: boot, KHz: khz})
	_ = replaceFile(filepath.Join(dir, tscCacheFile), b)
}
