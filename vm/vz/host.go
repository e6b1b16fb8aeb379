package vz

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/vm"
)

// checkHost refuses an Intel Mac before anything is created: Airlock boots
// its guest with Apple's Virtualization framework on Apple silicon only.
//
// What an Intel Mac would need, and why it is not offered:
//   - A kernel VZLinuxBootLoader starts on x86. The amd64 guest image holds
//     an uncompressed ELF vmlinux with a PVH entry note (images/manifest
//     CheckKernel), the format QEMU and HCS boot directly. The x86 boots
//     of the framework on record use a distribution's vmlinuz, a bzImage:
//     Apple's LinuxVirtualMachine sample run with Ubuntu's vmlinuz on an
//     Intel Mac (lima-vm/lima#3334), crc's x86_64 bundles through vfkit
//     (crc-org/vfkit#11; vfkit checks the kernel's format on arm64 only,
//     pkg/vf/bootloader.go). No source we found says whether it accepts an
//     ELF vmlinux, so the image would need a bzImage for the Mac.
//   - A macOS that boots the kernel. Before macOS 15.5 the framework on
//     Intel does not boot Linux 6.12 or later built with
//     CONFIG_X86_INTEL_MEMORY_PROTECTION_KEYS (Ubuntu's and Fedora's
//     kernels): lima-vm/lima#3334, fixed in macOS 15.5 (Lima's maintainers
//     there; Lima's vz driver warns "On Intel Mac, macOS 15.5 or later is
//     required to run Linux 6.12 or later", pkg/driver/vz/vz_driver_darwin.go).
//     The guest's kernel is 6.1 (Debian 12), which that report does not
//     cover.
//   - A run on an Intel Mac, which no one has made.
func checkHost(goarch string) error {
	if goarch == "arm64" {
		return nil
	}
	return fmt.Errorf("vz: %w: this Mac has an Intel processor (%s); Airlock runs its Linux VM only on Macs with Apple silicon (M1 or later). Use a Mac with Apple silicon, or Airlock on Linux or Windows",
		vm.ErrNoHypervisor, goarch)
}
