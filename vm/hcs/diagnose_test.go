package hcs

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/guest/console"
	"github.com/airlock-sandbox/airlock/vm"
)

// TestDiagnose is the table from HCS failures to what the user is told.
func TestDiagnose(t *testing.T) {
	for _, tc := range []struct {
		op   string
		hr   HRESULT
		want error // nil: no diagnosis, a plain *Error
	}{
		{OpLoad, 0x8007007E, ErrPlatformMissing}, // computecore.dll missing
		{OpLoad, 0x8007007F, ErrWindowsTooOld},   // an export missing
		{OpCreate, 0x80370102, ErrPlatformMissing},
		{OpStart, 0x80370102, ErrPlatformMissing},
		{OpCreate, 0x80370114, ErrPlatformMissing},
		{OpCreate, 0x80070422, ErrPlatformMissing},
		{OpStart, 0xC0351000, ErrPlatformMissing},
		{OpGrant, 0x80070005, ErrBootFilesAccess},
		{OpGrant, 0x80070032, ErrBootFilesAccess}, // any grant failure
		{OpStart, 0x80070005, ErrBootFilesAccess},
		{OpCreate, 0x80070002, ErrBootFilesAccess},
		{OpCreate, 0x80070003, ErrBootFilesAccess},
		{OpCreate, 0xC03A001A, ErrDiskRefused}, // a sparse, compressed or encrypted VHD
		{OpStart, 0xC03A001A, ErrDiskRefused},
		{OpModify, 0x80070005, nil},
		{OpTerminate, 0x80370110, nil},
		{OpTerminate, 0xC0370110, nil},
		// hcsshim internal/hcs/errors.go's codes, in both forms HCS uses.
		{OpStart, 0x80370106, ErrUnexpectedExit},
		{OpModify, 0xC0370106, ErrUnexpectedExit},
		{OpCreate, 0x8037010D, ErrUnsupported},
		{OpCreate, 0xC037010D, ErrUnsupported},
		{OpModify, 0x8007000D, ErrUnsupported},
		// Out of memory or host resources (winerror.h).
		{OpStart, 0x8007000E, ErrOutOfResources},
		{OpStart, 0x80070008, ErrOutOfResources},
		{OpStart, 0x800705AA, ErrOutOfResources},
		{OpCreate, 0x800705AF, ErrOutOfResources},
	} {
		t.Run(fmt.Sprintf("%s/%s", tc.op, tc.hr), func(t *testing.T) {
			err := Diagnose(tc.op, tc.hr, "detail")
			var e *Error
			if !errors.As(err, &e) || e.HR != tc.hr || e.Op != tc.op {
				t.Fatalf("Diagnose = %v", err)
			}
			if tc.want == nil {
				if errors.Unwrap(err) != nil {
					t.Errorf("unexpected diagnosis: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.hr.String()) || !strings.Contains(err.Error(), "detail") {
				t.Errorf("message lacks the code or detail: %v", err)
			}
		})
	}
}

// TestSentinels: every diagnosis is distinct, says what to do, and the
// platform ones count as "no hypervisor" for callers that only know vm.
func TestSentinels(t *testing.T) {
	all := []error{ErrPlatformMissing, ErrWindowsTooOld, ErrServiceNotInstalled, ErrServiceNotRunning, ErrServiceDenied, ErrBootFilesAccess, ErrPlan9Mount, ErrDiskRefused,
		ErrUnexpectedExit, ErrUnsupported, ErrOutOfResources}
	for i, a := range all {
		for j, b := range all {
			if i != j && errors.Is(a, b) {
				t.Errorf("%v matches %v", a, b)
			}
		}
		msg := a.Error()
		if !strings.Contains(msg, ":") || len(msg) < 60 {
			t.Errorf("not actionable: %q", msg)
		}
	}
	for _, e := range all[:4] {
		if !errors.Is(e, vm.ErrNoHypervisor) {
			t.Errorf("%v is not vm.ErrNoHypervisor", e)
		}
	}
}

// TestStoppedCodes: HCS says "not found", "already stopped" and "pending"
// in the codes hcsshim's internal/hcs/errors.go lists, and a terminate is
// settled by any of them.
func TestStoppedCodes(t *testing.T) {
	for _, tc := range []struct {
		hr                                     HRESULT
		notFound, alreadyStopped, pending, set bool
	}{
		{0x8037010E, true, false, false, true},   // HCS_E_SYSTEM_NOT_FOUND
		{0xC037010E, true, false, false, true},   // hcsshim ErrComputeSystemDoesNotExist
		{0x80070490, true, true, false, true},    // ERROR_ELEMENT_NOT_FOUND
		{0x80370110, false, true, false, true},   // HCS_E_SYSTEM_ALREADY_STOPPED
		{0xC0370110, false, true, false, true},   // hcsshim ErrVmcomputeAlreadyStopped
		{0xC0370103, false, false, true, true},   // hcsshim ErrVmcomputeOperationPending
		{0x80370117, false, false, true, true},   // HCS_E_OPERATION_PENDING
		{0x80370106, false, false, false, false}, // unexpected exit: not settled
		{0x80070005, false, false, false, false},
	} {
		err := fmt.Errorf("vmservice: %w", Diagnose(OpTerminate, tc.hr, ""))
		if IsNotFound(err) != tc.notFound || IsAlreadyStopped(err) != tc.alreadyStopped || IsPending(err) != tc.pending || TerminateSettled(err) != tc.set {
			t.Errorf("%s: not found %v, already stopped %v, pending %v, settled %v; want %+v",
				tc.hr, IsNotFound(err), IsAlreadyStopped(err), IsPending(err), TerminateSettled(err), tc)
		}
	}
	if IsNotFound(errors.New("not found")) || TerminateSettled(nil) {
		t.Error("a plain error or nil counts as an HCS code")
	}
}

// TestDescribeExit: how the VM ended, as the app reports it.
func TestDescribeExit(t *testing.T) {
	for _, tc := range []struct {
		e    Exit
		want error
	}{
		{Exit{Type: "UnexpectedExit"}, ErrUnexpectedExit},
		{Exit{Type: "UnexpectedExit", Status: -2143878906}, ErrUnexpectedExit},    // 0x80370106
		{Exit{Type: "ForcedExit", Status: int32(-2147024882)}, ErrOutOfResources}, // 0x8007000E
		{Exit{Type: "ForcedExit"}, nil},
	} {
		err := describeExit(tc.e)
		if err == nil || (tc.want == nil) != (errors.Unwrap(err) == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%+v: %v, want %v", tc.e, err, tc.want)
		}
	}
}

func TestCheckBuild(t *testing.T) {
	for build, ok := range map[uint32]bool{17763: false, 18362: false, 19041: true, 19045: true, 22631: true, 26100: true} {
		err := CheckBuild(build)
		if (err == nil) != ok || (err != nil && !errors.Is(err, ErrWindowsTooOld)) {
			t.Errorf("CheckBuild(%d) = %v", build, err)
		}
	}
}

func TestServiceProblem(t *testing.T) {
	dialErr := errors.New("open \\\\.\\pipe\\airlock-vmservice: The system cannot find the file specified.")
	for _, tc := range []struct {
		installed, running bool
		want               error
	}{
		{false, false, ErrServiceNotInstalled},
		{true, false, ErrServiceNotRunning},
	} {
		if err := ServiceProblem(dialErr, tc.installed, tc.running); !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v", tc, err)
		}
	}
	if err := ServiceProblem(dialErr, true, true); errors.Is(err, ErrServiceNotRunning) || errors.Is(err, ErrServiceNotInstalled) {
		t.Errorf("running service diagnosed as missing: %v", err)
	}
}

// TestGuestFailure feeds the console lines the guest's own logger writes.
func TestGuestFailure(t *testing.T) {
	line := func(err error) string {
		var b bytes.Buffer
		console.NewLogger(&b, "", false).Error("fatal: powering off", "err", err)
		return b.String()
	}
	kernel := "[    0.912345] 9pnet: Installing 9P2000 support\r\n"
	for _, tc := range []struct {
		name, console string
		want          bool
	}{
		{"dial", kernel + line(errors.New("workspace: 9p over vsock port 564: connection refused")), true},
		{"mount", kernel + line(errors.New("workspace: mount 9p on /workspace: invalid argument")) + "reboot: Power down\n", true},
		{"other fatal", kernel + line(errors.New("start agent: no such file")), false},
		{"clean", kernel + "airlock-guest: shutting down reboot=false\n", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := GuestFailure(tc.console)
			if tc.want != errors.Is(err, ErrPlan9Mount) {
				t.Fatalf("GuestFailure = %v", err)
			}
			if tc.want && !strings.Contains(err.Error(), "workspace: ") {
				t.Errorf("the guest's words are lost: %v", err)
			}
		})
	}
}
