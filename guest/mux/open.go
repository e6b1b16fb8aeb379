package mux

// Opening streams: Dial opens one to a port of the peer's, Listen accepts
// those the peer opens to a port of ours.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Dial opens a stream to port on the peer.
func (s *Session) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	for {
		ep, err := s.epoch(ctx)
		if err != nil {
			return nil, s.dialErr(port, err)
		}
		c, err := s.open(ctx, ep, port)
		// An open cut short by the peer's restart delivered nothing; the
		// successor gets it. Restarts are bounded, so is this loop.
		if errors.Is(err, ErrPeerRestarted) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return nil, s.dialErr(port, err)
		}
		return c, nil
	}
}

// epoch waits for a running epoch.
func (s *Session) epoch(ctx context.Context) (*epoch, error) {
	for {
		s.mu.Lock()
		ready := s.epReady
		s.mu.Unlock()
		select {
		case <-ready:
		case <-s.done:
			return nil, s.Err()
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the peer's hello: %w", ctx.Err())
		}
		select {
		case <-s.done:
			return nil, s.Err()
		default:
		}
		s.mu.Lock()
		var ep *epoch
		if s.epReady == ready {
			ep = s.ep
		}
		s.mu.Unlock()
		if ep == nil {
			continue
		}
		ep.mu.Lock()
		dead := ep.dead
		ep.mu.Unlock()
		if !dead {
			return ep, nil
		}
		// The peer may have restarted; its successor's epoch follows.
		select {
		case <-ep.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !ep.restarted {
			return nil, ep.err
		}
	}
}

func (s *Session) dialErr(port uint32, err error) error {
	return fmt.Errorf("mux: dial port %d: %w", port, err)
}

// open opens a stream in ep and waits for the peer's answer.
func (s *Session) open(ctx context.Context, ep *epoch, port uint32) (*conn, error) {
	ep.mu.Lock()
	if ep.dead {
		ep.mu.Unlock()
		<-ep.done
		return nil, ep.err
	}
	if len(ep.streams)-ep.peers >= s.cfg.MaxStreams {
		ep.mu.Unlock()
		return nil, ErrTooManyStreams
	}
	if ep.nextID > 1<<31 {
		ep.mu.Unlock()
		return nil, fmt.Errorf("%w: stream ids used up", ErrTooManyStreams)
	}
	c := newConn(s, ep, ep.nextID, Addr{}, Addr{Port: port}, s.cfg.Window)
	c.opening = true
	c.openc = make(chan struct{})
	ep.nextID += 2
	ep.streams[c.id] = c
	// Under ep.mu, so that opens reach the peer in id order.
	s.enqueue(ep, flagSYN, c.id, port, ctrlQueue)
	if extra := c.window - minWindow; extra > 0 {
		s.enqueue(ep, 0, c.id, extra, ctrlQueue)
	}
	ep.mu.Unlock()

	timer := time.NewTimer(handshakeTimeout)
	defer timer.Stop()
	var why error
	select {
	case <-c.openc:
	case <-ctx.Done():
		why = ctx.Err()
	case <-timer.C:
		why = fmt.Errorf("mux: the peer did not answer within %s: %w", handshakeTimeout, errDeadline)
	}
	c.mu.Lock()
	switch {
	case c.dead:
		c.mu.Unlock()
		<-ep.done
		return nil, ep.err
	case why != nil:
		// Given up: whatever the peer answers is dropped.
		c.answer()
		c.mu.Unlock()
		c.abandon()
		return nil, why
	case c.refused:
		c.mu.Unlock()
		return nil, ErrRefused
	}
	c.mu.Unlock()
	return c, nil
}

// Listen accepts streams the peer opens to port.
func (s *Session) Listen(port uint32) (net.Listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listeners == nil {
		return nil, fmt.Errorf("mux: listen on port %d: %w", port, s.errLocked())
	}
	if _, ok := s.listeners[port]; ok {
		return nil, fmt.Errorf("mux: listen on port %d: %w", port, ErrPortInUse)
	}
	l := newListener(s, port, s.cfg.AcceptBacklog)
	s.listeners[port] = l
	return l, nil
}

func (s *Session) listener(port uint32) *listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listeners[port]
}

// unlisten frees port if l still holds it.
func (s *Session) unlisten(port uint32, l *listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listeners[port] == l {
		delete(s.listeners, port)
	}
}
