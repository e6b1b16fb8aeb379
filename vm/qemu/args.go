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
	// KernelHZ is the guest kernel's CONFIG_HZ (vm.Config.KernelHZ), 0
	// when unknown.
	KernelHZ int
	// Machine is the machine type the user asked for (Options.Machine,
	// $AIRLOCK_MACHINE): MachineQ35 or MachineMicrovm; "" or MachineAuto
	// lets machine choose.
	Machine string

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

	// Reclaim adds a virtio balloon with free page reporting
	// (vm.Config.ReclaimMemory).
	Reclaim bool

	// Park boots the guest to park (api.BootConfig.Park): it waits for
	// the host's Wake before it mounts the share (template.go).
	Park bool
	// QMPFD, when set, is an inherited socket QEMU serves its machine
	// protocol on (qmp.go).
	QMPFD int
	// IncomingFD, when set, is an inherited descriptor of a template's
	// machine state: QEMU waits for it (-incoming defer) until the host
	// has set the migration's capabilities and names it (load), and then
	// loads it instead of booting.
	IncomingFD int
	// RAMFD, when set, is an inherited memory file the guest's RAM lives
	// in (ram_linux.go), which the host shares: a template's memory is
	// copied out of it, and a machine started from a template finds its
	// memory there (template.go).
	RAMFD int

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
	return api.BootConfig{Transport: p.Transport, Share: p.Share, ShareReadOnly: p.ShareReadOnly && p.Share != api.ShareNone, Park: p.Park}
}

// kernelCmdline is the -append value.
func (p plan) kernelCmdline() string {
	console := "ttyS0"
	if p.Arch == "arm64" {
		console = "ttyAMA0"
	}
	words := append([]string{"console=" + console}, api.KernelArgs...)
	if p.Accel == "tcg" {
		// Under emulation the guest kernel's CPU-bug mitigations cost time
		// and protect nothing. They steer the speculation of a CPU running
		// the guest's code, and under TCG no CPU does: the host CPU runs
		// QEMU's translation of it, in which a retpoline is no longer a
		// retpoline (guest calls and returns become jumps and block lookups)
		// and a guest speculation barrier does not order the host's
		// speculation. What stays is their cost: every indirect call in the
		// kernel through a retpoline thunk, several translated blocks where
		// one would do, and the barriers, a large part of a guest's boot
		// (docs/performance.md, Figures behind the code). Under KVM, and on
		// the other backends, the guest runs on the CPU and keeps them.
		words = append(words, "mitigations=off")
	}
	if p.Arch != "arm64" {
		// Under TCG on a loaded host the kernel's check that the IO-APIC
		// timer ticks can miss and panic ("IO-APIC + timer doesn't work")
		// 0.03 s into boot; the timer is QEMU's own and works.
		words = append(words, "no_timer_check")
		// The guest keeps the TSC as its clock (tsc.go).
		if p.Accel == "tcg" && p.GuestTSCkHz > 0 {
			words = append(words, fmt.Sprintf("tsc_early_khz=%d", p.GuestTSCkHz), "tsc=reliable")
			if lpj := p.loopsPerJiffy(); lpj > 0 {
				words = append(words, fmt.Sprintf("lpj=%d", lpj))
			}
		}
	}
	words = append(words, p.bootConfig().Args()...)
	words = append(words, p.Cmdline...)
	return strings.Join(words, " ")
}

// loopsPerJiffy is the guest kernel's delay-loop calibration for its TSC
// rate: the TSC cycles in one timer tick, which is what the kernel's delay
// loop counts on a CPU with a TSC. The boot CPU works it out from the TSC
// rate it is given, but every other CPU measures it again against the timer
// tick unless the TSC is flagged constant, which QEMU's TCG CPUs never are,
// which costs a two-CPU guest's boot under TCG (docs/performance.md, Figures
// behind the code). 0 when the kernel's tick rate is unknown: a calibration
// for the wrong rate would make its delays too short or too long.
func (p plan) loopsPerJiffy() int {
	if p.GuestTSCkHz <= 0 || p.KernelHZ <= 0 {
		return 0
	}
	return p.GuestTSCkHz * 1000 / p.KernelHZ
}

