package service

import (
	"context"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/tasks"
)

// Event is one thing that happened in the service: exactly one of Session,
// Task, Egress, Ask and Pending is set, as Kind says. A "changes" event
// (Type "changes" too, for readers that look there) carries the number of
// pending changes whenever the pending set may have changed. Task output events locate the
// output in the task's log (read it with Logs); they do not carry it.
type Event struct {
	Kind    string           `json:"kind"` // "session", "task", "egress", "ask", "ask-answered", "changes" or "lag"
	Type    string           `json:"type,omitempty"`
	Session *session.Event   `json:"session,omitempty"`
	Task    *tasks.Event     `json:"task,omitempty"`
	Egress  *egress.Decision `json:"egress,omitempty"`
	Ask     *Ask             `json:"ask,omitempty"`
	Pending *int             `json:"pending,omitempty"`
}

// Events merges the session's state changes, task changes and egress
// decisions into one stream until ctx is done. Each source drops events
// for a consumer that does not keep up instead of slowing down; a "lag"
// event says the consumer should re-read the state (Status, Tasks).
func (s *Service) Events(ctx context.Context, answer bool) (<-chan Event, error) {
	ctx, cancel := context.WithCancel(ctx)
	ae := s.asks.subscribe(ctx, answer)
	se := s.sess.Subscribe(ctx, 0)
	ts := s.store.Subscribe(ctx, 256)
	te := ts.C
	ee := s.gate.Subscribe(ctx)
	ce := s.subscribeChanges(ctx)
	out := make(chan Event, 64)
	go func() {
		defer cancel()
		defer close(out)
		send := func(e Event) bool {
			select {
			case out <- e:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for se != nil || te != nil || ee != nil || ae != nil || ce != nil {
			var e Event
			select {
			case <-ctx.Done():
				return
			case v, ok := <-se:
				if !ok {
					se = nil
					continue
				}
				e = Event{Kind: "session", Session: &v}
			case v, ok := <-te:
				if !ok {
					te = nil
					if ctx.Err() == nil {
						// Dropped for lagging: say so and follow again.
						ts = s.store.Subscribe(ctx, 256)
						te = ts.C
						if !send(Event{Kind: "lag"}) {
							return
						}
					}
					continue
				}
				e = Event{Kind: "task", Task: &v}
			case v, ok := <-ae:
				if !ok {
					ae = nil
					continue
				}
				e = v
			case v, ok := <-ce:
				if !ok {
					ce = nil
					continue
				}
				e = v
			case v, ok := <-ee:
				if !ok {
					ee = nil
					continue
				}
				e = Event{Kind: "egress", Egress: &v}
			}
			if !send(e) {
				return
			}
		}
	}()
	return out, nil
}
