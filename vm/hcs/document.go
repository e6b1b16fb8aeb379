package hcs

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/Microsoft/go-winio/pkg/guid"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// Names and numbers the app, the service and the guest agree on.
const (
	// Owner marks Airlock's compute systems; the service terminates any it
	// finds at start (orphans of a crash).
	Owner = "Airlock"
	// Plan9Port is the Hyper-V socket (vsock) port of the workspace's Plan9
	// server, the one hcsshim uses for LCOW; the guest dials it
	// (airlock.share_port) and mounts with trans=fd.
	Plan9Port uint32 = 564
	// ServicePipe is the named pipe airlock-vmservice listens on.
	ServicePipe = `\\.\pipe\airlock-vmservice`
	// ServiceName is the Windows service's name.
	ServiceName = "AirlockVMService"
	// ConsolePipePrefix starts the name of a VM's console pipe; the app
	// creates it, the VM's COM1 connects to it (ConsolePipeName).
	ConsolePipePrefix = `\\.\pipe\airlock-console-`
)

// Plan9 share flags (private in the HCS schema; the values of WSL's
// Plan9ShareFlags, microsoft/WSL src/windows/common/hcs_schema.h, which
// hcsshim and Multipass use too).
const (
	plan9ReadOnly      int32 = 0x00000001
	plan9LinuxMetadata int32 = 0x00000004
	// plan9UseShareRootIdentity goes with a share added under a user's
	// token (HcsModifyComputeSystem's identity argument): WSL's
	// AddPlan9Share sets it exactly when it passes a token (microsoft/WSL
	// src/windows/common/hcs.cpp, WI_SetFlagIf(..., UseShareRootIdentity,
	// ARGUMENT_PRESENT(UserToken))).
	plan9UseShareRootIdentity int32 = 0x00000010
)

// schemaVersion is 2.1, the first version with LinuxKernelDirect, Plan9
// and HvSocketConfig, supported since Windows 10 1809.
var schemaVersion = Version{Major: 2, Minor: 1}

// Spec is everything the compute system document depends on, resolved and
// validated by the service: no defaults, no file system.
type Spec struct {
	// Arch is the host's GOARCH: "amd64" or "arm64".
	Arch           string
	Kernel, Initrd string
	// Cmdline holds the caller's extra kernel command line words.
	Cmdline   []string
	CPUs      int
	MemoryMiB int
	// ConsolePipe is the pipe COM1 connects to ("" for none).
	ConsolePipe string
	// UserSID is the only account besides SYSTEM that may bind to or
	// connect to the VM's Hyper-V sockets.
	UserSID string
	// Share says whether a workspace will be added after start, and how.
	Share         bool
	ShareReadOnly bool
	// Disks are VHD files on SCSI controller 0, LUN 0, 1, ... in order.
	// The guest finds them by their content (a label), not their LUN.
	Disks []Disk
}

// Disk is a VHD file attached as a SCSI disk.
type Disk struct {
	Path     string
	ReadOnly bool
}

// BootConfig is what the guest is told about its transport and share.
func (s Spec) BootConfig() api.BootConfig {
	c := api.BootConfig{Transport: api.TransportHVSock}
	if s.Share {
		c.Share, c.SharePort, c.ShareReadOnly = api.Share9PVsock, Plan9Port, s.ShareReadOnly
	}
	return c
}

// KernelCmdline is the command line, built the way hcsshim builds it for
// LCOW with LinuxKernelDirect: a single 8250 UART as the console on COM1
// (amd64; arm64 has a PL011), no PCI, no ramdisks, panic ends the VM.
func (s Spec) KernelCmdline() string {
	var w []string
	switch s.Arch {
	case "arm64":
		w = append(w, "console=ttyAMA0")
	default:
		w = append(w, "8250_core.nr_uarts=1", "8250_core.skip_txen_test=1", "console=ttyS0,115200")
	}
	w = append(w, api.KernelArgs...)
	w = append(w, "nr_cpus="+strconv.Itoa(s.CPUs), "pci=off", "brd.rd_nr=0")
	if s.Arch != "arm64" {
		w = append(w, "pmtmr=0")
	}
	w = append(w, s.BootConfig().Args()...)
	return strings.Join(append(w, s.Cmdline...), " ")
}

