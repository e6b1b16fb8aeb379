package vz

import (
	"testing"

	"github.com/airlock-sandbox/airlock/vm"
)

func TestOnEvent(t *testing.T) {
	for _, tc := range []struct {
		ev      event
		started bool
		want    vm.State
		failed  bool
		ok      bool
	}{
		{evStarting, true, vm.StateStarting, false, true},
		{evRunning, true, vm.StateRunning, false, true},
		{evStopping, true, vm.StateStopping, false, true},
		{evStopped, true, vm.StateStopped, false, true},
		{evStopped, false, "", false, false}, // the initial state ends nothing
		{evError, true, vm.StateFailed, true, true},
		{evError, false, vm.StateFailed, true, true},
		{evOther, true, "", false, false},
	} {
		s, why, ok := onEvent(tc.ev, tc.started)
		if s != tc.want || ok != tc.ok || (why != nil) != tc.failed {
			t.Errorf("onEvent(%d, %t) = %q, %v, %t; want %q, failed %t, %t", tc.ev, tc.started, s, why, ok, tc.want, tc.failed, tc.ok)
		}
		if ok && s.Final() != (tc.ev == evStopped || tc.ev == evError) {
			t.Errorf("event %d: final %t", tc.ev, s.Final())
		}
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
