package qemu

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/vm"
)

// plan is everything the QEMU command line depends on, resolved: no
// defaults, no probing, no file system. args turns it into arguments.
type plan struct {
	Arch  string // "amd64" or "arm64"
	Accel string // "kvm" or "tcg"
	// CPU overrides the -cpu model; empty picks one by Arch and Accel.
	CPU string
	// GuestTSCkHz is the rate of an amd64 guest's TSC under TCG (the
	// host's, see tsc.go) when the host's TSC is a clock; the guest is then
	// told the rate and keeps the TSC as its clock. 0 leaves the guest to
	// calibrate it.
	GuestTSCkHz int

	Kernel, Initrd string
	Cmdline        []string
	CPUs           int
	MemoryMiB      int
	ConsoleLog     string
	// ConsoleFD, when set, is an inherited descriptor QEMU writes the
	// console to instead of opening ConsoleLog.
	ConsoleFD int
	PIDFile   string
	Name      string

	Transport api.Transport // TransportSerial or TransportVsock
	MuxFD     int           // serial: the socket's descriptor number in QEMU
	CID       uint32        // vsock: the guest's context id
	VhostFD   int           // vsock: an inherited /dev/vhost-vsock descriptor, else 0 (QEMU opens it)

	Share          api.ShareFS // ShareNone, ShareVirtiofs or Share9P
	SharePath      string
	ShareReadOnly  bool
	VirtiofsSocket string
	// SecurityModel is the 9p security model, as chooseShare decided:
	// "none" (files belong to the user running QEMU), "mapped-xattr" (guest
	// owners and modes in xattrs, plain files on the host) or
	// "passthrough" (read-only).
	SecurityModel string

	// Disks are attached as virtio-blk devices, in order.
	Disks []vm.Disk
	// DiskFDs, when set, holds for each disk the inherited descriptors
	// QEMU uses through an fdset instead of opening the path (QEMU started
	// as the folder's owner may not reach a disk in Airlock's state
	// folder): one read-only, and for a writable disk one read-write too,
	// as QEMU opens a writable image both ways.
	DiskFDs [][]int
}

// bootConfig is what the guest is told about the devices.
func (p plan) bootConfig() api.BootConfig {
	return api.BootConfig{Transport: p.Transport, Share: p.Share, ShareReadOnly: p.ShareReadOnly && p.Share != api.ShareNone}
}

// kernelCmdline is the -append value.
func (p plan) kernelCmdline() string {
	console := "ttyS0"
	if p.Arch == "arm64" {
		console = "ttyAMA0"
	}
	words := []string{"console=" + console, "quiet", "panic=-1"}
	if p.Arch != "arm64" {
		// Under TCG on a loaded host the kernel's check that the IO-APIC
		// timer ticks can miss and panic ("IO-APIC + timer doesn't work")
		// 0.03 s into boot; the timer is QEMU's own and works.
		words = append(words, "no_timer_check")
		// The guest keeps the TSC as its clock (tsc.go).
		if p.Accel == "tcg" && p.GuestTSCkHz > 0 {
			words = append(words, fmt.Sprintf("tsc_early_khz=%d", p.GuestTSCkHz), "tsc=reliable")
		}
	}
	words = append(words, p.bootConfig().Args()...)
	words = append(words, p.Cmdline...)
	return strings.Join(words, " ")
}