// CheckBoot reports whether s's boot files can be booted on s.Arch. On
// arm64 the firmware sees one host folder (VmbFs), so the kernel and the
// initrd must be in the same one, and the initrd's name goes on the
// command line, so it must be a plain word.
func (s Spec) CheckBoot() error {
	if s.Arch != "arm64" {
		return nil
	}
	kdir, kname := splitWindowsPath(s.Kernel)
	idir, iname := splitWindowsPath(s.Initrd)
	switch {
	case kname == "" || iname == "":
		return fmt.Errorf("hcs: kernel %q or initrd %q is not a file path", s.Kernel, s.Initrd)
	case !strings.EqualFold(kdir, idir):
		return fmt.Errorf("hcs: on arm64 the kernel (%s) and the initrd (%s) must be in the same folder: the firmware boots them from it", s.Kernel, s.Initrd)
	case strings.ContainsAny(iname, " \t\"'=") || strings.ContainsAny(kname, " \t\"'"):
		return fmt.Errorf("hcs: boot file names %q and %q must not contain spaces, quotes or '='", kname, iname)
	}
	return nil
}

// splitWindowsPath splits a Windows path at its last backslash into the
// folder and the file name (vm/hcs is built on every OS, so path/filepath
// would split at '/' on Linux).
func splitWindowsPath(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '\\')
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// chipset boots s: kernel-direct on amd64; on arm64, which has no Linux
// kernel direct boot in HCS, through the UEFI firmware. WSL does the same
// (microsoft/WSL src/windows/service/exe/WslCoreVm.cpp: "Linux kernel
// direct boot is not yet supported on ARM64", then Chipset.Uefi.BootThis
// with DeviceType VmbFs, VmbFsRootPath the folder holding the kernel and
// the initrd, DevicePath `\kernel` and OptionalData the command line
// starting `initrd=\initrd.img`); hcsshim's LCOW does it when KernelDirect
// is off (internal/uvm/create_lcow.go). The firmware runs the kernel's
// EFI stub (Debian's arm64 Image has one), which loads the initrd named by
// initrd= from the same VmbFs folder. Callers check CheckBoot first.
func (s Spec) chipset() *Chipset {
	c := &Chipset{UseUtc: true}
	if s.Arch != "arm64" {
		c.LinuxKernelDirect = &LinuxKernelDirect{
			KernelFilePath: s.Kernel,
			InitRdPath:     s.Initrd,
			KernelCmdLine:  s.KernelCmdline(),
		}
		return c
	}
	dir, kernel := splitWindowsPath(s.Kernel)
	_, initrd := splitWindowsPath(s.Initrd)
	c.Uefi = &Uefi{BootThis: &UefiBootEntry{
		DeviceType:    "VmbFs",
		VmbFsRootPath: dir,
		DevicePath:    `\` + kernel,
		OptionalData:  `initrd=\` + initrd + " " + s.KernelCmdline(),
	}}
	return c
}

// Document is the compute system document for s: kernel-direct boot
// (UEFI on arm64, see chipset), memory and processors, the console on COM1, Hyper-V sockets for the
// user and SYSTEM only, an empty Plan9 server, the disks on one SCSI
// controller, and no network adapter.
func Document(s Spec) ComputeSystem {
	v := schemaVersion
	d := &Devices{
		HvSocket: &HvSocket{HvSocketConfig: &HvSocketSystemConfig{
			DefaultBindSecurityDescriptor:    SocketSDDL(s.UserSID),
			DefaultConnectSecurityDescriptor: SocketSDDL(s.UserSID),
		}},
		Plan9: &Plan9{},
	}
	if s.ConsolePipe != "" {
		d.ComPorts = map[string]ComPort{"0": {NamedPipe: s.ConsolePipe}}
	}
	if len(s.Disks) > 0 {
		att := map[string]Attachment{}
		for i, disk := range s.Disks {
			// The persistent disk is a sparse file; the flags are WSL's
			// (see Attachment).
			att[strconv.Itoa(i)] = Attachment{
				Type: "VirtualDisk", Path: disk.Path, ReadOnly: disk.ReadOnly,
				SupportCompressedVolumes: true, AlwaysAllowSparseFiles: true, SupportEncryptedFiles: true,
			}
		}
		d.Scsi = map[string]Scsi{"0": {Attachments: att}}
	}
	return ComputeSystem{
		Owner:                             Owner,
		SchemaVersion:                     &v,
		ShouldTerminateOnLastHandleClosed: true,
		VirtualMachine: &VirtualMachine{
			StopOnReset: true,
			Chipset:     s.chipset(),
			ComputeTopology: &Topology{
				// Memory is not pinned: pagefile-backed and committed on
				// first touch, as WSL's VMs (microsoft/WSL
				// src/windows/service/exe/WslCoreVm.cpp sets
				// AllowOvercommit and EnableDeferredCommit).
				Memory: &Memory{
					SizeInMB:             MemorySizeMB(s.MemoryMiB),
					AllowOvercommit:      true,
					EnableDeferredCommit: true,
				},
				Processor: &Processor{Count: uint32(s.CPUs)},
			},
			Devices: d,
		},
	}
}

// MemorySizeMB rounds mib up to the 2 MB multiple HCS requires.
func MemorySizeMB(mib int) uint64 {
	if mib < 0 {
		return 0
	}
	return uint64(mib+1) &^ 1
}

// SocketSDDL is the security descriptor of the VM's Hyper-V sockets: full
// access for SYSTEM (the service) and for userSID, nothing for anyone else
// (not even administrators), and no inherited entries.
func SocketSDDL(userSID string) string {
	return "D:P(A;;FA;;;SY)(A;;FA;;;" + userSID + ")"
}

// ConsoleSDDL is the security descriptor of a VM's console pipe, owned
// by the user whose app serves it: SYSTEM, the "Virtual Machines" group
// the VM worker process runs in (NT VIRTUAL MACHINE\Virtual Machines,
// S-1-5-83-0) and that user. No other user may connect or add an instance.
func ConsoleSDDL(userSID string) string {
	return "O:" + userSID + "D:P(A;;GA;;;SY)(A;;GA;;;S-1-5-83-0)(A;;GA;;;" + userSID + ")"
}

// AddPlan9Share is the HcsModifyComputeSystem request that shares path
// with the guest as api.WorkspaceTag on Plan9Port. Read-only is enforced
// by the host's Plan9 server, not only by the guest's mount. asUser says
// the request goes with the user's token, which then needs the
// UseShareRootIdentity flag, as in WSL.
func AddPlan9Share(path string, readOnly, asUser bool) ModifySettingRequest {
	flags := plan9LinuxMetadata
	if readOnly {
		flags |= plan9ReadOnly
	}
	if asUser {
		flags |= plan9UseShareRootIdentity
	}
	return ModifySettingRequest{
		ResourcePath: "VirtualMachine/Devices/Plan9/Shares",
		RequestType:  "Add",
		Settings: Plan9Share{
			Name:       api.WorkspaceTag,
			AccessName: api.WorkspaceTag,
			Path:       path,
			Port:       int32(Plan9Port),
			Flags:      flags,
		},
	}
}

// ServiceID is the Hyper-V socket service GUID of an AF_VSOCK port: the
// port in the first field of the template
// 00000000-facb-11e6-bd58-64006a7986d3 (go-winio's VsockServiceID).
func ServiceID(port uint32) guid.GUID {
	return guid.GUID{
		Data1: port,
		Data2: 0xfacb,
		Data3: 0x11e6,
		Data4: [8]byte{0xbd, 0x58, 0x64, 0x00, 0x6a, 0x79, 0x86, 0xd3},
	}
}

// NewID returns a random compute system id.
func NewID() (string, error) {
	g, err := guid.NewV4()
	if err != nil {
		return "", fmt.Errorf("hcs: new id: %w", err)
	}
	return g.String(), nil
}

var sidRE = regexp.MustCompile(`^S-1-[0-9]+(-[0-9]+)+$`)

// ValidSID reports whether s is a SID string fit for an SDDL entry.
func ValidSID(s string) bool { return len(s) < 200 && sidRE.MatchString(s) }

var guidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ValidGUID reports whether s is a GUID string (a compute system or runtime id).
func ValidGUID(s string) bool { return guidRE.MatchString(s) }
