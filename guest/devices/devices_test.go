package devices

import (
	"os"
	"path/filepath"
	"testing"
)

// sysfs writes a fake sysfs tree: each key a file under root, its value
// the file's contents; a key ending in "/" is an empty folder.
func sysfs(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if name[len(name)-1] == '/' {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// The VMs the backends make, as sysfs shows them once the transports'
// drivers have probed (read from real guests: q35 and microvm here; vz
// and HCS as their device lists describe them).
var (
	// QEMU q35: virtio on PCI beside other PCI devices, no virtio-mmio,
	// no balloon.
	q35 = map[string]string{
		"bus/pci/devices/0000:00:00.0/vendor":             "0x8086\n",
		"bus/pci/devices/0000:00:01.0/vendor":             "0x1af4\n",
		"bus/pci/devices/0000:00:02.0/vendor":             "0x1af4\n",
		"bus/platform/devices/serial8250/modalias":        "platform:serial8250\n",
		"bus/platform/devices/PNP0103:00/modalias":        "acpi:PNP0103:\n",
		"bus/platform/devices/alarmtimer.0.auto/modalias": "platform:alarmtimer\n",
		"bus/virtio/devices/virtio0/device":               "0x0004\n",
		"bus/virtio/devices/virtio1/device":               "0x0003\n",
		"bus/virtio/devices/virtio2/device":               "0x0009\n",
	}
	// QEMU microvm: no PCI bus, virtio-mmio transports in ACPI.
	microvm = map[string]string{
		"bus/pci/devices/":                          "",
		"bus/platform/devices/LNRO0005:00/modalias": "acpi:LNRO0005:\n",
		"bus/platform/devices/LNRO0005:01/modalias": "acpi:LNRO0005:\n",
		"bus/platform/devices/serial8250/modalias":  "platform:serial8250\n",
		"bus/virtio/devices/virtio0/device":         "0x0004\n",
		"bus/virtio/devices/virtio1/device":         "0x0003\n",
	}
	// QEMU's arm virt: virtio-mmio slots in the device tree, and PCI.
	armVirt = map[string]string{
		"bus/pci/devices/0000:00:01.0/vendor":                  "0x1af4\n",
		"bus/platform/devices/a000000.virtio_mmio/modalias":    "of:Nvirtio_mmioT(null)Cvirtio,mmio\n",
		"bus/platform/devices/9000000.pl011/modalias":          "of:Npl011T(null)Carm,pl011Carm,primecell\n",
		"bus/virtio/devices/virtio0/device":                    "0x0003\n",
		"bus/virtio/devices/virtio1/device":                    "0x0005\n",
		"bus/platform/devices/no-alias-device/driver_override": "(null)\n",
	}
	// Hyper-V: no PCI, no virtio at all (VMBus instead).
	hyperV = map[string]string{
		"bus/pci/devices/":                       "",
		"bus/platform/devices/VMBUS:00/modalias": "acpi:VMBUS:\n",
		"bus/virtio/devices/":                    "",
	}
)

func TestNoDevice(t *testing.T) {
	tests := []struct {
		vm      string
		sys     map[string]string
		cmdline string
		skipped []string // of every module noDevice knows
	}{
		{"q35", q35, "", []string{"virtio_mmio", "virtio_balloon", "virtiofs", "vmw_vsock_virtio_transport", "virtio_blk"}},
		{"microvm", microvm, "", []string{"virtio_pci", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_balloon", "9pnet_virtio", "virtiofs", "vmw_vsock_virtio_transport", "virtio_blk"}},
		{"microvm, transport on the command line", map[string]string{"bus/pci/devices/": ""}, "console=ttyS0 virtio_mmio.device=4K@0xfeb00000:12",
			[]string{"virtio_pci", "virtio_pci_legacy_dev", "virtio_pci_modern_dev"}},
		{"arm virt", armVirt, "", []string{"virtio_rng", "9pnet_virtio", "virtiofs", "vmw_vsock_virtio_transport", "virtio_blk"}},
		{"hyper-v", hyperV, "", []string{"virtio_pci", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_mmio", "virtio_console", "virtio_rng", "virtio_balloon", "9pnet_virtio", "virtiofs", "vmw_vsock_virtio_transport", "virtio_blk"}},
		// Nothing readable: nothing is skipped on a guess.
		{"no sysfs", map[string]string{}, "", nil},
		{"unreadable vendor", map[string]string{"bus/pci/devices/0000:00:01.0/": "", "bus/platform/devices/": ""}, "", []string{"virtio_mmio"}},
		{"bad virtio device id", map[string]string{"bus/pci/devices/": "", "bus/virtio/devices/virtio0/device": "console\n"}, "", []string{"virtio_pci", "virtio_pci_legacy_dev", "virtio_pci_modern_dev"}},
	}
	all := []string{"virtio_pci", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_mmio",
		"virtio_console", "virtio_rng", "virtio_balloon", "9pnet_virtio", "virtiofs", "vmw_vsock_virtio_transport", "virtio_blk",
		// Never skipped for want of a device: libraries and file systems.
		"virtio", "virtio_ring", "9p", "9pnet", "fuse", "vsock", "hv_sock", "ext4"}
	for _, tt := range tests {
		t.Run(tt.vm, func(t *testing.T) {
			hw := hardware{sys: sysfs(t, tt.sys)}
			want := map[string]bool{}
			for _, m := range tt.skipped {
				want[m] = true
			}
			for _, m := range all {
				why := hw.noDevice(m, tt.cmdline)
				if (why != "") != want[m] {
					t.Errorf("%s: noDevice = %q, want skipped %v", m, why, want[m])
				}
			}
		})
	}
}
