package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/vm"
)

// UPDATE_GOLDEN=1 go test ./vm/qemu rewrites testdata/*.golden.
var update = os.Getenv("UPDATE_GOLDEN") != ""

func basePlan(arch, accel string) plan {
	return plan{
		Arch: arch, Accel: accel,
		Kernel: "/img/vmlinux", Initrd: "/img/initramfs.cpio", KernelHZ: 250,
		Cmdline: []string{"airlock.debug=1"},
		CPUs:    2, MemoryMiB: 1024,
		ConsoleLog: "/run/m/console.log", PIDFile: "/run/m/qemu.pid", Name: "airlock",
	}
}

func TestArgsGolden(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		for _, transport := range []api.Transport{api.TransportSerial, api.TransportVsock} {
			for _, share := range []string{"virtiofs", "9p", "9p-ro", "none"} {
				// tcg-tsc: TCG on a host whose TSC rate was measured,
				// which boots amd64 on microvm.
				for _, accel := range []string{"tcg", "kvm", "tcg-tsc"} {
					if accel == "tcg-tsc" && arch != "amd64" {
						continue
					}
					name := fmt.Sprintf("%s-%s-%s-%s", arch, transport, share, accel)
					t.Run(name, func(t *testing.T) {
						p := basePlan(arch, strings.TrimSuffix(accel, "-tsc"))
						if accel == "tcg-tsc" {
							p.GuestTSCkHz = 2600000
						}
						p.Transport, p.MuxFD, p.CID = transport, 3, 42
						switch share {
						case "virtiofs":
							p.Share, p.SharePath, p.VirtiofsSocket = api.ShareVirtiofs, "/home/u/proj", "/run/m/virtiofsd.sock"
						case "9p", "9p-ro":
							p.Share, p.SharePath, p.SecurityModel = api.Share9P, "/home/u/proj,x", "passthrough"
							p.ShareReadOnly = share == "9p-ro"
						}
						got := p.args()
						checkInvariants(t, p, got)
						golden(t, name, formatArgs(got))
					})
				}
			}
		}
	}
}

// TestArgsTemplateGolden: a parking guest's memory is a shared memory
// file (RAMFD), on each machine type, and a machine started from a
// template waits for the host to name its state (-incoming defer).
func TestArgsTemplateGolden(t *testing.T) {
	for _, tc := range []struct{ arch, accel string }{{"amd64", "tcg"}, {"amd64", "tcg-tsc"}, {"arm64", "tcg"}} {
		name := fmt.Sprintf("%s-serial-9p-%s-template", tc.arch, tc.accel)
		t.Run(name, func(t *testing.T) {
			p := basePlan(tc.arch, strings.TrimSuffix(tc.accel, "-tsc"))
			if tc.accel == "tcg-tsc" {
				p.GuestTSCkHz = 2600000
			}
			p.Transport, p.MuxFD = api.TransportSerial, 3
			p.Share, p.SharePath, p.SecurityModel = api.Share9P, "/home/u/proj", "none"
			p.Park, p.QMPFD, p.IncomingFD, p.RAMFD = true, 4, 5, 6
			got := p.args()
			checkInvariants(t, p, got)
			a := joinArgs(got)
			for _, want := range []string{",memory-backend=ram", "-object memory-backend-file,id=ram,size=" + strconv.Itoa(p.MemoryMiB) + "M,share=on,mem-path=/proc/self/fd/6", "-incoming defer"} {
				if !strings.Contains(a, want) {
					t.Errorf("no %q in %s", want, a)
				}
			}
			golden(t, name, formatArgs(got))
		})
	}
}

// checkInvariants holds for every command line, golden or not.
func checkInvariants(t *testing.T, p plan, a []string) {
	t.Helper()
	for _, must := range []string{"-nodefaults", "-no-user-config", "-no-reboot", "-nographic"} {
		if !slices.Contains(a, must) {
			t.Errorf("missing %s", must)
		}
	}
	// No network device, ever.
	if i := slices.Index(a, "-nic"); i < 0 || a[i+1] != "none" {
		t.Error("missing -nic none")
	}
	for i, w := range a {
		if w == "-netdev" || w == "-net" || (i > 0 && a[i-1] == "-device" && (strings.Contains(w, "net") || strings.Contains(w, "e1000"))) {
			t.Errorf("network device in the command line: %s %s", a[i-1], w)
		}
	}
	app := a[slices.Index(a, "-append")+1]
	for _, w := range p.bootConfig().Args() {
		if !strings.Contains(app, w) {
			t.Errorf("-append lacks %s", w)
		}
	}
	if p.ShareReadOnly && !strings.Contains(strings.Join(a, " "), "readonly=on") {
		t.Error("read-only share without readonly=on")
	}
}

