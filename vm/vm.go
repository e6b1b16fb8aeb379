// Package vm defines the neutral machine abstraction Airlock's host uses: a
// Config, a Machine with a small lifecycle, and the transport to the guest
// (Dial a guest port, Listen for the guest). Backends live in vm/<name>
// (qemu, vz, hcs); this package imports none of them.
package vm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
)

// Sentinel errors shared by all backends.
var (
	// ErrNoHypervisor means the platform hypervisor is missing or unusable.
	ErrNoHypervisor = errors.New("no usable hypervisor")
	// ErrNotRunning is returned by calls that need a running machine.
	ErrNotRunning = errors.New("machine is not running")
	// ErrAlreadyStarted is returned by a second Start.
	ErrAlreadyStarted = errors.New("machine already started")
	// ErrInvalidConfig wraps every Config validation error.
	ErrInvalidConfig = errors.New("invalid machine configuration")
	// ErrPortInUse is returned by Listen for a port already listened on.
	ErrPortInUse = errors.New("port already in use")
	// ErrConnRefused is returned by Dial when nothing listens on the guest port.
	ErrConnRefused = errors.New("connection refused by guest")
)

// Config describes a machine. Backends map it to their own devices.
type Config struct {
	// Kernel is the kernel the machine boots directly (no firmware).
	Kernel string
	// Initrd is the initramfs; it carries the guest agent as /init.
	Initrd string
	// Cmdline holds extra kernel command line words; backends add their own
	// (console, transport and share keys from guest/api).
	Cmdline []string
	// KernelHZ is the kernel's timer rate (CONFIG_HZ, from the image's
	// manifest), or 0 when unknown. A backend that tells the kernel its
	// TSC rate can then also tell it its delay-loop calibration.
	KernelHZ int
	// CPUs and MemoryMiB size the machine.
	CPUs      int
	MemoryMiB int
	// Share is the one host folder the guest sees, or nil for none.
	Share *Share
	// Disks are block devices, attached in order (the standard image's
	// read-only root disk, a persistent writable disk). The guest finds
	// them by what is on them, never by their order or device name.
	Disks []Disk
	// Dir is a private, existing folder for the backend's runtime files
	// (sockets, pid files). It must not be shared with other machines.
	Dir string
	// ConsoleLog is the file the guest's serial console is appended to.
	ConsoleLog string
	// ReclaimMemory asks for a long-lived machine's freed guest memory to
	// go back to the host: the guest reports the pages it frees, and the
	// backend releases them (QEMU: free page reporting on a virtio
	// balloon; vz and hcs do not offer it, and ignore the field). Off for
	// a machine that lives for one command, whose boot it slows.
	ReclaimMemory bool
	// Logger receives the backend's own diagnostics; nil discards them.
	Logger *slog.Logger
}

// Share is a host folder shared into the guest at /workspace.
type Share struct {
	// HostPath must be an absolute, canonical folder (the caller validates it).
	HostPath string
	// ReadOnly is enforced by the host side of the share, not only the guest.
	ReadOnly bool
}

// Disk is a disk image file attached as a block device.
type Disk struct {
	// Path is the absolute path of the image file.
	Path string
	// ReadOnly is enforced by the hypervisor: the guest cannot write.
	ReadOnly bool
	// Format is DiskRaw or DiskRawVHD.
	Format DiskFormat
}

// DiskFormat is the layout of a disk image file.
type DiskFormat string

// Disk formats.
const (
	// DiskRaw is a plain raw disk image (QEMU and vz only).
	DiskRaw DiskFormat = "raw"
	// DiskRawVHD is a raw disk image followed by a fixed-VHD footer: raw
	// to QEMU and vz, a fixed VHD to Hyper-V.
	DiskRawVHD DiskFormat = "raw+vhd"
)

// MaxDisks bounds Config.Disks.
const MaxDisks = 4

func (d Disk) validate() error {
	switch {
	case d.Path == "" || !filepath.IsAbs(d.Path):
		return fmt.Errorf("disk path %q is not absolute", d.Path)
	case d.Format != DiskRaw && d.Format != DiskRawVHD:
		return fmt.Errorf("disk %s: unknown format %q (want %q or %q)", d.Path, d.Format, DiskRaw, DiskRawVHD)
	}
	return nil
}

// Validate checks what every backend needs; backends add their own limits.
func (c *Config) Validate() error {
	switch {
	case c.Kernel == "":
		return errors.Join(ErrInvalidConfig, errors.New("no kernel"))
	case c.Initrd == "":
		return errors.Join(ErrInvalidConfig, errors.New("no initrd"))
	case c.CPUs < 1:
		return errors.Join(ErrInvalidConfig, errors.New("at least one CPU is needed"))
	case c.MemoryMiB < 128:
		return errors.Join(ErrInvalidConfig, errors.New("at least 128 MiB of memory is needed"))
	case c.Dir == "":
		return errors.Join(ErrInvalidConfig, errors.New("no runtime folder"))
	case c.Share != nil && c.Share.HostPath == "":
		return errors.Join(ErrInvalidConfig, errors.New("share without a host folder"))
	case len(c.Disks) > MaxDisks:
		return errors.Join(ErrInvalidConfig, fmt.Errorf("%d disks, at most %d", len(c.Disks), MaxDisks))
	}
	for _, d := range c.Disks {
		if err := d.validate(); err != nil {
			return errors.Join(ErrInvalidConfig, err)
		}
	}
	return nil
}

// Log returns the configured logger, or one that discards.
func (c *Config) Log() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Machine is one virtual machine. Listen may be called before Start (the
// guest may connect as soon as it boots); Dial needs a running machine.
// All methods are safe for concurrent use. What only some backends can do
// is an optional interface (optional.go).
type Machine interface {
	// Start boots the machine and returns once the hypervisor runs it; it
	// does not wait for the guest agent (see guest/api.PortReady).
	Start(ctx context.Context) error
	// Wait blocks until the machine has stopped or ctx is done. It returns
	// nil after an orderly power-off, and an error describing the exit
	// otherwise.
	Wait(ctx context.Context) error
	// Stop asks the machine to stop and forces it off when ctx is done. It
	// returns once the machine is gone and its resources are released.
	Stop(ctx context.Context) error
	// State is the current lifecycle state.
	State() State
	// Watch delivers the current state, then every change, until ctx is
	// done or the machine reaches a final state; then the channel closes.
	Watch(ctx context.Context) <-chan State
	// Dial opens a stream to a port the guest listens on.
	Dial(ctx context.Context, port uint32) (net.Conn, error)
	// Listen accepts streams the guest opens to a host port.
	Listen(port uint32) (net.Listener, error)
	// Info describes the running machine.
	Info() Info
}

// Info describes how a machine runs, for status displays and errors.
type Info struct {
	// Backend is "qemu", "vz" or "hcs".
	Backend string
	// Accelerator is e.g. "kvm", "tcg", "hvf", "whp".
	Accelerator string
	// Machine is the hypervisor's machine type where it has a choice
	// (QEMU: "q35", "microvm" or "virt"), else "".
	Machine string
	// Transport and Share are what the guest was told to use.
	Transport string
	Share     string
	// ConsoleLog is the file the serial console goes to.
	ConsoleLog string
	// PID is the hypervisor process, when there is one.
	PID int
}
