package hcs

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// UPDATE_GOLDEN=1 go test ./vm/hcs rewrites testdata/*.json.
var update = os.Getenv("UPDATE_GOLDEN") != ""

const testSID = "S-1-5-21-1004336348-1177238915-682003330-1001"

func baseSpec() Spec {
	return Spec{
		Arch:        "amd64",
		Kernel:      `C:\Program Files\Airlock\images\amd64\vmlinuz`,
		Initrd:      `C:\Program Files\Airlock\images\amd64\initramfs.cpio.gz`,
		Cmdline:     []string{"airlock.uid=1000", "airlock.gid=1000"},
		CPUs:        2,
		MemoryMiB:   1024,
		ConsolePipe: ConsolePipePrefix + testSID + "-00112233445566778899aabbccddeeff",
		UserSID:     testSID,
	}
}

func TestDocumentGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Spec)
	}{
		{"amd64-no-share", func(*Spec) {}},
		{"amd64-share", func(s *Spec) { s.Share = true }},
		{"amd64-share-ro", func(s *Spec) { s.Share, s.ShareReadOnly = true, true }},
		{"amd64-standard-disks", func(s *Spec) {
			s.Share = true
			s.Cmdline = append(s.Cmdline, "airlock.root=airlock-root", "airlock.root_keep=1")
			s.Disks = []Disk{
				{Path: `C:\Program Files\Airlock\images\standard\amd64\root.vhd`, ReadOnly: true},
				{Path: `C:\Users\alice\AppData\Local\Airlock\state\disks\0123456789abcdef\data.vhd`},
			}
		}},
		// Changes held (api.BootConfig.Changes): the folder read-only at
		// the Plan9 server, the layer disk writable on SCSI.
		{"amd64-changes-layer", func(s *Spec) {
			s.Share, s.ShareReadOnly = true, true
			s.Cmdline = append(s.Cmdline, "airlock.changes=1")
			s.Disks = []Disk{{Path: `C:\Users\alice\AppData\Local\Airlock\state\changes\0123456789abcdef\layer.vhd`}}
		}},
		{"arm64-share-odd-memory-no-console", func(s *Spec) {
			s.Arch, s.Share, s.MemoryMiB, s.CPUs, s.ConsolePipe = "arm64", true, 1023, 4, ""
			// The arm64 image's files (images/README.md).
			s.Kernel = `C:\Program Files\Airlock\images\arm64\Image`
			s.Initrd = `C:\Program Files\Airlock\images\arm64\initramfs.cpio`
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := baseSpec()
			tc.edit(&s)
			d := Document(s)
			checkDocument(t, s, d)
			got, err := json.MarshalIndent(d, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".json", append(got, '\n'))
		})
	}
}

