package qemu

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestTSCTrusted(t *testing.T) {
	const good = "processor\t: 0\nflags\t\t: fpu tsc constant_tsc nonstop_tsc tsc_known_freq\n\nprocessor\t: 1\n"
	tests := []struct {
		name, cs, ci string
		want         bool
	}{
		{"tsc host", "tsc\n", good, true},
		{"host on hpet", "hpet\n", good, false},
		{"host on kvm-clock", "kvm-clock\n", good, false},
		{"no clocksource file", "", good, false},
		{"tsc stops in sleep", "tsc\n", "flags\t: fpu tsc constant_tsc\n", false},
		{"tsc rate varies", "tsc\n", "flags\t: fpu tsc nonstop_tsc\n", false},
		{"no cpuinfo", "tsc\n", "", false},
		{"flag only in another field", "tsc\n", "bugs\t: constant_tsc nonstop_tsc\nflags\t: fpu\n", false},
	}
	for _, tt := range tests {
		if got := tscTrusted(tt.cs, tt.ci); got != tt.want {
			t.Errorf("%s: tscTrusted = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// fakeCounter is a TSC ticking khz per millisecond of a fake clock that
// advances by step nanoseconds per read, with the wait adding wait ns.
type fakeCounter struct {
	ns         int64
	khz        int64
	step, wait int64
	waits      int
	jump       func(waits int) int64 // extra ns of a wait, e.g. a preemption
}

func (f *fakeCounter) now() int64  { f.ns += f.step; return f.ns }
func (f *fakeCounter) tsc() uint64 { f.ns += f.step; return uint64(f.ns * f.khz / 1_000_000) }
func (f *fakeCounter) sleep() {
	f.waits++
	f.ns += f.wait
	if f.jump != nil {
		// The counter runs on while the clock is not read: a jump in the
		// clock alone would be a counter that stopped.
		f.ns += f.jump(f.waits)
	}
}

func TestMeasureTSC(t *testing.T) {
	f := &fakeCounter{khz: 2_600_000, step: 150, wait: 10_000_000}
	if got := measureTSC(f.tsc, f.now, f.sleep); got < 2_599_000 || got > 2_601_000 {
		t.Errorf("rate %d kHz, want 2600000±1000", got)
	}
	if f.waits != 2 {
		t.Errorf("%d waits, want 2 (two agreeing measurements)", f.waits)
	}
}

// A counter that does not advance with the clock at a steady rate (here
// its clock reads are delayed differently in each measurement) gives no
// rate; a slow first try is retried.
func TestMeasureTSCDisagreement(t *testing.T) {
	stall := &fakeCounter{khz: 3_000_000, step: 100, wait: 10_000_000}
	stall.jump = func(w int) int64 {
		if w%2 == 0 {
			return 0
		}
		return 2_000_000 // the second sample of every odd wait comes 2 ms late
	}
	// The jump shifts clock and counter alike, so the rate holds: this is
	// the preemption measureTSC must tolerate.
	if got := measureTSC(stall.tsc, stall.now, stall.sleep); got < 2_999_000 || got > 3_001_000 {
		t.Errorf("preempted wait: rate %d kHz, want 3000000", got)
	}

	// A counter whose rate differs between the two measurements of every
	// try: no rate.
	rates := []int64{3_000_000, 2_000_000}
	n := 0
	var ns int64
	var cnt uint64
	now := func() int64 { ns += 100; return ns }
	tsc := func() uint64 { return cnt }
	wait := func() {
		r := rates[n%2]
		n++
		ns += 10_000_000
		cnt += uint64(10_000_000 * r / 1_000_000)
	}
	if got := measureTSC(tsc, now, wait); got != 0 {
		t.Errorf("unsteady counter: rate %d kHz, want 0", got)
	}
	if n != 6 {
		t.Errorf("%d waits, want 6 (three tries of two)", n)
	}
}

func TestMeasureTSCImplausible(t *testing.T) {
	for _, khz := range []int64{0, 50_000, 20_000_000} {
		f := &fakeCounter{khz: khz, step: 100, wait: 10_000_000}
		if got := measureTSC(f.tsc, f.now, f.sleep); got != 0 {
			t.Errorf("counter at %d kHz: rate %d, want 0", khz, got)
		}
	}
}

// On this host, when its TSC is trusted, two measurements agree closely.
func TestHostTSC(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the TSC is measured on amd64 Linux only")
	}
	khz := HostTSCkHz()
	if khz == 0 {
		t.Skip("this host's TSC is not its clock (or could not be timed)")
	}
	again := timeHostTSC()
	t.Logf("host TSC %d kHz, again %d kHz", khz, again)
	if again == 0 || abs(khz-again)*1000 > khz {
		t.Errorf("measurements disagree: %d and %d kHz", khz, again)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// A rate is remembered for the host boot that measured it, and only a
// plausible one is taken back.
func TestTSCCache(t *testing.T) {
	dir := t.TempDir()
	if got := loadTSC(dir, "boot-1"); got != 0 {
		t.Fatalf("empty cache: %d", got)
	}
	saveTSC(dir, "boot-1", 2599999)
	if got := loadTSC(dir, "boot-1"); got != 2599999 {
		t.Errorf("same boot: %d", got)
	}
	if got := loadTSC(dir, "boot-2"); got != 0 {
		t.Errorf("another boot took the rate: %d", got)
	}
	if got := loadTSC("", "boot-1"); got != 0 {
		t.Errorf("no cache folder: %d", got)
	}
	for name, body := range map[string]string{
		"implausible": `{"boot_id":"boot-1","khz":5}`,
		"corrupt":     `{"boot_id":`,
		"huge":        `{"boot_id":"boot-1","khz":2599999,"pad":"` + strings.Repeat("x", 8<<10) + `"}`,
	} {
		os.WriteFile(filepath.Join(dir, tscCacheFile), []byte(body), 0o600)
		if got := loadTSC(dir, "boot-1"); got != 0 {
			t.Errorf("%s cache: %d", name, got)
		}
	}
}
