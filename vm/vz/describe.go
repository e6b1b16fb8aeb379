package vz

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/vm"
)

// Description is the machine the darwin code builds, resolved from a
// vm.Config: every path, size and device, and nothing that needs the
// framework. The darwin code translates it into vz calls one field at a
// time, so what the guest gets is decided (and tested) here.
type Description struct {
	// Arch is the guest (and host) architecture, "arm64" or "amd64".
	Arch string `json:"arch"`
	// CPUs and MemoryBytes are within the framework's Limits.
	CPUs        uint   `json:"cpus"`
	MemoryBytes uint64 `json:"memory_bytes"`
	// Platform is always "generic" (VZGenericPlatformConfiguration).
	Platform string `json:"platform"`
	Boot     Boot   `json:"boot"`
	// VirtioSocket is always true: one virtio-socket device carries the
	// transport (guest/api ports).
	VirtioSocket bool `json:"virtio_socket"`
	// Share is the virtio-fs device, or nil without a shared folder.
	Share *ShareDevice `json:"share,omitempty"`
	// Disks are virtio-blk devices backed by disk image files, in order.
	Disks []DiskDevice `json:"disks,omitempty"`
	// Entropy (virtio-rng) and Balloon (traditional memory balloon) are
	// always present.
	Entropy bool `json:"entropy"`
	Balloon bool `json:"balloon"`
	// Console is the serial console.
	Console Console `json:"console"`
	// Network is always empty: the guest has no network device, and its
	// only way out is the host's egress gate over the virtio-socket.
	Network []string `json:"network"`
}

// Boot is the Linux boot loader's input (VZLinuxBootLoader).
type Boot struct {
	Kernel  string `json:"kernel"`
	Initrd  string `json:"initrd"`
	Cmdline string `json:"cmdline"`
}

// ShareDevice is a virtio-fs device sharing one folder.
type ShareDevice struct {
	Tag      string `json:"tag"`
	HostPath string `json:"host_path"`
	// ReadOnly is enforced by the framework (VZSharedDirectory readOnly),
	// and told to the guest on the command line so it mounts read-only too.
	ReadOnly bool `json:"read_only"`
}

// DiskDevice is a virtio-blk device backed by a raw disk image
// (VZDiskImageStorageDeviceAttachment); a VHD footer after the file system
// is harmless trailing data to it.
type DiskDevice struct {
	Path string `json:"path"`
	// ReadOnly is enforced by the framework: the guest's writes fail.
	ReadOnly bool `json:"read_only"`
	// Caching and Sync are the attachment's VZDiskImageCachingMode and
	// VZDiskImageSynchronizationMode: always DiskCached and DiskFsync.
	Caching DiskCaching `json:"caching"`
	Sync    DiskSync    `json:"sync"`
}

// DiskCaching is a VZDiskImageCachingMode.
type DiskCaching string

// DiskSync is a VZDiskImageSynchronizationMode.
type DiskSync string

// The modes every disk is attached with. The framework's default
// (initWithURL:readOnly:error:, caching "automatic") corrupted ext4 on
// Linux guests: checksum errors and read-only remounts (lima-vm/lima#1957,
// utmapp/UTM#4840, apple/containerization#576). Lima (lima-vm/lima#2026),
// UTM (utmapp/UTM#5919) and vfkit (crc-org/vfkit#76) attach disks cached
// with fsync, which made it go away and cost no measurable speed there.
// Fsync makes a guest's flush an fsync(2) on the image; "full"
// (F_FULLFSYNC on every flush) is slower, and "none" loses data on a host
// crash.
const (
	DiskCached DiskCaching = "cached"
	DiskFsync  DiskSync    = "fsync"
)

// Console is a virtio-console serial port (hvc0 in the guest) written to
// a file on the host.
type Console struct {
	Path string `json:"path"`
	// Append is always true: a restarted machine adds to the log instead
	// of wiping what an earlier boot left for diagnosis.
	Append bool `json:"append"`
}

// Describe maps cfg to the machine for arch within lim. It touches no
// file: the kernel is checked separately, right before the VM is built.
func Describe(cfg vm.Config, arch string, lim Limits) (Description, error) {
	if err := cfg.Validate(); err != nil {
		return Description{}, fmt.Errorf("vz: %w", err)
	}
	if arch != "arm64" && arch != "amd64" {
		return Description{}, fmt.Errorf("vz: %w: architecture %q: want arm64 or amd64", vm.ErrInvalidConfig, arch)
	}
	for _, p := range []struct{ what, path string }{{"kernel", cfg.Kernel}, {"initrd", cfg.Initrd}, {"runtime folder", cfg.Dir}} {
		if !filepath.IsAbs(p.path) {
			return Description{}, fmt.Errorf("vz: %w: %s path %q is not absolute", vm.ErrInvalidConfig, p.what, p.path)
		}
	}
	cpus, mem, err := lim.Fit(cfg.CPUs, cfg.MemoryMiB)
	if err != nil {
		return Description{}, err
	}
	d := Description{
		Arch: arch, CPUs: cpus, MemoryBytes: mem, Platform: "generic",
		Boot:         Boot{Kernel: cfg.Kernel, Initrd: cfg.Initrd, Cmdline: kernelCmdline(cfg.Share, cfg.Cmdline)},
		VirtioSocket: true, Entropy: true, Balloon: true,
		Console: Console{Path: consoleLog(cfg), Append: true},
		Network: []string{},
	}
	for _, disk := range cfg.Disks {
		d.Disks = append(d.Disks, DiskDevice{Path: disk.Path, ReadOnly: disk.ReadOnly, Caching: DiskCached, Sync: DiskFsync})
	}
	if s := cfg.Share; s != nil {
		if !filepath.IsAbs(s.HostPath) {
			return Description{}, fmt.Errorf("vz: %w: share %q is not an absolute path", vm.ErrInvalidConfig, s.HostPath)
		}
		d.Share = &ShareDevice{Tag: api.WorkspaceTag, HostPath: s.HostPath, ReadOnly: s.ReadOnly}
	}
	for _, w := range cfg.Cmdline {
		if w == "" || strings.ContainsAny(w, " \t\n") {
			return Description{}, fmt.Errorf("vz: %w: kernel command line word %q is empty or has white space", vm.ErrInvalidConfig, w)
		}
	}
	return d, nil
}

// consoleLog is cfg.ConsoleLog, or console.log in the runtime folder.
func consoleLog(cfg vm.Config) string {
	if cfg.ConsoleLog != "" {
		return cfg.ConsoleLog
	}
	return filepath.Join(cfg.Dir, "console.log")
}

// kernelCmdline is the boot loader's command line: the console on the
// virtio-console port (hvc0; the framework offers no UART), the words
// every backend uses (api.KernelArgs), what the guest must know about
// its devices (guest/api.BootConfig), then the caller's words.
func kernelCmdline(share *vm.Share, extra []string) string {
	boot := api.BootConfig{Transport: api.TransportVsock}
	if share != nil {
		boot.Share, boot.ShareReadOnly = api.ShareVirtiofs, share.ReadOnly
	}
	words := append([]string{"console=hvc0"}, api.KernelArgs...)
	words = append(words, boot.Args()...)
	words = append(words, extra...)
	return strings.Join(words, " ")
}
