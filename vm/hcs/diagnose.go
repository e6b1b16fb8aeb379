package hcs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/Microsoft/hcsshim/osversion"

	"github.com/airlock-sandbox/airlock/vm"
)

// MinBuild is the oldest Windows build Airlock runs on: Windows 10 version
// 2004 (19041). LinuxKernelDirect needs 18286 or later (hcsshim refuses
// kernel-direct boot below it), so 1809 and 1903 are out; 19041 is also
// the first build WSL 2 supports on arm64, and every older Windows 10
// release is out of servicing. Windows 11 (22000+) passes. The number is
// hcsshim's name for that release (osversion.V20H1).
const MinBuild = osversion.V20H1

// Errors a user can act on. Each message says what to do next; test them
// with errors.Is. The first four also match vm.ErrNoHypervisor.
var (
	ErrPlatformMissing = fmt.Errorf("%w: the Windows feature \"Virtual Machine Platform\" is not enabled or virtualization is off: "+
		"enable it in \"Turn Windows features on or off\" (or run `dism /online /enable-feature /featurename:VirtualMachinePlatform /all` as administrator) and restart Windows; "+
		"if it is already on, enable virtualization (Intel VT-x / AMD-V, SVM) in the firmware settings", vm.ErrNoHypervisor)
	ErrWindowsTooOld       = fmt.Errorf("%w: this version of Windows is too old: Airlock needs Windows 10 version 2004 (build %d) or later; install the latest Windows update", vm.ErrNoHypervisor, MinBuild)
	ErrServiceNotInstalled = fmt.Errorf("%w: the Airlock VM service (%s) is not installed: reinstall Airlock, which installs it", vm.ErrNoHypervisor, ServiceName)
	ErrServiceNotRunning   = fmt.Errorf("%w: the Airlock VM service (%s) is installed but not running: start it from services.msc or with `sc start %s` as administrator, or restart Windows", vm.ErrNoHypervisor, ServiceName, ServiceName)
	ErrServiceDenied       = errors.New("the Airlock VM service refused this account: it serves interactive users only; sign in to Windows as yourself (not through a network or service logon) and run Airlock again")
	ErrBootFilesAccess     = errors.New("the VM cannot read its kernel or initramfs: Windows refused to grant the VM access to the guest image; reinstall Airlock so the image sits in its install folder on a local NTFS drive")
	ErrPlan9Mount          = errors.New("the guest could not mount the workspace over Plan9: a known Windows update broke Plan9 shares for Hyper-V guests; install the latest Windows update and restart, and check that the folder is on a local NTFS drive")
	ErrDiskRefused         = errors.New("a VM disk file is compressed, encrypted or sparse and Hyper-V refused it: " +
		"in Explorer, open Properties > Advanced of %LOCALAPPDATA%\\Airlock (and of Airlock's install folder) and clear \"Compress contents\" and \"Encrypt contents\" for the folder and its files, " +
		"then install the latest Windows update and run Airlock again")
	ErrUnexpectedExit = errors.New("the VM stopped unexpectedly (Hyper-V's worker process for it ended): run Airlock again; if it happens again, " +
		"keep the console log and the events under Event Viewer > Applications and Services Logs > Microsoft > Windows > Hyper-V-Compute, and restart Windows")
	ErrUnsupported = errors.New("this version of Windows does not understand Airlock's VM description (the Host Compute Service called it invalid): " +
		"install the latest Windows update; if it persists, report it to Airlock with this message")
	ErrOutOfResources = errors.New("there is too little free memory on this PC to start the VM: close other programs or virtual machines, " +
		"or run with less memory or fewer CPUs (--memory, --cpus), then try again; if it persists, enlarge the paging file or restart Windows")
)

// HRESULT is a Windows status code as HCS returns it.
type HRESULT uint32

