package hcs

// The Host Compute Service schema, version 2.1: only the fields Airlock
// sets or reads. Names and JSON keys follow the published schema (the
// same ones hcsshim's internal/hcs/schema2 generates); zero values are
// omitted so the document says only what was chosen.

// Version is a schema version.
type Version struct {
	Major int32 `json:"Major"`
	Minor int32 `json:"Minor"`
}

// ComputeSystem is the document HcsCreateComputeSystem takes.
type ComputeSystem struct {
	Owner          string          `json:"Owner,omitempty"`
	SchemaVersion  *Version        `json:"SchemaVersion,omitempty"`
	VirtualMachine *VirtualMachine `json:"VirtualMachine,omitempty"`
	// ShouldTerminateOnLastHandleClosed ends the VM when the service's
	// handle goes away, so a crashed service leaves nothing running.
	ShouldTerminateOnLastHandleClosed bool `json:"ShouldTerminateOnLastHandleClosed,omitempty"`
}

// VirtualMachine configures a utility VM.
type VirtualMachine struct {
	// StopOnReset turns a guest reboot into a stop.
	StopOnReset     bool      `json:"StopOnReset,omitempty"`
	Chipset         *Chipset  `json:"Chipset,omitempty"`
	ComputeTopology *Topology `json:"ComputeTopology,omitempty"`
	Devices         *Devices  `json:"Devices,omitempty"`
}

// Chipset selects the boot path: the kernel directly on amd64, through
// the UEFI firmware on arm64 (exactly one of the two is set).
type Chipset struct {
	// UseUtc makes the virtual RTC keep UTC, which is what a Linux guest
	// reads it as (the default is local time). WSL sets it on every VM
	// (microsoft/WSL src/windows/service/exe/WslCoreVm.cpp,
	// vmSettings.Chipset.UseUtc); the key is hcsshim's
	// internal/hcs/schema2/chipset.go.
	UseUtc            bool               `json:"UseUtc,omitempty"`
	LinuxKernelDirect *LinuxKernelDirect `json:"LinuxKernelDirect,omitempty"`
	Uefi              *Uefi              `json:"Uefi,omitempty"`
}

// Uefi boots the VM through its UEFI firmware (microsoft/WSL
// src/windows/common/hcs_schema.h struct Uefi; hcsshim's
// internal/hcs/schema2/uefi.go has the same keys).
type Uefi struct {
	// BootThis is the one entry the firmware boots.
	BootThis *UefiBootEntry `json:"BootThis,omitempty"`
}

// UefiBootEntry is an EFI application the firmware loads and starts: here
// the Linux kernel's EFI stub (microsoft/WSL hcs_schema.h struct
// UefiBootEntry).
type UefiBootEntry struct {
	// DeviceType "VmbFs" serves the host folder VmbFsRootPath to the
	// firmware as a file system (the only UefiBootDevice WSL defines).
	DeviceType    string `json:"DeviceType,omitempty"`
	VmbFsRootPath string `json:"VmbFsRootPath,omitempty"`
	// DevicePath is the EFI application's path on that file system,
	// rooted, with backslashes: `\Image`.
	DevicePath string `json:"DevicePath,omitempty"`
	// OptionalData is the load options the firmware passes to the
	// application: for the EFI stub, the kernel command line, whose
	// initrd= word the stub itself loads from the same file system.
	OptionalData string `json:"OptionalData,omitempty"`
}

// LinuxKernelDirect boots a Linux kernel without firmware.
type LinuxKernelDirect struct {
	KernelFilePath string `json:"KernelFilePath,omitempty"`
	InitRdPath     string `json:"InitRdPath,omitempty"`
	KernelCmdLine  string `json:"KernelCmdLine,omitempty"`
}

// Topology sizes the VM.
type Topology struct {
	Memory    *Memory    `json:"Memory,omitempty"`
	Processor *Processor `json:"Processor,omitempty"`
}

// Memory is the VM's memory (hcsshim's VirtualMachineMemory,
// internal/hcs/schema2/virtual_machine_memory.go).
type Memory struct {
	SizeInMB uint64 `json:"SizeInMB,omitempty"`
	// AllowOvercommit backs guest memory with the host's pagefile instead
	// of pinned physical pages, so a VM starts when free RAM is short and
	// its memory can be trimmed and paged like a process's.
	AllowOvercommit bool `json:"AllowOvercommit,omitempty"`
	// EnableDeferredCommit charges commit for a page only when the guest
	// first touches it (needs AllowOvercommit: hcsshim
	// internal/uvm/create.go refuses it on physically backed VMs).
	EnableDeferredCommit bool `json:"EnableDeferredCommit,omitempty"`
}