// machine is the QEMU machine type. An amd64 guest under TCG whose TSC rate
// the host measured boots on microvm: no PCI bus or firmware tables to
// probe, its devices on virtio-mmio, so the guest is up ~25% sooner than on
// q35 (docs/performance.md, Image choices). microvm has no HPET or ACPI PM timer: a guest
// that has to calibrate its TSC against the PIT, and misses under TCG, has
// no reference to fall back on and hangs (the same section), so without the
// measured rate, under KVM, or when the user's kernel arguments take the
// clock into their own hands (tsc=unstable, the README's remedy for a
// misbehaving guest clock, or a clocksource=), the machine stays q35. A
// machine the user asked for wins (checkMachine refuses the combinations
// that cannot boot).
func (p plan) machine() string {
	switch {
	case p.Arch == "arm64":
		return "virt"
	case p.Machine == MachineQ35 || p.Machine == MachineMicrovm:
		return p.Machine
	case p.Accel == "tcg" && p.GuestTSCkHz > 0 && !p.userClock():
		return MachineMicrovm
	default:
		return MachineQ35
	}
}

// guestTSCkHz is the TSC rate a guest of arch is booted with under accel:
// the host's, for an amd64 guest under TCG on a host that qualifies
// (tsc.go), else 0. cacheDir remembers the host's rate (hostTSC).
func guestTSCkHz(arch, accel, cacheDir string) int {
	if arch == "amd64" && accel == "tcg" {
		return hostTSC(cacheDir)
	}
	return 0
}

// checkMachine refuses a machine the user asked for that this boot cannot
// use: microvm under TCG without the host's TSC rate hangs now and then
// (machine), so it is refused at once rather than left to the boot
// timeout.
func (p plan) checkMachine() error {
	if p.machine() == MachineMicrovm && p.Accel == "tcg" && p.GuestTSCkHz == 0 {
		return fmt.Errorf("%w: machine microvm under TCG needs the host's TSC rate, and this host's TSC is not its clock "+
			"(a guest calibrating its TSC against microvm's PIT can hang); use q35 (%s=q35, or unset for the default)",
			vm.ErrInvalidConfig, EnvMachine)
	}
	return nil
}

// userClock reports whether the user's kernel arguments choose the guest's
// clock themselves.
func (p plan) userClock() bool {
	for _, w := range p.Cmdline {
		for _, f := range strings.Fields(w) {
			name, _, _ := strings.Cut(f, "=")
			switch name {
			case "tsc", "notsc", "tsc_early_khz", "clocksource", "hpet":
				return true
			}
		}
	}
	return false
}

// device names a virtio device for the machine's bus: "virtio-rng" is
// virtio-rng-pci on q35 and virt, virtio-rng-device (virtio-mmio) on
// microvm.
func (p plan) device(virtio string) string {
	if p.machine() == MachineMicrovm {
		return virtio + "-device"
	}
	return virtio + "-pci"
}

