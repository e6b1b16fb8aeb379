package vz

import (
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/vm"
)

// cause is what an error from the framework is about, as far as the user
// can act on it.
type cause int

const (
	causeOther       cause = iota
	causeEntitlement       // the executable lacks com.apple.security.virtualization
	causeUnavailable       // no virtualization on this Mac (a macOS VM, a CI runner)
	causeOSVersion         // vz.ErrUnsupportedOSVersion: the call needs a newer macOS
	causeSize              // the framework refused the CPU count or memory size
)

// Reasons the framework gives, as vz's NSError prints them (Description
// and NSLocalizedFailureReason), matched without case:
//
//	Error Domain=VZErrorDomain Code=2 Description="Invalid virtual machine configuration.
//	The process doesn’t have the “com.apple.security.virtualization” entitlement." (crc-org/vfkit#91)
//
//	Error Domain=VZErrorDomain Code=2 Description="Invalid virtual machine configuration.
//	Virtualization is not available on this hardware." (lima-vm/lima#2171, a macos-14 runner)
const (
	reasonEntitlement = "com.apple.security.virtualization"
	reasonUnavailable = "virtualization is not available"
)

// minMacOS is the oldest macOS Airlock's vz calls run on (virtio-fs and
// the disk caching modes need 12; the README asks for 13, what is tested).
const minMacOS = "13"

// causeOf classifies msg, the text of an error from the framework.
// osTooOld says the error is vz.ErrUnsupportedOSVersion (decided by the
// darwin code, which can import vz).
func causeOf(msg string, osTooOld bool) cause {
	m := strings.ToLower(msg)
	switch {
	case osTooOld:
		return causeOSVersion
	case strings.Contains(m, reasonEntitlement):
		return causeEntitlement
	case strings.Contains(m, reasonUnavailable):
		return causeUnavailable
	case strings.Contains(m, "memory size") || strings.Contains(m, "cpu count") || strings.Contains(m, "cpucount") || strings.Contains(m, "memorysize"):
		return causeSize
	}
	return causeOther
}

// explain is the error a user reads for err, which the framework returned
// while op ("configure", "start"). Only a reason that names the
// entitlement blames the entitlement; a Mac without virtualization is
// vm.ErrNoHypervisor, and a refused size names this Mac's limits.
// validating says err came from validating the configuration, which makes
// an unexplained refusal an invalid configuration.
func explain(op string, err error, osTooOld, validating bool, lim Limits) error {
	switch causeOf(err.Error(), osTooOld) {
	case causeEntitlement:
		return fmt.Errorf("vz: %s: %w: this program is not signed with the com.apple.security.virtualization entitlement, which Apple's Virtualization framework requires: use the airlock binary from the app bundle, or sign this one with codesign --force --sign - --entitlements build/darwin/entitlements.plist (see build/darwin) (%w)",
			op, vm.ErrNoHypervisor, err)
	case causeUnavailable:
		return fmt.Errorf("vz: %s: %w: virtualization is not available on this Mac; this happens inside a macOS virtual machine (a CI runner, UTM, Parallels), where the framework cannot start another one: run Airlock on the Mac itself (%w)",
			op, vm.ErrNoHypervisor, err)
	case causeOSVersion:
		return fmt.Errorf("vz: %s: %w: this version of macOS lacks what Airlock uses of Apple's Virtualization framework: update to macOS %s or later (%w)",
			op, vm.ErrNoHypervisor, minMacOS, err)
	case causeSize:
		return fmt.Errorf("vz: %s: %w: the framework refused the machine's size; this Mac allows %s: change the CPUs or memory setting (%w)",
			op, vm.ErrInvalidConfig, lim, err)
	}
	if validating {
		return fmt.Errorf("vz: %s: %w: the framework refused the configuration: %w", op, vm.ErrInvalidConfig, err)
	}
	return fmt.Errorf("vz: %s: %w", op, err)
}

// String names the limits as a user would set them.
func (l Limits) String() string {
	return fmt.Sprintf("%d to %d CPUs and %d to %d MiB of memory", l.MinCPUs, l.MaxCPUs, (l.MinMemory+mib-1)/mib, l.MaxMemory/mib)
}
