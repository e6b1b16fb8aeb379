package vz

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/vm"
)

func TestTransition(t *testing.T) {
	const (
		nw, starting, running, stopping = vm.StateNew, vm.StateStarting, vm.StateRunning, vm.StateStopping
		stopped, failed                 = vm.StateStopped, vm.StateFailed
	)
	for _, tc := range []struct {
		cur     vm.State
		ev      event
		started bool
		want    vm.State // "": nothing published
		failed  bool
	}{
		{nw, evStarting, true, starting, false},
		{starting, evRunning, true, running, false},
		{running, evStopping, true, stopping, false},
		{stopping, evStopped, true, stopped, false},
		{running, evStopped, true, stopped, false}, // the guest powered off
		{nw, evStopped, false, "", false},          // the initial state ends nothing
		{running, evError, true, failed, true},
		{nw, evError, false, failed, true},
		{running, evOther, true, "", false},
		// Start published running before the framework's late
		// notifications arrived: they must not move it back.
		{running, evStarting, true, "", false},
		{running, evRunning, true, "", false},
		// A stop is under way (Stop published stopping): a late
		// "running" does not undo it.
		{stopping, evRunning, true, "", false},
		{stopping, evStarting, true, "", false},
		// Nothing leaves a final state.
		{stopped, evRunning, true, "", false},
		{failed, evStopped, true, "", false},
		{stopped, evError, true, "", false},
	} {
		s, why, ok := transition(tc.cur, tc.ev, tc.started)
		if s != tc.want || ok != (tc.want != "") || (why != nil) != tc.failed {
			t.Errorf("transition(%s, %d, %t) = %q, %v, %t; want %q, failed %t", tc.cur, tc.ev, tc.started, s, why, ok, tc.want, tc.failed)
		}
	}
}

func TestPanicked(t *testing.T) {
	long := strings.Repeat("x", maxConsoleScan)
	for _, tc := range []struct {
		name, console string
		want          string // "": no panic
	}{
		{"power-off", "airlock-guest: shutting down\nreboot: Power down\n", ""},
		{"empty", "", ""},
		{"panic", "airlock-guest: agent started\n[    3.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000200\n[    3.1] ---[ end trace ]---\n",
			"Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000200"},
		{"control characters are dropped", "Kernel panic - not syncing: \x1b[31mboom\x07\r\n", "Kernel panic - not syncing: [31mboom"},
		{"only the end is read", "Kernel panic - not syncing: an old one\n" + long, ""},
		{"a long line is cut", "Kernel panic - not syncing: " + strings.Repeat("y", 500), "Kernel panic - not syncing: " + strings.Repeat("y", 200-len(panicMarker)-2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := panicked([]byte(tc.console))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("panicked = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, errGuestPanic) || !strings.Contains(err.Error(), tc.want+" (see the console log)") {
				t.Fatalf("panicked = %v, want errGuestPanic with %q", err, tc.want)
			}
		})
	}
}

// TestConsoleTail reads only what this boot appended, and at most
// maxConsoleScan bytes of it.
func TestConsoleTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "console.log")
	if got := consoleTail(p, 0); got != nil || consoleSize(p) != 0 {
		t.Fatalf("missing log: %q, size %d", got, consoleSize(p))
	}
	if err := os.WriteFile(p, []byte("Kernel panic - not syncing: last boot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	from := consoleSize(p)
	if got := consoleTail(p, from); got != nil {
		t.Fatalf("nothing appended yet, got %q", got)
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("this boot\n" + strings.Repeat("z", maxConsoleScan))
	f.Close()
	got := consoleTail(p, from)
	if len(got) != maxConsoleScan || strings.Contains(string(got), "last boot") {
		t.Fatalf("tail of %d bytes (last boot's output in it: %t)", len(got), strings.Contains(string(got), "last boot"))
	}
	if panicked(consoleTail(p, from)) != nil {
		t.Error("the last boot's panic was blamed on this one")
	}
}

func TestConnRefused(t *testing.T) {
	for _, tc := range []struct {
		domain string
		code   int
		want   bool
	}{
		{"NSPOSIXErrorDomain", 54, true},
		{"NSPOSIXErrorDomain", 61, true},
		{"NSPOSIXErrorDomain", 60, false}, // ETIMEDOUT
		{"VZErrorDomain", 54, false},
		{"", 0, false},
	} {
		if got := connRefused(tc.domain, tc.code); got != tc.want {
			t.Errorf("connRefused(%q, %d) = %t", tc.domain, tc.code, got)
		}
	}
}