// checkDocument holds for every document, golden or not.
func checkDocument(t *testing.T, s Spec, d ComputeSystem) {
	t.Helper()
	b, _ := json.Marshal(d)
	if strings.Contains(string(b), "NetworkAdapters") {
		t.Error("the document has a network adapter")
	}
	if d.Owner != "Airlock" || d.SchemaVersion == nil || *d.SchemaVersion != (Version{2, 1}) {
		t.Errorf("owner %q, schema %+v", d.Owner, d.SchemaVersion)
	}
	dev := d.VirtualMachine.Devices
	if dev.Plan9 == nil {
		t.Error("no Plan9 device: shares could not be added after start")
	}
	if dev.HvSocket.HvSocketConfig.DefaultBindSecurityDescriptor != "D:P(A;;FA;;;SY)(A;;FA;;;"+testSID+")" ||
		dev.HvSocket.HvSocketConfig.DefaultConnectSecurityDescriptor != dev.HvSocket.HvSocketConfig.DefaultBindSecurityDescriptor {
		t.Errorf("socket SDDL %+v", dev.HvSocket.HvSocketConfig)
	}
	if n := len(dev.Scsi["0"].Attachments); n != len(s.Disks) || len(dev.Scsi) > 1 {
		t.Errorf("%d SCSI attachments (%d controllers) for %d disks", n, len(dev.Scsi), len(s.Disks))
	}
	for i, disk := range s.Disks {
		a := dev.Scsi["0"].Attachments[strconv.Itoa(i)]
		if a.Type != "VirtualDisk" || a.Path != disk.Path || a.ReadOnly != disk.ReadOnly {
			t.Errorf("LUN %d: %+v, want %+v", i, a, disk)
		}
		// Hyper-V refuses a sparse (or compressed, or encrypted) VHD
		// without these: 0xC03A001A.
		if !a.AlwaysAllowSparseFiles || !a.SupportCompressedVolumes || !a.SupportEncryptedFiles {
			t.Errorf("LUN %d refuses sparse, compressed or encrypted files: %+v", i, a)
		}
	}
	mem := d.VirtualMachine.ComputeTopology.Memory
	if mem.SizeInMB%2 != 0 {
		t.Error("memory is not a multiple of 2 MB")
	}
	if !mem.AllowOvercommit || !mem.EnableDeferredCommit {
		t.Errorf("memory is pinned: %+v", mem)
	}
	if !d.VirtualMachine.Chipset.UseUtc {
		t.Error("the RTC keeps local time; the guest reads it as UTC")
	}
	// HCS has no kernel-direct boot on arm64: the firmware boots the
	// kernel's EFI stub from the boot files' folder (VmbFs), and the stub
	// loads the initrd that the command line's first word names.
	var cl string
	switch c := d.VirtualMachine.Chipset; {
	case s.Arch == "arm64":
		if c.LinuxKernelDirect != nil || c.Uefi == nil || c.Uefi.BootThis == nil {
			t.Fatalf("arm64 chipset %+v: want UEFI boot only", c)
		}
		b := c.Uefi.BootThis
		dir, kernel := splitWindowsPath(s.Kernel)
		_, initrd := splitWindowsPath(s.Initrd)
		if b.DeviceType != "VmbFs" || b.VmbFsRootPath != dir || b.DevicePath != `\`+kernel {
			t.Errorf("boot entry %+v, want VmbFs %s, \\%s", b, dir, kernel)
		}
		first, rest, _ := strings.Cut(b.OptionalData, " ")
		if first != `initrd=\`+initrd {
			t.Errorf("command line starts %q, want initrd=\\%s", first, initrd)
		}
		cl = rest
	default:
		if c.Uefi != nil || c.LinuxKernelDirect == nil ||
			c.LinuxKernelDirect.KernelFilePath != s.Kernel || c.LinuxKernelDirect.InitRdPath != s.Initrd {
			t.Fatalf("amd64 chipset %+v: want kernel-direct boot of %s", c, s.Kernel)
		}
		cl = c.LinuxKernelDirect.KernelCmdLine
	}
	// The guest must read back exactly what the host meant.
	got, err := api.ParseCmdline(cl)
	if err != nil {
		t.Fatalf("guest cannot parse %q: %v", cl, err)
	}
	want := api.BootConfig{Transport: api.TransportHVSock, UID: 1000, GID: 1000}
	if s.Share {
		want.Share, want.SharePort, want.ShareReadOnly = api.Share9PVsock, 564, s.ShareReadOnly
	}
	if slices.Contains(s.Cmdline, "airlock.root_keep=1") {
		want.Root, want.RootKeep = api.RootLabel, true
	}
	want.Changes = slices.Contains(s.Cmdline, "airlock.changes=1")
	if got != want {
		t.Errorf("guest reads %+v, want %+v", got, want)
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (UPDATE_GOLDEN=1 rewrites it):\n%s", name, got)
	}
}

// TestAddPlan9ShareGolden: the service adds the share with the user's
// token, so the flags are LinuxMetadata|UseShareRootIdentity (0x14), plus
// ReadOnly (0x15).
func TestAddPlan9ShareGolden(t *testing.T) {
	for _, ro := range []bool{false, true} {
		name := "plan9-add.json"
		if ro {
			name = "plan9-add-ro.json"
		}
		got, err := json.MarshalIndent(AddPlan9Share(`D:\work\project`, ro, true), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		golden(t, name, append(got, '\n'))
	}
	// Without a token there is no identity to use.
	if f := AddPlan9Share(`D:\work\project`, false, false).Settings.(Plan9Share).Flags; f != plan9LinuxMetadata {
		t.Errorf("flags without a token: %#x", f)
	}
}

func TestServiceID(t *testing.T) {
	for port, want := range map[uint32]string{
		api.PortReady: "000003ff-facb-11e6-bd58-64006a7986d3",
		api.PortAgent: "00000400-facb-11e6-bd58-64006a7986d3",
		Plan9Port:     "00000234-facb-11e6-bd58-64006a7986d3",
	} {
		if got := ServiceID(port).String(); got != want {
			t.Errorf("ServiceID(%d) = %s, want %s", port, got, want)
		}
	}
}

func TestValidators(t *testing.T) {
	for _, tc := range []struct {
		f    func(string) bool
		in   string
		want bool
	}{
		{ValidSID, testSID, true},
		{ValidSID, "S-1-5-18", true},
		{ValidSID, "S-1-5-21)(A;;FA;;;WD", false},
		{ValidSID, "", false},
		{ValidGUID, "0e8bd9a0-1b7c-4d6f-9a3b-2c1d0e9f8a7b", true},
		{ValidGUID, "0e8bd9a0-1b7c-4d6f-9a3b-2c1d0e9f8a7", false},
	} {
		if got := tc.f(tc.in); got != tc.want {
			t.Errorf("%q: got %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestMemorySizeMB(t *testing.T) {
	for in, want := range map[int]uint64{1024: 1024, 1023: 1024, 129: 130, 0: 0, -5: 0} {
		if got := MemorySizeMB(in); got != want {
			t.Errorf("MemorySizeMB(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestCheckBoot(t *testing.T) {
	const dir = `C:\Program Files\Airlock\images\arm64\`
	for _, tc := range []struct {
		arch, kernel, initrd string
		ok                   bool
	}{
		{"arm64", dir + "Image", dir + "initramfs.cpio", true},
		{"arm64", dir + "Image", `C:\Program Files\Airlock\images\standard\arm64\initramfs.cpio`, false},
		{"arm64", dir + "Image", `C:\PROGRAM FILES\Airlock\images\ARM64\initramfs.cpio`, true},
		{"arm64", dir + "Image", dir + "init ramfs", false},
		{"arm64", dir + "Image", dir + "a=b", false},
		{"arm64", dir + "Ima\"ge", dir + "initramfs.cpio", false},
		{"arm64", "Image", "initramfs.cpio", true},
		{"arm64", dir, dir + "initramfs.cpio", false},
		// amd64 boots each file by its full path.
		{"amd64", dir + "vmlinux", `D:\other\initramfs.cpio`, true},
	} {
		s := Spec{Arch: tc.arch, Kernel: tc.kernel, Initrd: tc.initrd}
		if err := s.CheckBoot(); (err == nil) != tc.ok {
			t.Errorf("%s %q %q: %v, want ok=%v", tc.arch, tc.kernel, tc.initrd, err, tc.ok)
		}
	}
}
