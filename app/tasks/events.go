package tasks

import (
	"context"
	"sync"
	"sync/atomic"
)

// EventKind says what an Event reports.
type EventKind string

// The kinds of events.
const (
	// EventCreated: a task was created (Queued).
	EventCreated EventKind = "created"
	// EventState: a task changed state.
	EventState EventKind = "state"
	// EventOutput: output was stored; read it with ReadFrom(Task.ID, Offset).
	EventOutput EventKind = "output"
	// EventRemoved: retention dropped a finished task.
	EventRemoved EventKind = "removed"
)

// Event is one change of the store. Output events carry where the output
// went, not the bytes, so that events stay small and the log stays the one
// source of output.
type Event struct {
	// Kind says what changed.
	Kind EventKind `json:"kind"`
	// Task is the task's snapshot right after the change.
	Task Task `json:"task"`
	// Stream, Offset and Len locate the stored output (EventOutput only).
	Stream Stream `json:"stream,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	Len    int    `json:"len,omitempty"`
}

// Subscription delivers events on C until it ends; Err then says why.
type Subscription struct {
	// C receives events in order; it is closed when the subscription ends.
	C <-chan Event
	c chan Event

	hub  *hub
	stop func() bool
	err  error // guarded by hub.mu
}

// DefaultEventBuffer is the buffer Subscribe uses for a size of 0 or less.
const DefaultEventBuffer = 256

// Subscribe returns a subscription to every later event. Writers never
// wait for subscribers: when C holds buffer undelivered events, the next
// event ends the subscription with ErrLagged, and the subscriber should
// List and subscribe again. It also ends when ctx does (Err returns
// ctx.Err()) and when the store closes (ErrClosed).
func (s *Store) Subscribe(ctx context.Context, buffer int) *Subscription {
	if buffer <= 0 {
		buffer = DefaultEventBuffer
	}
	c := make(chan Event, buffer)
	sub := &Subscription{C: c, c: c, hub: &s.hub}
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	if s.closed.Load() {
		sub.err = ErrClosed
		close(c)
		return sub
	}
	s.hub.subs[sub] = struct{}{}
	s.hub.n.Add(1)
	sub.stop = context.AfterFunc(ctx, func() {
		s.hub.mu.Lock()
		defer s.hub.mu.Unlock()
		s.hub.end(sub, ctx.Err())
	})
	return sub
}

// Err returns why the subscription ended, or nil while it runs.
func (sub *Subscription) Err() error {
	sub.hub.mu.Lock()
	defer sub.hub.mu.Unlock()
	return sub.err
}

// hub fans events out to subscribers.
type hub struct {
	mu   sync.Mutex
	subs map[*Subscription]struct{}
	n    atomic.Int32 // len(subs), read without the lock on the write path
}

// publish delivers the event built by mk, which runs only when someone
// listens, so a store without subscribers pays nothing per write.
func (h *hub) publish(mk func() Event) {
	if h.n.Load() == 0 {
		return
	}
	ev := mk()
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		select {
		case sub.c <- ev:
		default:
			h.end(sub, ErrLagged)
		}
	}
}

// end removes a subscription. Called with h.mu held.
func (h *hub) end(sub *Subscription, err error) {
	if _, ok := h.subs[sub]; !ok {
		return
	}
	delete(h.subs, sub)
	h.n.Add(-1)
	sub.err = err
	close(sub.c)
	if sub.stop != nil {
		sub.stop()
	}
}

func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		h.end(sub, ErrClosed)
	}
}