// HRESULTs the diagnostics know. HCS reports the same condition under two
// codes: the HCS_E_* HRESULTs of winerror.h (0x8037xxxx, as listed in
// golang.org/x/sys/windows zerrors_windows.go) and the vmcompute status
// codes with severity bits 11 (0xC037xxxx) that hcsshim's
// internal/hcs/errors.go names; Win32 errors arrive as
// HRESULT_FROM_WIN32 (0x8007xxxx), where hcsshim compares the bare Win32
// code.
const (
	hrAccessDenied        HRESULT = 0x80070005 // E_ACCESSDENIED
	hrFileNotFound        HRESULT = 0x80070002 // ERROR_FILE_NOT_FOUND
	hrPathNotFound        HRESULT = 0x80070003 // ERROR_PATH_NOT_FOUND
	hrModNotFound         HRESULT = 0x8007007E // ERROR_MOD_NOT_FOUND (computecore.dll missing)
	hrProcNotFound        HRESULT = 0x8007007F // ERROR_PROC_NOT_FOUND (export missing: Windows too old)
	hrServiceDisabled     HRESULT = 0x80070422 // ERROR_SERVICE_DISABLED (vmcompute disabled)
	hrHyperVNotInstalled  HRESULT = 0x80370102 // HCS_E_HYPERV_NOT_INSTALLED
	hrServiceNotAvailable HRESULT = 0x80370114 // HCS_E_SERVICE_NOT_AVAILABLE
	hrOperationTimeout    HRESULT = 0x80370118 // HCS_E_OPERATION_TIMEOUT
	hrHvNotPresent        HRESULT = 0xC0351000 // HV_E_NOT_PRESENT: no hypervisor running

	// The compute system does not exist.
	hrSystemNotFound          HRESULT = 0x8037010E // HCS_E_SYSTEM_NOT_FOUND (winerror.h)
	hrVmcomputeSystemNotFound HRESULT = 0xC037010E // hcsshim ErrComputeSystemDoesNotExist
	// hrElementNotFound is HRESULT_FROM_WIN32(ERROR_ELEMENT_NOT_FOUND):
	// hcsshim's ErrElementNotFound (0x490), which its IsNotExist and
	// IsAlreadyStopped both accept.
	hrElementNotFound HRESULT = 0x80070490

	// The compute system had stopped already.
	hrSystemAlreadyStopped    HRESULT = 0x80370110 // HCS_E_SYSTEM_ALREADY_STOPPED (winerror.h; hcsshim ErrVmcomputeSystemAlreadyStopped)
	hrVmcomputeAlreadyStopped HRESULT = 0xC0370110 // hcsshim ErrVmcomputeAlreadyStopped

	// The operation goes on asynchronously: hcsshim's System.Terminate
	// (internal/hcs/system.go) treats it as success.
	hrOperationPending          HRESULT = 0x80370117 // HCS_E_OPERATION_PENDING (winerror.h)
	hrVmcomputeOperationPending HRESULT = 0xC0370103 // hcsshim ErrVmcomputeOperationPending

	// The VM ended while HCS was working on it.
	hrUnexpectedExit          HRESULT = 0x80370106 // HCS_E_UNEXPECTED_EXIT (winerror.h)
	hrVmcomputeUnexpectedExit HRESULT = 0xC0370106 // hcsshim ErrVmcomputeUnexpectedExit

	// This Windows does not understand the document: hcsshim's
	// IsNotSupported counts these.
	hrInvalidJSON          HRESULT = 0x8037010D // HCS_E_INVALID_JSON (winerror.h)
	hrVmcomputeInvalidJSON HRESULT = 0xC037010D // hcsshim ErrVmcomputeInvalidJSON
	hrInvalidData          HRESULT = 0x8007000D // ERROR_INVALID_DATA: hcsshim ErrInvalidData, "the request being sent to hcs is invalid/unsupported"

	// Out of memory or other host resources. hcsshim's errors.go names
	// none of these; they are winerror.h's (x/sys/windows
	// zerrors_windows.go), and Hyper-V reports 0x800705AA when it cannot
	// find the memory for a VM (microsoft/WSL#5231, microsoft/MSLab#300).
	hrOutOfMemory       HRESULT = 0x8007000E // E_OUTOFMEMORY
	hrNotEnoughMemory   HRESULT = 0x80070008 // ERROR_NOT_ENOUGH_MEMORY
	hrNoSystemResources HRESULT = 0x800705AA // ERROR_NO_SYSTEM_RESOURCES
	hrCommitmentLimit   HRESULT = 0x800705AF // ERROR_COMMITMENT_LIMIT: the paging file is too small

	// hrVirtualDiskLimitation is ERROR_VIRTUAL_DISK_LIMITATION (winerror.h;
	// golang.org/x/sys/windows zerrors_windows.go): "Virtual hard disk files
	// must be uncompressed and unencrypted and must not be sparse"
	// (microsoft/WSL#4103), unless the attachment allows them.
	hrVirtualDiskLimitation HRESULT = 0xC03A001A
)

