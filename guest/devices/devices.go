// Package devices says which of the guest image's driver modules would
// bind nothing in this VM, from sysfs, so init (and the benchmarks' trivial
// init) can skip loading them. It imports nothing of the guest's own.
package devices

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A driver module whose device the VM does not have binds nothing, yet
// costs its load under emulation. hardware says, from
// sysfs, which virtio transports and devices the VM has, by the same
// matches the drivers themselves use; whatever cannot be read counts as
// present, so a module is only ever skipped on positive evidence.
type hardware struct {
	sys string // where sysfs is mounted: "/sys"
}

// The PCI vendor of every virtio device (virtio_pci's match table).
const virtioPCIVendor = "0x1af4"

// virtioPCI reports whether a PCI device is a virtio one. A VM without a
// PCI bus (QEMU's microvm, a Hyper-V guest) lists no PCI devices; a
// kernel without PCI support has no such folder, and counts as having one.
func (h hardware) virtioPCI() bool {
	devs, err := os.ReadDir(filepath.Join(h.sys, "bus/pci/devices"))
	if err != nil {
		return true
	}
	for _, d := range devs {
		b, err := os.ReadFile(filepath.Join(h.sys, "bus/pci/devices", d.Name(), "vendor"))
		if err != nil || strings.TrimSpace(string(b)) == virtioPCIVendor {
			return true
		}
	}
	return false
}

// virtioMMIO reports whether a platform device is a virtio-mmio
// transport: ACPI's LNRO0005 (QEMU's microvm) or a device-tree node
// compatible with "virtio,mmio" (QEMU's arm virt), virtio_mmio's match
// tables. Transports given on the kernel command line
// (virtio_mmio.device=) count too.
func (h hardware) virtioMMIO(cmdline string) bool {
	if strings.Contains(cmdline, "virtio_mmio.device=") {
		return true
	}
	devs, err := os.ReadDir(filepath.Join(h.sys, "bus/platform/devices"))
	if err != nil {
		return true
	}
	for _, d := range devs {
		b, err := os.ReadFile(filepath.Join(h.sys, "bus/platform/devices", d.Name(), "modalias"))
		if err != nil {
			continue // not every platform device has one
		}
		if alias := string(b); strings.Contains(alias, "LNRO0005") || strings.Contains(alias, "Cvirtio,mmio") {
			return true
		}
	}
	return false
}

// virtioDevices is the set of virtio device IDs on the virtio bus; ok is
// false when the bus cannot be read (no transport driver loaded yet).
func (h hardware) virtioDevices() (ids map[uint32]bool, ok bool) {
	dir := filepath.Join(h.sys, "bus/virtio/devices")
	devs, err := os.ReadDir(dir)
	if err != nil {
		return nil, false
	}
	ids = map[uint32]bool{}
	for _, d := range devs {
		b, err := os.ReadFile(filepath.Join(dir, d.Name(), "device"))
		if err != nil {
			return nil, false
		}
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 32)
		if err != nil {
			return nil, false
		}
		ids[uint32(id)] = true
	}
	return ids, true
}

// Virtio device IDs (the virtio specification, 5 Device Types).
const (
	virtioIDBlock       = 2
	virtioIDConsole     = 3
	virtioIDRNG         = 4
	virtioIDBalloon     = 5
	virtioID9P          = 9
	virtioIDRProcSerial = 11
	virtioIDVsock       = 19
	virtioIDFS          = 26
)

// virtioDrivers are the image's virtio device drivers, by module name,
// with the device IDs each binds.
var virtioDrivers = map[string][]uint32{
	"virtio_console":             {virtioIDConsole, virtioIDRProcSerial},
	"virtio_rng":                 {virtioIDRNG},
	"virtio_balloon":             {virtioIDBalloon},
	"9pnet_virtio":               {virtioID9P},
	"virtiofs":                   {virtioIDFS},
	"vmw_vsock_virtio_transport": {virtioIDVsock},
	"virtio_blk":                 {virtioIDBlock},
}

// virtioPCIModules serve only virtio's PCI transport.
var virtioPCIModules = map[string]bool{"virtio_pci": true, "virtio_pci_legacy_dev": true, "virtio_pci_modern_dev": true}

// noDevice reports why the module named name would bind nothing in this
// VM, or "" when it may: a virtio transport without a device on its bus,
// a virtio driver without its device.
func (h hardware) noDevice(name, cmdline string) string {
	switch {
	case virtioPCIModules[name]:
		if !h.virtioPCI() {
			return "no virtio PCI device"
		}
	case name == "virtio_mmio":
		if !h.virtioMMIO(cmdline) {
			return "no virtio-mmio transport"
		}
	case virtioDrivers[name] != nil:
		ids, ok := h.virtioDevices()
		if !ok {
			return ""
		}
		for _, id := range virtioDrivers[name] {
			if ids[id] {
				return ""
			}
		}
		return "no such virtio device"
	}
	return ""
}

// Absent is why the module named name (as the kernel names it:
// underscores, no ".ko") would bind nothing in this VM, or "" when it may:
// init skips the module then. cmdline is the kernel command line. The
// benchmarks' trivial init skips the same modules, so that both boots load
// only what their VM has.
func Absent(name, cmdline string) string {
	return hardware{sys: "/sys"}.noDevice(name, cmdline)
}
