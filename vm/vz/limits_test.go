package vz

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/vm"
)

// appleSilicon are limits as an 8-core Mac with 16 GiB might report them.
var appleSilicon = Limits{MinCPUs: 1, MaxCPUs: 8, MinMemory: 4 * mib, MaxMemory: 16 << 30}

func TestLimitsFit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lim       Limits
		cpus, mem int
		wantCPUs  uint
		wantMem   uint64
		wantErr   string
		sentinel  error
	}{
		{name: "typical", lim: appleSilicon, cpus: 2, mem: 1024, wantCPUs: 2, wantMem: 1 << 30},
		{name: "at the bounds", lim: appleSilicon, cpus: 8, mem: 16384, wantCPUs: 8, wantMem: 16 << 30},
		{name: "minimum", lim: appleSilicon, cpus: 1, mem: 4, wantCPUs: 1, wantMem: 4 * mib},
		{name: "too many CPUs", lim: appleSilicon, cpus: 9, mem: 1024,
			wantErr: "9 CPUs requested, this Mac allows 1 to 8: change the CPUs setting", sentinel: vm.ErrInvalidConfig},
		{name: "no CPUs", lim: appleSilicon, cpus: 0, mem: 1024,
			wantErr: "0 CPUs requested, this Mac allows 1 to 8", sentinel: vm.ErrInvalidConfig},
		{name: "too much memory", lim: appleSilicon, cpus: 2, mem: 16385,
			wantErr: "16385 MiB memory requested, this Mac allows 4 to 16384 MiB: change the memory setting", sentinel: vm.ErrInvalidConfig},
		{name: "too little memory", lim: appleSilicon, cpus: 2, mem: 2,
			wantErr: "2 MiB memory requested, this Mac allows 4 to 16384 MiB", sentinel: vm.ErrInvalidConfig},
		{name: "odd byte limits round inwards", lim: Limits{MinCPUs: 1, MaxCPUs: 4, MinMemory: 4*mib + 1, MaxMemory: 8*mib - 1}, cpus: 1, mem: 8,
			wantErr: "this Mac allows 5 to 7 MiB", sentinel: vm.ErrInvalidConfig},
		{name: "negative", lim: appleSilicon, cpus: -1, mem: 1024, wantErr: "negative size", sentinel: vm.ErrInvalidConfig},
		{name: "broken limits", lim: Limits{MinCPUs: 2, MaxCPUs: 1, MinMemory: 1, MaxMemory: 1 << 40}, cpus: 1, mem: 1,
			wantErr: "no usable CPUs range", sentinel: vm.ErrNoHypervisor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cpus, mem, err := tc.lim.Fit(tc.cpus, tc.mem)
			if tc.wantErr == "" {
				if err != nil || cpus != tc.wantCPUs || mem != tc.wantMem {
					t.Fatalf("Fit = %d, %d, %v; want %d, %d, nil", cpus, mem, err, tc.wantCPUs, tc.wantMem)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Fit error = %v; want it to contain %q", err, tc.wantErr)
			}
			if !errors.Is(err, tc.sentinel) {
				t.Errorf("Fit error %v is not %v", err, tc.sentinel)
			}
		})
	}
}

func TestStopGrace(t *testing.T) {
	if g := (Options{}).stopGrace(); g != DefaultStopGrace {
		t.Errorf("zero Options: grace %s, want %s", g, DefaultStopGrace)
	}
	if g := (Options{StopGrace: 7}).stopGrace(); g != 7 {
		t.Errorf("grace %s, want 7ns", g)
	}
}
