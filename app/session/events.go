package session

import (
	"context"
	"time"
)

// EventKind says what an Event reports.
type EventKind string

// Event kinds.
const (
	// EventState: the state or the boot phase changed; Status is set.
	EventState EventKind = "state"
	// EventLost: the VM of Generation died unexpectedly (Error says how);
	// its tasks are gone. A state event to restarting came just before.
	EventLost EventKind = "lost"
	// EventReconnected: the guest restarted its agent (it crashed, or a
	// root task killed it) and the host reached the new one on the same
	// VM of Generation; tasks that ran on the old agent are gone, and
	// Error says so. A state event with the new AgentRestarts follows.
	EventReconnected EventKind = "reconnected"
	// EventLag: the subscriber fell behind and Dropped events were lost;
	// the next state event brings it up to date.
	EventLag EventKind = "lag"
)

// Event is one notification to a subscriber.
type Event struct {
	Kind       EventKind `json:"kind"`
	Time       time.Time `json:"time"`
	Status     *Status   `json:"status,omitempty"`
	Generation int       `json:"generation,omitempty"`
	Error      string    `json:"error,omitempty"`
	Dropped    int       `json:"dropped,omitempty"`
}

// DefaultEventBuffer is the events a subscriber may fall behind by before
// it loses some.
const DefaultEventBuffer = 64

type subscriber struct {
	ch      chan Event
	dropped int
}

// Subscribe delivers the current status, then every event, until ctx is
// done or the session is closed; then the channel closes. A subscriber that
// does not keep up never slows the session: events it has no room for are
// dropped and counted, and an EventLag says so once there is room again.
// buffer ≤ 0 means DefaultEventBuffer.
func (s *Session) Subscribe(ctx context.Context, buffer int) <-chan Event {
	if buffer <= 0 {
		buffer = DefaultEventBuffer
	}
	buffer = max(buffer, 2) // room for a lag marker and the event after it
	sub := &subscriber{ch: make(chan Event, buffer)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		close(sub.ch)
		return sub.ch
	}
	st := s.snap.status(s.clock.Now())
	sub.ch <- Event{Kind: EventState, Time: s.clock.Now(), Status: &st}
	s.subs[sub] = struct{}{}
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.subs[sub]; ok {
			delete(s.subs, sub)
			close(sub.ch)
		}
	})
	return sub.ch
}

// publishLocked hands e to every subscriber without blocking. s.mu is held.
func (s *Session) publishLocked(e Event) {
	for sub := range s.subs {
		if sub.dropped > 0 {
			select {
			case sub.ch <- Event{Kind: EventLag, Time: e.Time, Dropped: sub.dropped}:
				sub.dropped = 0
			default:
			}
		}
		if sub.dropped > 0 {
			sub.dropped++
			continue
		}
		select {
		case sub.ch <- e:
		default:
			sub.dropped++
		}
	}
}

// closeSubscribersLocked ends every subscription. s.mu is held.
func (s *Session) closeSubscribersLocked() {
	for sub := range s.subs {
		delete(s.subs, sub)
		close(sub.ch)
	}
}