var hrNames = map[HRESULT]string{
	hrAccessDenied: "E_ACCESSDENIED", hrFileNotFound: "ERROR_FILE_NOT_FOUND", hrPathNotFound: "ERROR_PATH_NOT_FOUND",
	hrModNotFound: "ERROR_MOD_NOT_FOUND", hrProcNotFound: "ERROR_PROC_NOT_FOUND", hrServiceDisabled: "ERROR_SERVICE_DISABLED",
	hrHyperVNotInstalled: "HCS_E_HYPERV_NOT_INSTALLED", hrServiceNotAvailable: "HCS_E_SERVICE_NOT_AVAILABLE",
	hrOperationTimeout: "HCS_E_OPERATION_TIMEOUT", hrHvNotPresent: "HV_E_NOT_PRESENT",
	hrSystemNotFound: "HCS_E_SYSTEM_NOT_FOUND", hrVmcomputeSystemNotFound: "HCS_E_SYSTEM_NOT_FOUND",
	hrElementNotFound:      "ERROR_ELEMENT_NOT_FOUND",
	hrSystemAlreadyStopped: "HCS_E_SYSTEM_ALREADY_STOPPED", hrVmcomputeAlreadyStopped: "HCS_E_SYSTEM_ALREADY_STOPPED",
	hrOperationPending: "HCS_E_OPERATION_PENDING", hrVmcomputeOperationPending: "HCS_E_OPERATION_PENDING",
	hrUnexpectedExit: "HCS_E_UNEXPECTED_EXIT", hrVmcomputeUnexpectedExit: "HCS_E_UNEXPECTED_EXIT",
	hrInvalidJSON: "HCS_E_INVALID_JSON", hrVmcomputeInvalidJSON: "HCS_E_INVALID_JSON", hrInvalidData: "ERROR_INVALID_DATA",
	hrOutOfMemory: "E_OUTOFMEMORY", hrNotEnoughMemory: "ERROR_NOT_ENOUGH_MEMORY",
	hrNoSystemResources: "ERROR_NO_SYSTEM_RESOURCES", hrCommitmentLimit: "ERROR_COMMITMENT_LIMIT",
	hrVirtualDiskLimitation: "ERROR_VIRTUAL_DISK_LIMITATION",
}

func (h HRESULT) String() string {
	if n, ok := hrNames[h]; ok {
		return fmt.Sprintf("0x%08X (%s)", uint32(h), n)
	}
	return fmt.Sprintf("0x%08X", uint32(h))
}

// Failed reports whether h is an error (the severity bit is set).
func (h HRESULT) Failed() bool { return int32(h) < 0 }

// Ops an HCS error is attributed to; Diagnose maps some failures by op.
const (
	OpLoad      = "load computecore.dll"
	OpCreate    = "create"
	OpGrant     = "grant VM access"
	OpStart     = "start"
	OpProps     = "properties"
	OpModify    = "add workspace share"
	OpTerminate = "terminate"
	OpEnumerate = "enumerate"
)

