package vz

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/vm"
)

// The framework's errors as vz v3's NSError.Error prints them, copied from
// reports (crc-org/vfkit#91, lima-vm/lima#2171).
const (
	nsEntitlement = "Error Domain=VZErrorDomain Code=2 Description=\"Invalid virtual machine configuration. The process doesn’t have the “com.apple.security.virtualization” entitlement.\" UserInfo={\n    NSLocalizedFailure = \"Invalid virtual machine configuration.\";\n    NSLocalizedFailureReason = \"The process doesn\\U2019t have the \\U201ccom.apple.security.virtualization\\U201d entitlement.\";\n}"
	nsUnavailable = "Error Domain=VZErrorDomain Code=2 Description=\"Invalid virtual machine configuration. Virtualization is not available on this hardware.\" UserInfo={\n    NSLocalizedFailure = \"Invalid virtual machine configuration.\";\n    NSLocalizedFailureReason = \"Virtualization is not available on this hardware.\";\n}"
	nsMemory      = "Error Domain=VZErrorDomain Code=2 Description=\"Invalid virtual machine configuration. The memory size must be a multiple of a 1 megabyte.\" UserInfo={}"
	nsStorage     = "Error Domain=VZErrorDomain Code=2 Description=\"Invalid virtual machine configuration. Invalid storage device configuration at index 0.\" UserInfo={}"
	nsStart       = "Error Domain=VZErrorDomain Code=1 Description=\"The virtual machine failed to start.\" UserInfo={}"
)

func TestExplain(t *testing.T) {
	for _, tc := range []struct {
		name       string
		op         string
		err        string
		osTooOld   bool
		validating bool
		sentinel   error // nil: neither ErrNoHypervisor nor ErrInvalidConfig
		want       []string
		wantNot    []string
	}{
		{name: "no entitlement", op: "configure", err: nsEntitlement, validating: true, sentinel: vm.ErrNoHypervisor,
			want: []string{"not signed with the com.apple.security.virtualization entitlement", "codesign", "build/darwin", "Code=2"}},
		{name: "no virtualization", op: "configure", err: nsUnavailable, validating: true, sentinel: vm.ErrNoHypervisor,
			want: []string{"virtualization is not available on this Mac", "run Airlock on the Mac itself", "not available on this hardware"}, wantNot: []string{"entitlement"}},
		{name: "no virtualization at start", op: "start", err: nsUnavailable, sentinel: vm.ErrNoHypervisor,
			want: []string{"vz: start:", "run Airlock on the Mac itself"}},
		{name: "refused size names the limits", op: "configure", err: nsMemory, validating: true, sentinel: vm.ErrInvalidConfig,
			want: []string{"this Mac allows 1 to 8 CPUs and 4 to 16384 MiB of memory", "change the CPUs or memory setting"}, wantNot: []string{"entitlement"}},
		{name: "other refusal is the configuration's", op: "configure", err: nsStorage, validating: true, sentinel: vm.ErrInvalidConfig,
			want: []string{"the framework refused the configuration", "storage device configuration at index 0"}, wantNot: []string{"entitlement"}},
		{name: "macOS too old", op: "configure", err: "vz: unsupported macOS version", osTooOld: true, sentinel: vm.ErrNoHypervisor,
			want: []string{"update to macOS 13 or later"}},
		{name: "start failure passes through", op: "start", err: nsStart,
			want: []string{"vz: start: Error Domain=VZErrorDomain Code=1"}, wantNot: []string{"entitlement", "configuration"}},
		{name: "configure failure outside validation", op: "configure", err: "disk /d: no such file",
			want: []string{"vz: configure: disk /d: no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := errors.New(tc.err)
			err := explain(tc.op, inner, tc.osTooOld, tc.validating, appleSilicon)
			if !errors.Is(err, inner) {
				t.Errorf("%v does not wrap the framework's error", err)
			}
			for _, s := range []error{vm.ErrNoHypervisor, vm.ErrInvalidConfig} {
				if got, want := errors.Is(err, s), s == tc.sentinel; got != want {
					t.Errorf("errors.Is(%v, %v) = %t, want %t", err, s, got, want)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
			// The entitlement is blamed only when the framework names it;
			// the error's own text may quote it, the explanation may not.
			msg := strings.TrimSuffix(err.Error(), inner.Error())
			for _, w := range tc.wantNot {
				if strings.Contains(msg, w) {
					t.Errorf("%q says %q", msg, w)
				}
			}
		})
	}
}

func TestLimitsString(t *testing.T) {
	if got, want := appleSilicon.String(), "1 to 8 CPUs and 4 to 16384 MiB of memory"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
