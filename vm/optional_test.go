package vm

import "testing"

type plainMachine struct{ Machine }

type restorer struct {
	Machine
	restored bool
}

func (r restorer) Restored() bool      { return r.restored }
func (r restorer) RestoreFailed() bool { return false }

type hostGuest struct {
	Machine
	isHost bool
}

func (h hostGuest) GuestIsHost() bool { return h.isHost }

// TestOptional: a machine without a capability has none of what it
// offers; one with it says.
func TestOptional(t *testing.T) {
	for _, tc := range []struct {
		name             string
		m                Machine
		restored, isHost bool
	}{
		{"plain", plainMachine{}, false, false},
		{"restorer, booted", restorer{}, false, false},
		{"restorer, restored", restorer{restored: true}, true, false},
		{"guest of its own", hostGuest{}, false, false},
		{"guest is the host", hostGuest{isHost: true}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Restored(tc.m); got != tc.restored {
				t.Errorf("Restored = %v, want %v", got, tc.restored)
			}
			if got := GuestIsHost(tc.m); got != tc.isHost {
				t.Errorf("GuestIsHost = %v, want %v", got, tc.isHost)
			}
		})
	}
}