// Processor is the VM's virtual processors.
type Processor struct {
	Count uint32 `json:"Count,omitempty"`
}

// Devices lists the VM's devices. There is deliberately no NetworkAdapters
// field: the guest has no network card.
type Devices struct {
	// ComPorts maps "0" (COM1) to the named pipe its output goes to.
	ComPorts map[string]ComPort `json:"ComPorts,omitempty"`
	HvSocket *HvSocket          `json:"HvSocket,omitempty"`
	// Plan9 must be present (even empty) at creation for shares to be
	// added after start.
	Plan9 *Plan9 `json:"Plan9,omitempty"`
	// Scsi maps a controller number ("0") to its disks.
	Scsi map[string]Scsi `json:"Scsi,omitempty"`
}

// Scsi is a synthetic SCSI controller (hv_storvsc in the guest).
type Scsi struct {
	// Attachments maps a LUN ("0", "1", ...) to its disk.
	Attachments map[string]Attachment `json:"Attachments,omitempty"`
}

// Attachment is a disk on a SCSI controller.
type Attachment struct {
	// Type is "VirtualDisk" for a VHD or VHDX file.
	Type     string `json:"Type,omitempty"`
	Path     string `json:"Path,omitempty"`
	ReadOnly bool   `json:"ReadOnly,omitempty"`
	// Without these three, Hyper-V refuses a VHD file that is sparse,
	// NTFS-compressed or EFS-encrypted with 0xC03A001A
	// (ERROR_VIRTUAL_DISK_LIMITATION, microsoft/WSL#4103). WSL sets all
	// three on every disk it attaches (microsoft/WSL
	// src/windows/common/hcs.cpp AddVhd, src/windows/common/hcs_schema.h
	// Attachment); hcsshim's internal/hcs/schema2/attachment.go has the
	// first two under the same keys.
	SupportCompressedVolumes bool `json:"SupportCompressedVolumes,omitempty"`
	AlwaysAllowSparseFiles   bool `json:"AlwaysAllowSparseFiles,omitempty"`
	SupportEncryptedFiles    bool `json:"SupportEncryptedFiles,omitempty"`
}

// ComPort connects a serial port to a named pipe.
type ComPort struct {
	NamedPipe string `json:"NamedPipe,omitempty"`
}

// HvSocket configures the VM's Hyper-V sockets.
type HvSocket struct {
	HvSocketConfig *HvSocketSystemConfig `json:"HvSocketConfig,omitempty"`
}

// HvSocketSystemConfig holds the SDDL checked when a host process binds
// to (listens on) or connects to a service of this VM.
type HvSocketSystemConfig struct {
	DefaultBindSecurityDescriptor    string `json:"DefaultBindSecurityDescriptor,omitempty"`
	DefaultConnectSecurityDescriptor string `json:"DefaultConnectSecurityDescriptor,omitempty"`
}

// Plan9 is the host's Plan9 file server for the VM.
type Plan9 struct {
	Shares []Plan9Share `json:"Shares,omitempty"`
}

// Plan9Share is one folder served over Plan9 on a Hyper-V socket port.
type Plan9Share struct {
	Name string `json:"Name,omitempty"`
	// AccessName is the aname the guest attaches with.
	AccessName string `json:"AccessName,omitempty"`
	Path       string `json:"Path,omitempty"`
	Port       int32  `json:"Port,omitempty"`
	Flags      int32  `json:"Flags,omitempty"`
}

// ModifySettingRequest is the document HcsModifyComputeSystem takes.
type ModifySettingRequest struct {
	ResourcePath string `json:"ResourcePath,omitempty"`
	RequestType  string `json:"RequestType,omitempty"`
	Settings     any    `json:"Settings,omitempty"`
}

// Properties is the part of HcsGetComputeSystemProperties' and
// HcsEnumerateComputeSystems' answers Airlock reads.
type Properties struct {
	ID        string `json:"Id,omitempty"`
	Owner     string `json:"Owner,omitempty"`
	RuntimeID string `json:"RuntimeId,omitempty"`
	State     string `json:"State,omitempty"`
	Stopped   bool   `json:"Stopped,omitempty"`
}

// SystemExitStatus is the event data of HcsEventSystemExited.
type SystemExitStatus struct {
	// Status is the exit HRESULT.
	Status int32 `json:"Status,omitempty"`
	// ExitType is "GracefulExit", "ForcedExit", "UnexpectedExit" or "Unknown".
	ExitType string `json:"ExitType,omitempty"`
}

// ResultError is the error document an HCS operation may return.
type ResultError struct {
	Error        int32  `json:"Error,omitempty"`
	ErrorMessage string `json:"ErrorMessage,omitempty"`
}