// Error is a failed HCS call. It unwraps to the diagnosis (one of the
// sentinels above) when there is one.
type Error struct {
	Op     string
	HR     HRESULT
	Detail string // the HCS error document's message, when there was one
	diag   error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("hcs: " + e.Op + ": " + e.HR.String())
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.diag != nil {
		b.WriteString(": " + e.diag.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.diag }

// hrOf is the HRESULT of a failed HCS call in err's chain, or 0.
func hrOf(err error) HRESULT {
	var e *Error
	if errors.As(err, &e) {
		return e.HR
	}
	return 0
}

// IsNotFound reports whether err says the compute system does not exist
// (hcsshim's IsNotExist).
func IsNotFound(err error) bool {
	switch hrOf(err) {
	case hrSystemNotFound, hrVmcomputeSystemNotFound, hrElementNotFound:
		return true
	}
	return false
}

// IsAlreadyStopped reports whether err says the compute system had
// stopped already (hcsshim's IsAlreadyStopped).
func IsAlreadyStopped(err error) bool {
	switch hrOf(err) {
	case hrSystemAlreadyStopped, hrVmcomputeAlreadyStopped, hrElementNotFound:
		return true
	}
	return false
}

// IsPending reports whether err says HCS goes on with the operation
// asynchronously (hcsshim's IsPending).
func IsPending(err error) bool {
	switch hrOf(err) {
	case hrOperationPending, hrVmcomputeOperationPending:
		return true
	}
	return false
}

// TerminateSettled reports whether a terminate that failed with err
// leaves nothing to do: the system is gone, had stopped, or HCS is ending
// it already (the exit event follows). hcsshim's System.Terminate ignores
// the same three (internal/hcs/system.go).
func TerminateSettled(err error) bool {
	return IsNotFound(err) || IsAlreadyStopped(err) || IsPending(err)
}

// Diagnose turns a failed HCS call into an *Error carrying the diagnosis
// a user can act on.
func Diagnose(op string, hr HRESULT, detail string) error {
	return &Error{Op: op, HR: hr, Detail: detail, diag: diagnosis(op, hr)}
}

func diagnosis(op string, hr HRESULT) error {
	switch hr {
	case hrHyperVNotInstalled, hrServiceNotAvailable, hrServiceDisabled, hrModNotFound, hrHvNotPresent:
		return ErrPlatformMissing
	case hrProcNotFound:
		return ErrWindowsTooOld
	case hrVirtualDiskLimitation:
		return ErrDiskRefused
	case hrUnexpectedExit, hrVmcomputeUnexpectedExit:
		return ErrUnexpectedExit
	case hrInvalidJSON, hrVmcomputeInvalidJSON, hrInvalidData:
		return ErrUnsupported
	case hrOutOfMemory, hrNotEnoughMemory, hrNoSystemResources, hrCommitmentLimit:
		return ErrOutOfResources
	}
	switch op {
	case OpGrant:
		return ErrBootFilesAccess
	case OpCreate, OpStart:
		if hr == hrAccessDenied || hr == hrFileNotFound || hr == hrPathNotFound {
			return ErrBootFilesAccess
		}
	}
	return nil
}

// CheckBuild returns ErrWindowsTooOld for a build older than MinBuild.
func CheckBuild(build uint32) error {
	if build < MinBuild {
		return fmt.Errorf("hcs: Windows build %d: %w", build, ErrWindowsTooOld)
	}
	return nil
}

// ServiceProblem explains why the service's pipe could not be opened,
// from what the service manager says about the service.
func ServiceProblem(dialErr error, installed, running bool) error {
	switch {
	case !installed:
		return fmt.Errorf("hcs: connect to %s: %v: %w", ServicePipe, dialErr, ErrServiceNotInstalled)
	case !running:
		return fmt.Errorf("hcs: connect to %s: %v: %w", ServicePipe, dialErr, ErrServiceNotRunning)
	}
	return fmt.Errorf("hcs: connect to %s: %w", ServicePipe, dialErr)
}

// The guest's init reports a fatal boot error on the console, as
// "airlock-guest: error: fatal: powering off err=..." (guest/console), and
// a workspace it could not mount as an err value starting "workspace: ".
const (
	guestFatal     = "airlock-guest: error: fatal: powering off err="
	guestWorkspace = "workspace: "
)

// GuestFailure reads the end of the guest console for the guest's own
// account of a failed boot and returns ErrPlan9Mount (with the guest's
// words) when it could not mount the workspace, or nil.
func GuestFailure(console string) error {
	for _, line := range strings.Split(console, "\n") {
		_, v, ok := strings.Cut(strings.TrimRight(line, "\r"), guestFatal)
		if !ok {
			continue
		}
		if s, err := unquote(v); err == nil {
			v = s
		}
		if strings.HasPrefix(v, guestWorkspace) {
			if len(v) > 300 {
				v = v[:300] + "..."
			}
			return fmt.Errorf("hcs: the guest said %q: %w", v, ErrPlan9Mount)
		}
	}
	return nil
}

func unquote(s string) (string, error) {
	if !strings.HasPrefix(s, `"`) {
		return s, nil
	}
	var out string
	_, err := fmt.Sscanf(s, "%q", &out)
	return out, err
}
