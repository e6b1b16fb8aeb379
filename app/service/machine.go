package service

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/airlock-sandbox/airlock/app/settings"
)

// ErrBadSize marks a refused machine size: more CPUs than the host has, or
// memory outside MachineLimits.
var ErrBadSize = errors.New("invalid machine size")

// sizeError is an ErrBadSize whose message is the reason alone, for the
// Machine screen to show as it is.
type sizeError string

func (e sizeError) Error() string        { return string(e) }
func (e sizeError) Is(target error) bool { return target == ErrBadSize }

func badSize(format string, args ...any) error { return sizeError(fmt.Sprintf(format, args...)) }

// hostReserveMiB is memory a VM may not take from the host: what the host
// itself needs to stay usable while the guest holds the rest.
const hostReserveMiB = 1024

// MachineLimits are the sizes this host lets the VM have.
type MachineLimits struct {
	// MaxCPUs is the host's CPU count (at most settings.MaxCPUs).
	MaxCPUs int `json:"max_cpus"`
	// MinMemoryMiB is the least memory the guest boots with.
	MinMemoryMiB int `json:"min_memory_mib"`
	// MaxMemoryMiB is the host's memory less what the host keeps for
	// itself (settings.MaxMemoryMiB when the host's is unknown).
	MaxMemoryMiB int `json:"max_memory_mib"`
	// HostMemoryMiB is the host's physical memory, 0 when unknown.
	HostMemoryMiB int `json:"host_memory_mib,omitempty"`
}

// machineLimits are this host's limits, from its CPU count and memory.
func machineLimits() MachineLimits {
	return limitsFor(runtime.NumCPU(), hostMemoryMiB())
}

// limitsFor are the limits of a host with cpus CPUs and memMiB of memory
// (0: unknown).
func limitsFor(cpus, memMiB int) MachineLimits {
	l := MachineLimits{MaxCPUs: min(max(cpus, settings.MinCPUs), settings.MaxCPUs), MinMemoryMiB: settings.MinMemoryMiB,
		MaxMemoryMiB: settings.MaxMemoryMiB, HostMemoryMiB: memMiB}
	if memMiB > 0 {
		l.MaxMemoryMiB = min(max(memMiB-hostReserveMiB, settings.MinMemoryMiB), settings.MaxMemoryMiB)
	}
	return l
}

// check refuses a size outside l, saying what would fit.
func (l MachineLimits) check(cpus, memoryMiB int) error {
	if cpus < 1 || cpus > l.MaxCPUs {
		return badSize("%d CPUs: this computer has %d; choose between 1 and %d", cpus, l.MaxCPUs, l.MaxCPUs)
	}
	if memoryMiB < l.MinMemoryMiB {
		return badSize("%s of memory is too little for Linux to start; choose at least %s", mib(memoryMiB), mib(l.MinMemoryMiB))
	}
	if memoryMiB > l.MaxMemoryMiB {
		if l.HostMemoryMiB > 0 {
			return badSize("%s of memory: this computer has %s and keeps %s for itself; choose at most %s",
				mib(memoryMiB), mib(l.HostMemoryMiB), mib(hostReserveMiB), mib(l.MaxMemoryMiB))
		}
		return badSize("%s of memory: choose at most %s", mib(memoryMiB), mib(l.MaxMemoryMiB))
	}
	return nil
}

// mib writes a memory size the way the UI does: GiB from 1 GiB up.
func mib(n int) string {
	if n >= 1024 {
		if n%1024 == 0 {
			return fmt.Sprintf("%d GiB", n/1024)
		}
		return fmt.Sprintf("%.1f GiB", float64(n)/1024)
	}
	return fmt.Sprintf("%d MiB", n)
}

// SetMachine sets the VM's CPUs and memory (MiB), checked against this
// host's limits. The settings keep them, and they apply from the VM's next
// start: a running VM keeps its size (its tasks go on).
func (s *Service) SetMachine(ctx context.Context, cpus, memoryMiB int) error {
	if err := s.limits.check(cpus, memoryMiB); err != nil {
		return err
	}
	if err := s.updateSettings(func(st *settings.Settings) error {
		st.CPUs, st.MemoryMiB = cpus, memoryMiB
		return nil
	}); err != nil {
		return err
	}
	return s.sess.SetSize(ctx, cpus, memoryMiB)
}