// optValue escapes a value for QEMU's key=value option syntax, where a comma
// is written twice.
func optValue(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// args is the QEMU command line (without the binary).
func (p plan) args() []string {
	a := []string{"-name", optValue(p.Name)}
	switch p.Arch {
	case "arm64":
		a = append(a, "-M", "virt,gic-version=max,accel="+p.Accel)
	default:
		a = append(a, "-M", "q35,accel="+p.Accel)
	}
	if cpu := p.cpu(); cpu != "" {
		a = append(a, "-cpu", cpu)
	}
	a = append(a,
		"-smp", strconv.Itoa(p.CPUs),
		"-m", strconv.Itoa(p.MemoryMiB)+"M",
		// No default devices, no config files, no display, and no network
		// card at all: the guest's only way out is the host's gate.
		"-nodefaults", "-no-user-config", "-nographic", "-display", "none",
		"-no-reboot", "-nic", "none",
		"-kernel", p.Kernel,
	)
	if p.Initrd != "" {
		a = append(a, "-initrd", p.Initrd)
	}
	console := optValue(p.ConsoleLog)
	if p.ConsoleFD > 0 {
		a = append(a, "-add-fd", fmt.Sprintf("fd=%d,set=1", p.ConsoleFD))
		console = "/dev/fdset/1"
	}
	a = append(a, "-append", p.kernelCmdline(),
		"-chardev", "file,id=con,path="+console+",append=on",
		"-serial", "chardev:con",
		"-device", "virtio-rng-pci",
	)
	switch p.Transport {
	case api.TransportVsock:
		dev := fmt.Sprintf("vhost-vsock-pci,guest-cid=%d", p.CID)
		if p.VhostFD > 0 {
			dev += fmt.Sprintf(",vhostfd=%d", p.VhostFD)
		}
		a = append(a, "-device", dev)
	case api.TransportSerial:
		a = append(a,
			"-device", "virtio-serial-pci",
			"-chardev", fmt.Sprintf("socket,id=mux,fd=%d", p.MuxFD),
			"-device", "virtserialport,chardev=mux,name="+api.SerialPortName,
		)
	}
	switch p.Share {
	case api.ShareVirtiofs:
		a = append(a,
			"-chardev", "socket,id=vfs,path="+optValue(p.VirtiofsSocket),
			"-device", "vhost-user-fs-pci,chardev=vfs,tag="+api.WorkspaceTag,
			// vhost-user needs guest memory the daemon can map.
			"-object", fmt.Sprintf("memory-backend-memfd,id=mem,size=%dM,share=on", p.MemoryMiB),
			"-numa", "node,memdev=mem",
		)
	case api.Share9P:
		fsdev := "local,id=fs0,path=" + optValue(p.SharePath) + ",security_model=" + p.SecurityModel
		if p.ShareReadOnly {
			fsdev += ",readonly=on"
		}
		a = append(a,
			"-fsdev", fsdev,
			"-device", "virtio-9p-pci,fsdev=fs0,mount_tag="+api.WorkspaceTag,
		)
	}
	for i, d := range p.Disks {
		// Both formats are raw to QEMU (a VHD footer is just 512 bytes
		// past the file system); readonly=on makes QEMU refuse writes and
		// open the file read-only, so one image serves many VMs.
		file := d.Path
		if i < len(p.DiskFDs) && len(p.DiskFDs[i]) > 0 {
			set := 2 + i // fdset 1 is the console's
			for _, fd := range p.DiskFDs[i] {
				a = append(a, "-add-fd", fmt.Sprintf("fd=%d,set=%d", fd, set))
			}
			file = fmt.Sprintf("/dev/fdset/%d", set)
		}
		drive := fmt.Sprintf("file=%s,format=raw,if=none,id=disk%d", optValue(file), i)
		if d.ReadOnly {
			drive += ",readonly=on"
		}
		a = append(a, "-drive", drive, "-device", fmt.Sprintf("virtio-blk-pci,drive=disk%d", i))
	}
	if p.PIDFile != "" {
		a = append(a, "-pidfile", p.PIDFile)
	}
	return a
}

// cpu picks the CPU model: the host's under KVM. Under TCG, arm64 needs
// "max" (virt's default CPU is 32-bit); amd64 keeps QEMU's default
// (qemu64), which boots the guest to Ready ~8% faster than "max" (3.45 s
// against 3.75 s here: max makes TCG emulate more features).
func (p plan) cpu() string {
	switch {
	case p.CPU != "":
		return p.CPU
	case p.Accel == "kvm":
		return "host"
	case p.Arch == "arm64":
		return "max"
	default:
		return ""
	}
}

// binaryFor is the QEMU system emulator for a guest architecture.
func binaryFor(arch string) string {
	if arch == "arm64" {
		return "qemu-system-aarch64"
	}
	return "qemu-system-x86_64"
}

// packageFor is the Debian/Ubuntu package that ships binaryFor(arch).
func packageFor(arch string) string {
	if arch == "arm64" {
		return "qemu-system-arm"
	}
	return "qemu-system-x86"
}
