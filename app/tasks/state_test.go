package tasks

import (
	"errors"
	"testing"
)

var allStates = []State{Queued, Running, Exited, Killed, TimedOut, Lost}

func TestCanBecome(t *testing.T) {
	legal := map[[2]State]bool{
		{Queued, Running}: true, {Queued, Killed}: true, {Queued, Lost}: true,
		{Running, Exited}: true, {Running, Killed}: true, {Running, TimedOut}: true, {Running, Lost}: true,
	}
	for _, from := range allStates {
		for _, to := range allStates {
			t.Run(string(from)+"→"+string(to), func(t *testing.T) {
				if got, want := from.CanBecome(to), legal[[2]State{from, to}]; got != want {
					t.Errorf("CanBecome = %v, want %v", got, want)
				}
				if from.Final() && from.CanBecome(to) {
					t.Errorf("final state %s has a way out", from)
				}
			})
		}
	}
	if State("paused").Valid() || State("").CanBecome(Running) {
		t.Error("unknown states are accepted")
	}
}

// TestStoreTransitions drives the store through each path and checks that
// what the table forbids is refused with ErrTransition and changes nothing.
func TestStoreTransitions(t *testing.T) {
	type step struct {
		to  State
		bad bool
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"run and exit", []step{{Running, false}, {Exited, false}}},
		{"cancel before start", []step{{Killed, false}, {Running, true}}},
		{"lost while queued", []step{{Lost, false}}},
		{"exit without running", []step{{Exited, true}, {TimedOut, true}, {Running, false}}},
		{"time out", []step{{Running, false}, {TimedOut, false}, {Exited, true}}},
		{"lost is final", []step{{Running, false}, {Lost, false}, {Running, true}, {Killed, true}}},
		{"start twice", []step{{Running, false}, {Running, true}, {Queued, true}, {Killed, false}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, Options{})
			task := create(t, s)
			want := Queued
			for _, st := range tc.steps {
				var err error
				if st.to == Running {
					_, err = s.Start(task.ID)
				} else if st.to == Queued {
					_, err = s.transition(task.ID, Queued, func(*Task) {})
				} else {
					_, err = s.Finish(task.ID, st.to, Exit{}, "")
				}
				if st.bad != errors.Is(err, ErrTransition) || (!st.bad && err != nil) {
					t.Fatalf("%s → %s: err = %v, want refused=%v", want, st.to, err, st.bad)
				}
				if !st.bad {
					want = st.to
				}
				if got := get(t, s, task.ID).State; got != want {
					t.Fatalf("state = %s, want %s", got, want)
				}
			}
		})
	}
}

func TestFinishNeedsFinalState(t *testing.T) {
	s := newStore(t, Options{})
	task := create(t, s)
	if _, err := s.Finish(task.ID, Running, Exit{}, ""); !errors.Is(err, ErrTransition) {
		t.Fatalf("Finish(running) = %v, want ErrTransition", err)
	}
}