// optValue escapes a value for QEMU's key=value option syntax, where a comma
// is written twice.
func optValue(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// args is the QEMU command line (without the binary).
func (p plan) args() []string {
	a := []string{"-name", optValue(p.Name)}
	switch machine := p.machine(); machine {
	case "virt":
		a = append(a, "-M", "virt,gic-version=max,accel="+p.Accel+p.ramBackend())
	case MachineMicrovm:
		// The defaults keep what the guest needs: ACPI (a hardware-reduced
		// table set whose sleep register powers the machine off, so the
		// guest's power-off ends QEMU), the ISA serial port (ttyS0), and
		// the PIT and PIC (which the kernel's timer setup still uses). The
		// virtio-mmio devices reach the guest in ACPI's DSDT. Their
		// transport is the modern one (virtio 1.0): on QEMU's legacy
		// default, virtiofs mounts but its first request never completes.
		// microvm takes no -numa: virtiofs's shared memory is its machine
		// memory.
		m := "microvm,accel=" + p.Accel
		if p.Share == api.ShareVirtiofs {
			m += ",memory-backend=mem"
		}
		a = append(a, "-M", m+p.ramBackend(), "-global", "virtio-mmio.force-legacy=false")
	default:
		a = append(a, "-M", machine+",accel="+p.Accel+p.ramBackend())
	}
	if cpu := p.cpu(); cpu != "" {
		a = append(a, "-cpu", cpu)
	}
	a = append(a,
		"-smp", strconv.Itoa(p.CPUs),
		"-m", strconv.Itoa(p.MemoryMiB)+"M",
	)
	if p.RAMFD > 0 {
		// QEMU maps the file shared, so the host sees the guest's memory;
		// it reopens it through /proc/self/fd (a memfd's mode lets any
		// user, QEMU running as the folder's owner among them).
		a = append(a, "-object", fmt.Sprintf("memory-backend-file,id=ram,size=%dM,share=on,mem-path=/proc/self/fd/%d", p.MemoryMiB, p.RAMFD))
	}
	a = append(a,
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
		"-device", p.device("virtio-rng"),
	)
	if p.Reclaim {
		// Free page reporting: the guest tells QEMU which of its pages are
		// free (2 MiB blocks, seconds after they were freed) and QEMU gives
		// them back to the host, so a long-lived VM holds what its guest uses
		// now, not the most it ever used. The balloon itself is never
		// inflated. Only on request: a boot with the device is ready later
		// under TCG, for a cost found neither in the kernel's device probe
		// nor before init (docs/performance.md, Figures behind the code).
		a = append(a, "-device", p.device("virtio-balloon")+",free-page-reporting=on")
	}
	switch p.Transport {
	case api.TransportVsock:
		dev := fmt.Sprintf("%s,guest-cid=%d", p.device("vhost-vsock"), p.CID)
		if p.VhostFD > 0 {
			dev += fmt.Sprintf(",vhostfd=%d", p.VhostFD)
		}
		a = append(a, "-device", dev)
	case api.TransportSerial:
		a = append(a,
			"-device", p.device("virtio-serial"),
			"-chardev", fmt.Sprintf("socket,id=mux,fd=%d", p.MuxFD),
			"-device", "virtserialport,chardev=mux,name="+api.SerialPortName,
		)
	}
	switch p.Share {
	case api.ShareVirtiofs:
		a = append(a,
			"-chardev", "socket,id=vfs,path="+optValue(p.VirtiofsSocket),
			"-device", p.device("vhost-user-fs")+",chardev=vfs,tag="+api.WorkspaceTag,
			// vhost-user needs guest memory the daemon can map.
			"-object", fmt.Sprintf("memory-backend-memfd,id=mem,size=%dM,share=on", p.MemoryMiB),
		)
		if p.machine() != MachineMicrovm {
			a = append(a, "-numa", "node,memdev=mem")
		}
	case api.Share9P:
		fsdev := "local,id=fs0,path=" + optValue(p.SharePath) + ",security_model=" + p.SecurityModel
		if p.ShareReadOnly {
			fsdev += ",readonly=on"
		}
		a = append(a,
			"-fsdev", fsdev,
			"-device", p.device("virtio-9p")+",fsdev=fs0,mount_tag="+api.WorkspaceTag,
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
		} else {
			// The host's lock (app/sandbox's LockDataDisk, LockLayerDisk)
			// keeps a second VM off a writable disk. QEMU's own (OFD
			// locks on the file) could not be taken again when a machine
			// resumed after saving its template ("Failed to get write
			// lock" at cont: the migration had dropped it, and the
			// fdset's other descriptor of the same file conflicts).
			// discard=unmap: what the guest discards (the changes layer
			// is mounted with discard) becomes a hole in the sparse file
			// again, so what the guest wrote and deleted takes no space
			// on the host.
			drive += ",file.locking=off,discard=unmap"
		}
		a = append(a, "-drive", drive, "-device", fmt.Sprintf("%s,drive=disk%d", p.device("virtio-blk"), i))
	}
	if p.QMPFD > 0 {
		a = append(a, "-chardev", fmt.Sprintf("socket,id=qmp,fd=%d", p.QMPFD), "-mon", "chardev=qmp,mode=control")
	}
	if p.IncomingFD > 0 {
		a = append(a, "-incoming", "defer")
	}
	if p.PIDFile != "" {
		a = append(a, "-pidfile", p.PIDFile)
	}
	return a
}

// ramBackend is the -M option that puts the guest's RAM in its memory file.
func (p plan) ramBackend() string {
	if p.RAMFD > 0 {
		return ",memory-backend=ram"
	}
	return ""
}

// cpu picks the CPU model: the host's under KVM. Under TCG, arm64 needs "max"
// (virt's default CPU is 32-bit). amd64 keeps QEMU's default model (qemu64),
// which boots the guest to Ready faster than "max" (max makes TCG emulate
// more features; docs/performance.md, Figures behind the code), with one
// feature added: ARAT, the local APIC timer that keeps running in deep idle
// states (TCG emulates it, and KVM's host model has it). Without it the guest
// kernel may stop the timer tick of an idle CPU only with a broadcast timer
// to wake it, which microvm lacks (no HPET, no PIT): the tick then never
// stops and high-resolution timers never start, so an idle guest takes 1000
// timer interrupts a second on each CPU and QEMU emulates every one: an idle
// guest costs a host core a large share of its time without ARAT and about 1
// % with it (docs/performance.md, Figures behind the code).
func (p plan) cpu() string {
	switch {
	case p.CPU != "":
		return p.CPU
	case p.Accel == "kvm":
		return "host"
	case p.Arch == "arm64":
		return "max"
	default:
		return "qemu64,+arat"
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