// formatArgs writes one option and its value per line, shell-quoted.
func formatArgs(a []string) string {
	var lines []string
	for i := 0; i < len(a); i++ {
		line := a[i]
		if i+1 < len(a) && !strings.HasPrefix(a[i+1], "-") {
			i++
			v := a[i]
			if strings.Contains(v, " ") {
				v = "'" + v + "'"
			}
			line += " " + v
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, " \\\n  ") + "\n"
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (UPDATE_GOLDEN=1 writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (UPDATE_GOLDEN=1 rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestKernelCmdline(t *testing.T) {
	// Every backend's words (api.KernelArgs) follow the console; the cases
	// spell out what this backend adds after them.
	want := func(console, rest string) string {
		return "console=" + console + " " + strings.Join(api.KernelArgs, " ") + " " + rest
	}
	tests := []struct {
		name string
		p    plan
		want string
	}{
		{"amd64 serial 9p ro", plan{Arch: "amd64", Transport: api.TransportSerial, Share: api.Share9P, ShareReadOnly: true, Cmdline: []string{"x=1"}},
			want("ttyS0", "no_timer_check airlock.transport=serial airlock.share=9p airlock.share_ro=1 x=1")},
		{"arm64 vsock virtiofs", plan{Arch: "arm64", Transport: api.TransportVsock, Share: api.ShareVirtiofs},
			want("ttyAMA0", "airlock.transport=vsock airlock.share=virtiofs")},
		{"no share", plan{Arch: "amd64", Transport: api.TransportSerial, ShareReadOnly: true},
			want("ttyS0", "no_timer_check airlock.transport=serial")},
		{"amd64 under TCG on a host with a TSC clock", plan{Arch: "amd64", Accel: "tcg", GuestTSCkHz: 2600000, Transport: api.TransportSerial},
			want("ttyS0", "mitigations=off no_timer_check tsc_early_khz=2600000 tsc=reliable airlock.transport=serial")},
		// The user's words come after the backend's, so a guest whose clock
		// misbehaves can be given tsc=unstable (README), which the kernel
		// applies after tsc=reliable.
		{"a later tsc=unstable overrides", plan{Arch: "amd64", Accel: "tcg", GuestTSCkHz: 2600000, Transport: api.TransportSerial, Cmdline: []string{"tsc=unstable"}},
			want("ttyS0", "mitigations=off no_timer_check tsc_early_khz=2600000 tsc=reliable airlock.transport=serial tsc=unstable")},
		{"amd64 under KVM keeps its own clock", plan{Arch: "amd64", Accel: "kvm", GuestTSCkHz: 2600000, Transport: api.TransportSerial},
			want("ttyS0", "no_timer_check airlock.transport=serial")},
		// With the kernel's tick rate the calibration goes too: the TSC
		// cycles per tick, 2600000 kHz at 250 Hz and at 1000 Hz.
		{"the delay loop's calibration at 250 Hz", plan{Arch: "amd64", Accel: "tcg", GuestTSCkHz: 2600000, KernelHZ: 250, Transport: api.TransportSerial},
			want("ttyS0", "mitigations=off no_timer_check tsc_early_khz=2600000 tsc=reliable lpj=10400000 airlock.transport=serial")},
		{"the delay loop's calibration at 1000 Hz", plan{Arch: "amd64", Accel: "tcg", GuestTSCkHz: 2600000, KernelHZ: 1000, Transport: api.TransportSerial},
			want("ttyS0", "mitigations=off no_timer_check tsc_early_khz=2600000 tsc=reliable lpj=2600000 airlock.transport=serial")},
		{"no calibration without the TSC rate", plan{Arch: "amd64", Accel: "tcg", KernelHZ: 250, Transport: api.TransportSerial},
			want("ttyS0", "mitigations=off no_timer_check airlock.transport=serial")},
		{"no calibration under KVM", plan{Arch: "amd64", Accel: "kvm", GuestTSCkHz: 2600000, KernelHZ: 250, Transport: api.TransportSerial},
			want("ttyS0", "no_timer_check airlock.transport=serial")},
		{"arm64 has no TSC", plan{Arch: "arm64", Accel: "tcg", GuestTSCkHz: 2600000, KernelHZ: 250, Transport: api.TransportSerial},
			want("ttyAMA0", "mitigations=off airlock.transport=serial")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.kernelCmdline(); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			if _, err := api.ParseCmdline(tt.p.kernelCmdline()); err != nil {
				t.Errorf("guest cannot parse it: %v", err)
			}
		})
	}
}

func TestBinaryAndPackage(t *testing.T) {
	if binaryFor("arm64") != "qemu-system-aarch64" || packageFor("arm64") != "qemu-system-arm" ||
		binaryFor("amd64") != "qemu-system-x86_64" || packageFor("amd64") != "qemu-system-x86" {
		t.Error("binary or package names")
	}
}

// TestArgsHandedOver: QEMU started as the folder's owner gets the console
// as an inherited descriptor (an fdset it never reopens), vhost-vsock as a
// descriptor too, and no pidfile.
func TestArgsHandedOver(t *testing.T) {
	p := basePlan("amd64", "tcg")
	p.Transport, p.CID, p.VhostFD, p.ConsoleFD, p.PIDFile = api.TransportVsock, 42, 8, 7, ""
	p.Kernel, p.Initrd = "/proc/self/fd/3", "/proc/self/fd/4"
	p.Share, p.SharePath, p.SecurityModel = api.Share9P, "/proc/self/fd/5", modelNone
	got := formatArgs(p.args())
	for _, want := range []string{
		"-add-fd fd=7,set=1", "-chardev file,id=con,path=/dev/fdset/1,append=on",
		"-device vhost-vsock-pci,guest-cid=42,vhostfd=8",
		"-kernel /proc/self/fd/3", "-initrd /proc/self/fd/4",
		"-fsdev local,id=fs0,path=/proc/self/fd/5,security_model=none",
	} {
		if !strings.Contains(strings.ReplaceAll(got, "\n", " "), want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if strings.Contains(got, "-pidfile") || strings.Contains(got, "console.log") {
		t.Errorf("QEMU would open a runtime file itself:\n%s", got)
	}
}

func TestArgsDisks(t *testing.T) {
	p := basePlan("amd64", "tcg")
	p.Disks = []vm.Disk{
		{Path: "/img/std,1/root.vhd", ReadOnly: true, Format: vm.DiskRawVHD},
		{Path: "/state/ws/data.img", Format: vm.DiskRaw},
	}
	got := strings.Join(p.args(), " ")
	for _, want := range []string{
		"-drive file=/img/std,,1/root.vhd,format=raw,if=none,id=disk0,readonly=on -device virtio-blk-pci,drive=disk0",
		"-drive file=/state/ws/data.img,format=raw,if=none,id=disk1,file.locking=off,discard=unmap -device virtio-blk-pci,drive=disk1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("args lack %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "readonly=on") != 1 {
		t.Errorf("only the first disk is read-only:\n%s", got)
	}
}

// TestArgsDiskFDs: QEMU started as the folder's owner gets each disk as an
// fdset of an inherited descriptor, never a path it would open itself.
func TestArgsDiskFDs(t *testing.T) {
	p := basePlan("amd64", "tcg")
	p.ConsoleFD = 7
	p.Disks = []vm.Disk{
		{Path: "/img/root.vhd", ReadOnly: true, Format: vm.DiskRawVHD},
		{Path: "/root/.local/state/airlock/disk.img", Format: vm.DiskRaw},
	}
	p.DiskFDs = [][]int{{8}, {9, 10}}
	got := strings.Join(p.args(), " ")
	for _, want := range []string{
		"-add-fd fd=7,set=1",
		"-add-fd fd=8,set=2 -drive file=/dev/fdset/2,format=raw,if=none,id=disk0,readonly=on",
		"-add-fd fd=9,set=3 -add-fd fd=10,set=3 -drive file=/dev/fdset/3,format=raw,if=none,id=disk1,file.locking=off,discard=unmap ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("args lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "root.vhd") || strings.Contains(got, "disk.img") {
		t.Errorf("QEMU would open a disk by path:\n%s", got)
	}
}

func TestMachineChoice(t *testing.T) {
	tests := []struct {
		name    string
		arch    string
		accel   string
		tsc     int
		cmdline []string
		want    string
		asked   string // plan.Machine: the user's choice
		refused bool   // checkMachine refuses it
	}{
		{"amd64 TCG with the host's TSC rate", "amd64", "tcg", 2600000, nil, "microvm", "", false},
		{"unrelated kernel arguments", "amd64", "tcg", 2600000, []string{"airlock.debug=1", "loglevel=7"}, "microvm", "", false},
		{"amd64 TCG, host TSC not a clock", "amd64", "tcg", 0, nil, "q35", "", false},
		{"amd64 KVM", "amd64", "kvm", 2600000, nil, "q35", "", false},
		{"amd64 KVM without a rate", "amd64", "kvm", 0, nil, "q35", "", false},
		{"arm64", "arm64", "tcg", 2600000, nil, "virt", "", false},
		{"arm64 KVM", "arm64", "kvm", 0, nil, "virt", "", false},
		// The README's remedy for a guest clock that misbehaves: the guest
		// then has no clock but jiffies on microvm, so it gets q35's HPET.
		{"user's tsc=unstable", "amd64", "tcg", 2600000, []string{"tsc=unstable"}, "q35", "", false},
		{"user's clocksource", "amd64", "tcg", 2600000, []string{"clocksource=hpet"}, "q35", "", false},
		{"user's notsc among others", "amd64", "tcg", 2600000, []string{"loglevel=7 notsc"}, "q35", "", false},
		{"user's own TSC rate", "amd64", "tcg", 2600000, []string{"tsc_early_khz=1000000"}, "q35", "", false},
		// A machine asked for ($AIRLOCK_MACHINE) wins where it can boot.
		{"q35 asked for", "amd64", "tcg", 2600000, nil, "q35", MachineQ35, false},
		{"auto asked for", "amd64", "tcg", 2600000, nil, "microvm", MachineAuto, false},
		{"microvm asked for under KVM", "amd64", "kvm", 0, nil, "microvm", MachineMicrovm, false},
		{"microvm asked for with the user's clock", "amd64", "tcg", 2600000, []string{"clocksource=hpet"}, "microvm", MachineMicrovm, false},
		{"microvm asked for, host TSC not a clock", "amd64", "tcg", 0, nil, "microvm", MachineMicrovm, true},
		{"microvm asked for on arm64", "arm64", "tcg", 0, nil, "virt", MachineMicrovm, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := basePlan(tt.arch, tt.accel)
			p.GuestTSCkHz, p.Cmdline, p.Transport, p.Machine = tt.tsc, tt.cmdline, api.TransportSerial, tt.asked
			if got := p.machine(); got != tt.want {
				t.Errorf("machine %s, want %s", got, tt.want)
			}
			if err := p.checkMachine(); (err != nil) != tt.refused || (err != nil && !errors.Is(err, vm.ErrInvalidConfig)) {
				t.Errorf("checkMachine: %v, want refused %v", err, tt.refused)
			}
			a := p.args()
			if m := a[slices.Index(a, "-M")+1]; !strings.HasPrefix(m, tt.want+",") {
				t.Errorf("-M %s, want %s", m, tt.want)
			}
		})
	}
}

// TestArgsDevicesPerMachine: every virtio device is on the machine's bus,
// virtio-mmio (-device) on microvm and PCI (-pci) elsewhere, with every
// device the product attaches present on both.
func TestArgsDevicesPerMachine(t *testing.T) {
	virtio := []string{"virtio-rng", "virtio-serial", "vhost-vsock", "vhost-user-fs", "virtio-9p", "virtio-blk"}
	for _, tsc := range []int{0, 2600000} {
		for _, transport := range []api.Transport{api.TransportSerial, api.TransportVsock} {
			for _, share := range []api.ShareFS{api.ShareVirtiofs, api.Share9P, api.ShareNone} {
				p := basePlan("amd64", "tcg")
				p.GuestTSCkHz, p.Transport, p.MuxFD, p.CID = tsc, transport, 3, 42
				p.Share, p.SharePath, p.VirtiofsSocket, p.SecurityModel = share, "/home/u/proj", "/run/m/vfs.sock", modelNone
				p.Disks = []vm.Disk{{Path: "/img/root.vhd", ReadOnly: true}, {Path: "/state/data.img"}}
				bus, other, machine := "-pci", "-device", "q35"
				if tsc > 0 {
					bus, other, machine = "-device", "-pci", "microvm"
				}
				t.Run(fmt.Sprintf("%s-%s-%s", machine, transport, share), func(t *testing.T) {
					a := p.args()
					checkInvariants(t, p, a)
					var devs []string
					for i, w := range a {
						if i > 0 && a[i-1] == "-device" {
							name, _, _ := strings.Cut(w, ",")
							devs = append(devs, name)
						}
					}
					for _, d := range devs {
						for _, v := range virtio {
							if d == v+other {
								t.Errorf("%s on %s", d, machine)
							}
						}
					}
					want := []string{"virtio-rng" + bus, "virtio-blk" + bus}
					switch transport {
					case api.TransportSerial:
						want = append(want, "virtio-serial"+bus, "virtserialport")
					case api.TransportVsock:
						want = append(want, "vhost-vsock"+bus)
					}
					switch share {
					case api.ShareVirtiofs:
						want = append(want, "vhost-user-fs"+bus)
					case api.Share9P:
						want = append(want, "virtio-9p"+bus)
					}
					for _, w := range want {
						if !slices.Contains(devs, w) {
							t.Errorf("no %s among %v", w, devs)
						}
					}
					if n := strings.Count(strings.Join(devs, " "), "virtio-blk"+bus); n != 2 {
						t.Errorf("%d disks, want 2: %v", n, devs)
					}
					// The console is the ISA serial port (ttyS0) on both.
					if i := slices.Index(a, "-serial"); i < 0 || a[i+1] != "chardev:con" {
						t.Error("no serial console")
					}
					// virtiofs's shared memory: a NUMA node on q35, the
					// machine's memory on microvm (which takes no -numa).
					m := a[slices.Index(a, "-M")+1]
					hasNUMA := slices.Contains(a, "-numa")
					switch {
					case share == api.ShareVirtiofs && machine == "q35" && !hasNUMA:
						t.Error("virtiofs on q35 without its NUMA node")
					case share == api.ShareVirtiofs && machine == "microvm" && (hasNUMA || !strings.Contains(m, "memory-backend=mem")):
						t.Errorf("virtiofs on microvm: -M %s, -numa %v", m, hasNUMA)
					case share != api.ShareVirtiofs && (hasNUMA || strings.Contains(m, "memory-backend")):
						t.Errorf("shared memory without virtiofs: -M %s", m)
					}
					// Nothing turns off what the guest needs: ACPI (its
					// power-off ends QEMU) and the ISA serial port.
					if strings.Contains(m, "acpi=off") || strings.Contains(m, "isa-serial=off") {
						t.Errorf("-M %s", m)
					}
					// virtiofs hangs on legacy virtio-mmio.
					modern := strings.Contains(strings.Join(a, " "), "-global virtio-mmio.force-legacy=false")
					if modern != (machine == "microvm") {
						t.Errorf("modern virtio-mmio %v on %s", modern, machine)
					}
				})
			}
		}
	}
}

// TestArgsReclaim: free page reporting only when asked, on the machine's
// own bus.
func TestArgsReclaim(t *testing.T) {
	for _, c := range []struct {
		arch, accel string
		tscKHz      int
		want        string
	}{
		{"amd64", "tcg", 2600000, "virtio-balloon-device,free-page-reporting=on"}, // microvm
		{"amd64", "tcg", 0, "virtio-balloon-pci,free-page-reporting=on"},          // q35
		{"amd64", "kvm", 0, "virtio-balloon-pci,free-page-reporting=on"},
		{"arm64", "tcg", 0, "virtio-balloon-pci,free-page-reporting=on"}, // virt
	} {
		p := basePlan(c.arch, c.accel)
		p.GuestTSCkHz = c.tscKHz
		balloons := func(a []string) (n int, dev string) {
			for i, w := range a {
				if w == "-device" && strings.HasPrefix(a[i+1], "virtio-balloon") {
					n, dev = n+1, a[i+1]
				}
			}
			return n, dev
		}
		if n, dev := balloons(p.args()); n != 0 {
			t.Errorf("%s/%s: a balloon without Reclaim: %s", c.arch, p.machine(), dev)
		}
		p.Reclaim = true
		if n, dev := balloons(p.args()); n != 1 || dev != c.want {
			t.Errorf("%s/%s: %d balloons, %q; want one, %q", c.arch, p.machine(), n, dev, c.want)
		}
	}
}
