package service

import (
	"errors"
	"testing"

	"github.com/airlock-sandbox/airlock/app/settings"
)

func TestMachineLimits(t *testing.T) {
	for _, tc := range []struct {
		cpus, mem       int
		maxCPUs, maxMem int
	}{
		{2, 8192, 2, 7168},
		{128, 8192, 64, 7168},
		{4, 1024, 4, 256}, // a small host still boots the smallest guest
		{4, 0, 4, settings.MaxMemoryMiB},
	} {
		l := limitsFor(tc.cpus, tc.mem)
		if l.MaxCPUs != tc.maxCPUs || l.MaxMemoryMiB != tc.maxMem || l.MinMemoryMiB != settings.MinMemoryMiB {
			t.Errorf("limitsFor(%d, %d) = %+v, want %d CPUs, %d MiB", tc.cpus, tc.mem, l, tc.maxCPUs, tc.maxMem)
		}
	}
	if l := machineLimits(); l.MaxCPUs < 1 || l.HostMemoryMiB <= 0 {
		t.Errorf("this host's limits: %+v", l)
	}
	l := limitsFor(2, 8192)
	for _, tc := range []struct {
		cpus, mem int
		want      string
	}{
		{3, 1024, "3 CPUs: this computer has 2; choose between 1 and 2"},
		{0, 1024, "0 CPUs: this computer has 2; choose between 1 and 2"},
		{2, 128, "128 MiB of memory is too little for Linux to start; choose at least 256 MiB"},
		{2, 7680, "7.5 GiB of memory: this computer has 8 GiB and keeps 1 GiB for itself; choose at most 7 GiB"},
		{2, 7168, ""},
		{1, 256, ""},
	} {
		err := l.check(tc.cpus, tc.mem)
		if tc.want == "" {
			if err != nil {
				t.Errorf("check(%d, %d) = %v", tc.cpus, tc.mem, err)
			}
			continue
		}
		if !errors.Is(err, ErrBadSize) || err.Error() != tc.want {
			t.Errorf("check(%d, %d) = %v, want ErrBadSize %q", tc.cpus, tc.mem, err, tc.want)
		}
	}
}
