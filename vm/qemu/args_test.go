package qemu

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
		Kernel: "/img/vmlinux", Initrd: "/img/initramfs.cpio",
		Cmdline: []string{"airlock.debug=1"},
		CPUs:    2, MemoryMiB: 1024,
		ConsoleLog: "/run/m/console.log", PIDFile: "/run/m/qemu.pid", Name: "airlock",
	}
}

func TestArgsGolden(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		for _, transport := range []api.Transport{api.TransportSerial, api.TransportVsock} {
			for _, share := range []string{"virtiofs", "9p", "9p-ro", "none"} {
				for _, accel := range []string{"tcg", "kvm"} {
					name := fmt.Sprintf("%s-%s-%s-%s", arch, transport, share, accel)
					t.Run(name, func(t *testing.T) {
						p := basePlan(arch, accel)
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
	tests := []struct {
		name string
		p    plan
		want string
	}{
		{"amd64 serial 9p ro", plan{Arch: "amd64", Transport: api.TransportSerial, Share: api.Share9P, ShareReadOnly: true, Cmdline: []string{"x=1"}},
			"console=ttyS0 quiet panic=-1 no_timer_check airlock.transport=serial airlock.share=9p airlock.share_ro=1 x=1"},
		{"arm64 vsock virtiofs", plan{Arch: "arm64", Transport: api.TransportVsock, Share: api.ShareVirtiofs},
			"console=ttyAMA0 quiet panic=-1 airlock.transport=vsock airlock.share=virtiofs"},
		{"no share", plan{Arch: "amd64", Transport: api.TransportSerial, ShareReadOnly: true},
			"console=ttyS0 quiet panic=-1 no_timer_check airlock.transport=serial"},
		{"amd64 under TCG on a host with a TSC clock", plan{Arch: "amd64", Accel: "tcg", GuestTSCkHz: 2600000, Transport: api.TransportSerial},
			"console=ttyS0 quiet panic=-1 no_timer_check tsc_early_khz=2600000 tsc=reliable airlock.transport=serial"},
		// The user's words come after the backend's, so a guest whose clock
		// misbehaves can be given tsc=unstable (README), which the kernel
		// applies after tsc=reliable.
		{"a later tsc=unstable overrides", plan{Arch: "amd64", Accel: "tcg", GuestTSCkHz: 2600000, Transport: api.TransportSerial, Cmdline: []string{"tsc=unstable"}},
			"console=ttyS0 quiet panic=-1 no_timer_check tsc_early_khz=2600000 tsc=reliable airlock.transport=serial tsc=unstable"},
		{"amd64 under KVM keeps its own clock", plan{Arch: "amd64", Accel: "kvm", GuestTSCkHz: 2600000, Transport: api.TransportSerial},
			"console=ttyS0 quiet panic=-1 no_timer_check airlock.transport=serial"},
		{"arm64 has no TSC", plan{Arch: "arm64", Accel: "tcg", GuestTSCkHz: 2600000, Transport: api.TransportSerial},
			"console=ttyAMA0 quiet panic=-1 airlock.transport=serial"},
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
		"-drive file=/state/ws/data.img,format=raw,if=none,id=disk1 -device virtio-blk-pci,drive=disk1",
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
		"-add-fd fd=9,set=3 -add-fd fd=10,set=3 -drive file=/dev/fdset/3,format=raw,if=none,id=disk1 ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("args lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "root.vhd") || strings.Contains(got, "disk.img") {
		t.Errorf("QEMU would open a disk by path:\n%s", got)
	}
}
