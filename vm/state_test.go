package vm

import (
	"context"
	"testing"
	"time"
)

func collect(t *testing.T, ch <-chan State) []State {
	t.Helper()
	var got []State
	timeout := time.After(2 * time.Second)
	for {
		select {
		case s, ok := <-ch:
			if !ok {
				return got
			}
			got = append(got, s)
		case <-timeout:
			t.Fatalf("watch channel not closed; got %v", got)
		}
	}
}

func TestStateHub(t *testing.T) {
	tests := []struct {
		name string
		sets []State
		want State
	}{
		{"zero value", nil, StateNew},
		{"run", []State{StateStarting, StateRunning}, StateRunning},
		{"final sticks", []State{StateStarting, StateFailed, StateRunning, StateStopped}, StateFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h StateHub
			for _, s := range tt.sets {
				h.Set(s)
			}
			if got := h.State(); got != tt.want {
				t.Errorf("State = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestStateHubWatch(t *testing.T) {
	var h StateHub
	ctx := context.Background()
	w := h.Watch(ctx)
	h.Set(StateStarting)
	h.Set(StateRunning)
	h.Set(StateStopping)
	h.Set(StateStopped)
	got := collect(t, w)
	// The buffer holds four states; an unread watcher loses the oldest.
	if len(got) == 0 || got[len(got)-1] != StateStopped {
		t.Errorf("watched %v", got)
	}
	// A watcher after the end sees the final state and a closed channel.
	if got := collect(t, h.Watch(ctx)); len(got) != 1 || got[0] != StateStopped {
		t.Errorf("late watcher got %v", got)
	}
}

func TestStateHubSlowWatcherSeesLatest(t *testing.T) {
	var h StateHub
	w := h.Watch(context.Background())
	for range 100 {
		h.Set(StateStarting)
		h.Set(StateRunning)
	}
	h.Set(StateFailed)
	got := collect(t, w)
	if got[len(got)-1] != StateFailed {
		t.Errorf("slow watcher ended on %v", got)
	}
}

func TestStateHubWatchCancel(t *testing.T) {
	var h StateHub
	ctx, cancel := context.WithCancel(context.Background())
	w := h.Watch(ctx)
	cancel()
	collect(t, w)       // closes
	h.Set(StateRunning) // no watcher left to block on
	if h.State() != StateRunning {
		t.Error("state")
	}
}
