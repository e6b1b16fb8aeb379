package vz

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

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

// transition says what ev means for a machine in state cur: the state to
// publish (ok false: none), and for a final one why the machine ended (nil:
// an orderly power-off; the darwin code then checks the console for a
// panic, see panicked). started says whether Start was called: the
// framework's initial state is "stopped", which ends nothing.
//
// States only move forward: the framework's notifications arrive on their
// own goroutine, after Start or Stop may already have published a later
// state, so a late "starting" must not move a running machine back, nor a
// late "running" undo a stop under way.
func transition(cur vm.State, ev event, started bool) (s vm.State, why error, ok bool) {
	if cur.Final() {
		return "", nil, false
	}
	switch ev {
	case evStarting:
		s = vm.StateStarting
	case evRunning:
		s = vm.StateRunning
	case evStopping:
		s = vm.StateStopping
	case evStopped:
		if !started {
			return "", nil, false
		}
		// The guest powered off (PSCI SYSTEM_OFF) or reset, or Stop forced
		// it off.
		return vm.StateStopped, nil, true
	case evError:
		return vm.StateFailed, errVMError, true
	default:
		return "", nil, false
	}
	if rank[s] <= rank[cur] {
		return "", nil, false
	}
	return s, nil, true
}

// rank orders the states a machine passes through.
var rank = map[vm.State]int{
	vm.StateNew: 0, vm.StateStarting: 1, vm.StateRunning: 2, vm.StateStopping: 3,
	vm.StateStopped: 4, vm.StateFailed: 4,
}

// panicMarker is what the kernel prints, at KERN_EMERG (so despite quiet),
// when it panics. With panic=-1 (guest/api.KernelArgs) it then resets the
// machine at once, which the framework reports like a power-off: the
// console is the only witness.
const panicMarker = "Kernel panic - not syncing"

// maxConsoleScan bounds how much of the console log (written by the guest:
// hostile) panicked reads.
const maxConsoleScan = 64 << 10

// errStopUnconfirmed is why a machine ends when the framework never
// reported it stopped after a forced stop.
var errStopUnconfirmed = errors.New("the framework did not report the virtual machine stopped")

// errGuestPanic is why a machine whose kernel panicked ended.
var errGuestPanic = errors.New("vz: the guest kernel panicked")

// panicked reads what the guest wrote to the console since this boot
// began (tail: at most maxConsoleScan bytes of its end) and returns
// errGuestPanic with the panic's line when the kernel panicked, else nil.
func panicked(tail []byte) error {
	if len(tail) > maxConsoleScan {
		tail = tail[len(tail)-maxConsoleScan:]
	}
	i := bytes.LastIndex(tail, []byte(panicMarker))
	if i < 0 {
		return nil
	}
	line := tail[i:]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	if len(line) > 200 {
		line = line[:200]
	}
	clean := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(string(line), "?"))
	return fmt.Errorf("%w: %s (see the console log)", errGuestPanic, strings.TrimSpace(clean))
}

// consoleSize is the console log's size now: where the next boot's output
// begins (0 when it cannot be read).
func consoleSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// consoleTail is at most maxConsoleScan bytes of the end of what was
// appended to the console log at path after offset from; nil when it
// cannot be read.
func consoleTail(path string, from int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() <= from {
		return nil
	}
	start := max(from, fi.Size()-maxConsoleScan)
	b := make([]byte, fi.Size()-start)
	n, _ := f.ReadAt(b, start)
	return b[:n]
}

// Darwin's errno values for the refusals VZVirtioSocketDevice reports.
const (
	darwinECONNRESET   = 54
	darwinECONNREFUSED = 61
)

// connRefused says whether a failed connect to a guest port means that
// nothing listens there: the framework reports it as an NSError in
// NSPOSIXErrorDomain, code 54 (ECONNRESET, what the framework answers) or
// 61 (ECONNREFUSED, which it may answer instead).
func connRefused(domain string, code int) bool {
	return domain == "NSPOSIXErrorDomain" && (code == darwinECONNRESET || code == darwinECONNREFUSED)
}
