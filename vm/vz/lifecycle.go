package vz

import (
	"errors"

	"github.com/airlock-sandbox/airlock/vm"
)

// event is a state change the framework reports
// (VZVirtualMachine.state), in neutral terms so that what each one means
// for the machine is decided and tested here.
type event int

const (
	evOther    event = iota // paused, pausing, resuming, saving, restoring: not used here
	evStarting              // configuring the hardware
	evRunning
	evStopping
	evStopped
	evError // the framework's "internal error": the VM is gone
)

// errVMError is why a machine ends when the framework reports its error
// state; vz v3 does not pass on the framework's own error.
var errVMError = errors.New("vz: the virtual machine stopped with an error (see the console log)")

// onEvent says what ev means for a machine: the state to publish (ok false:
// none), and for a final one why the machine ended (nil: an orderly
// power-off). started says whether Start was called: the framework's
// initial state is "stopped", which ends nothing.
func onEvent(ev event, started bool) (s vm.State, why error, ok bool) {
	switch ev {
	case evStarting:
		return vm.StateStarting, nil, true
	case evRunning:
		return vm.StateRunning, nil, true
	case evStopping:
		return vm.StateStopping, nil, true
	case evStopped:
		if !started {
			return "", nil, false
		}
		// The guest powered off (PSCI SYSTEM_OFF), or Stop forced it off.
		return vm.StateStopped, nil, true
	case evError:
		return vm.StateFailed, errVMError, true
	}
	return "", nil, false
}

// Darwin's errno values for the refusals VZVirtioSocketDevice reports.
const (
	darwinECONNRESET   = 54
	darwinECONNREFUSED = 61
)

// connRefused says whether a failed connect to a guest port means that
// nothing listens there: the framework reports it as an NSError in
// NSPOSIXErrorDomain, code 54 (ECONNRESET, what it answers today) or 61.
func connRefused(domain string, code int) bool {
	return domain == "NSPOSIXErrorDomain" && (code == darwinECONNRESET || code == darwinECONNREFUSED)
}
