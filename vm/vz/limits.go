package vz

import (
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/vm"
)

// Options tune the vz backend. The zero value is ready to use.
type Options struct {
	// StopGrace is how long Stop waits for the guest to power off after
	// RequestStop before it forces the machine off (default
	// DefaultStopGrace). Stop's ctx may cut it shorter.
	StopGrace time.Duration
}

// DefaultStopGrace is Options.StopGrace when it is zero.
const DefaultStopGrace = 3 * time.Second

func (o Options) stopGrace() time.Duration {
	if o.StopGrace > 0 {
		return o.StopGrace
	}
	return DefaultStopGrace
}

const mib = 1 << 20

// Limits are the framework's bounds on a machine's size, as
// VZVirtualMachineConfiguration reports them on the running Mac
// (minimumAllowedCPUCount and the like). The darwin code reads them from vz;
// tests pass their own.
type Limits struct {
	MinCPUs, MaxCPUs uint
	// MinMemory and MaxMemory are in bytes.
	MinMemory, MaxMemory uint64
}

// Fit checks a requested size against l and returns it in the framework's
// units (a CPU count and bytes). A size outside the limits is an error
// wrapping vm.ErrInvalidConfig that names the allowed range, so the user
// knows which setting to change.
func (l Limits) Fit(cpus, memoryMiB int) (uint, uint64, error) {
	if cpus < 0 || memoryMiB < 0 {
		return 0, 0, fmt.Errorf("vz: %w: negative size (%d CPUs, %d MiB)", vm.ErrInvalidConfig, cpus, memoryMiB)
	}
	if err := inRange("CPUs", uint64(cpus), uint64(l.MinCPUs), uint64(l.MaxCPUs), 1, ""); err != nil {
		return 0, 0, err
	}
	mem := uint64(memoryMiB) * mib
	if err := inRange("memory", mem, l.MinMemory, l.MaxMemory, mib, " MiB"); err != nil {
		return 0, 0, err
	}
	return uint(cpus), mem, nil
}

// inRange checks min <= requested <= max. unit scales the numbers in the
// message (bytes shown in MiB); the minimum is rounded up and the maximum
// down, so the range the message names is one the user can actually ask for.
func inRange(what string, requested, min, max, unit uint64, suffix string) error {
	if min > max {
		return fmt.Errorf("vz: %w: the framework reports no usable %s range (%d to %d): virtualization is probably not available here (a macOS virtual machine or CI runner): run Airlock on the Mac itself", vm.ErrNoHypervisor, what, min, max)
	}
	if requested >= min && requested <= max {
		return nil
	}
	lo, hi := (min+unit-1)/unit, max/unit
	return fmt.Errorf("vz: %w: %d%s %s requested, this Mac allows %d to %d%s: change the %s setting",
		vm.ErrInvalidConfig, requested/unit, suffix, what, lo, hi, suffix, what)
}
