package vm

import (
	"context"
	"sync"
)

// State is a machine's lifecycle state.
type State string

// Lifecycle states. Stopped and Failed are final.
const (
	StateNew      State = "new"
	StateStarting State = "starting"
	StateRunning  State = "running"
	StateStopping State = "stopping"
	StateStopped  State = "stopped"
	StateFailed   State = "failed"
)

// Final reports whether no further transition follows s.
func (s State) Final() bool { return s == StateStopped || s == StateFailed }

// StateHub holds a machine's state and fans changes out to watchers. Backends
// embed one; the zero value is ready and in StateNew.
type StateHub struct {
	mu       sync.Mutex
	state    State
	watchers map[chan State]chan struct{}
}

// State returns the current state.
func (h *StateHub) State() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == "" {
		return StateNew
	}
	return h.state
}

// Set records a transition and tells every watcher. A watcher that is not
// keeping up loses intermediate states but always sees the latest one.
// Transitions out of a final state are ignored.
func (h *StateHub) Set(s State) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state.Final() || h.state == s {
		return
	}
	h.state = s
	for ch, gone := range h.watchers {
		sendLatest(ch, s)
		if s.Final() {
			close(ch)
			close(gone)
			delete(h.watchers, ch)
		}
	}
}

// Watch implements Machine.Watch.
func (h *StateHub) Watch(ctx context.Context) <-chan State {
	ch := make(chan State, 4)
	h.mu.Lock()
	cur := h.state
	if cur == "" {
		cur = StateNew
	}
	ch <- cur
	if cur.Final() {
		close(ch)
		h.mu.Unlock()
		return ch
	}
	if h.watchers == nil {
		h.watchers = make(map[chan State]chan struct{})
	}
	gone := make(chan struct{})
	h.watchers[ch] = gone
	h.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-gone:
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.watchers[ch]; ok {
			delete(h.watchers, ch)
			close(ch)
			close(gone)
		}
	}()
	return ch
}

// sendLatest puts s on ch, dropping the oldest queued state if ch is full.
func sendLatest(ch chan State, s State) {
	for {
		select {
		case ch <- s:
			return
		default:
			select {
			case <-ch:
			default:
			}
		}
	}
}
