package mux

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// listener queues accepted streams for one port.
type listener struct {
	s       *Session
	port    uint32
	backlog int

	mu       sync.Mutex
	queue    []*conn
	reserved int
	waiting  []*conn // opens held unanswered while the backlog is full
	closed   bool
	ready    chan struct{} // signalled when queue grows or the listener closes
	done     chan struct{}
}

func newListener(s *Session, port uint32, backlog int) *listener {
	return &listener{s: s, port: port, backlog: backlog, ready: make(chan struct{}, 1), done: make(chan struct{})}
}

// reserve takes a backlog slot for a stream about to be accepted; false
// when the backlog is full or the listener closed.
func (l *listener) reserve() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || len(l.queue)+l.reserved >= l.backlog {
		return false
	}
	l.reserved++
	return true
}

// offer takes a stream the peer opens: a backlog slot (true), else a place
// among the opens held unanswered until Accept makes room (false, nil), else
// nothing: refused.
func (l *listener) offer(c *conn) (slot bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return false, ErrRefused
	case len(l.queue)+l.reserved < l.backlog:
		l.reserved++
		return true, nil
	case l.s.held.Add(1) > openBacklog:
		l.s.held.Add(-1)
		return false, ErrRefused
	}
	l.waiting = append(l.waiting, c)
	c.htimer = time.AfterFunc(holdTimeout, func() { l.expire(c) })
	return false, nil
}

// unhold takes c from the held opens; false if it was not there. l.mu is held.
func (l *listener) unhold(c *conn) bool {
	for i, w := range l.waiting {
		if w == c {
			l.waiting = append(l.waiting[:i], l.waiting[i+1:]...)
			l.s.held.Add(-1)
			c.htimer.Stop()
			return true
		}
	}
	return false
}

// expire refuses a held open the backlog had no room for in time.
func (l *listener) expire(c *conn) {
	l.mu.Lock()
	held := l.unhold(c)
	l.mu.Unlock()
	if held {
		c.abandon()
	}
}

// admit answers held opens while the backlog has room.
func (l *listener) admit() {
	var in []*conn
	l.mu.Lock()
	for len(l.waiting) > 0 && !l.closed && len(l.queue)+l.reserved < l.backlog {
		c := l.waiting[0]
		l.unhold(c)
		l.reserved++
		in = append(in, c)
	}
	l.mu.Unlock()
	for _, c := range in {
		c.mu.Lock()
		live := !c.dead && !c.gone && !c.reset
		c.mu.Unlock()
		if !live {
			l.mu.Lock()
			l.reserved--
			l.mu.Unlock()
			continue
		}
		c.s.enqueue(c.ep, flagACK, c.id, c.window-minWindow, ctrlQueue)
		l.deliver(c)
	}
}

// deliver queues c in its reserved slot.
func (l *listener) deliver(c *conn) {
	l.mu.Lock()
	l.reserved--
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return
	}
	l.queue = append(l.queue, c)
	l.mu.Unlock()
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// Accept waits for the next stream the peer opens to the port.
func (l *listener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, l.closedErr()
		}
		if len(l.queue) > 0 {
			c := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			more := len(l.queue) > 0
			held := len(l.waiting) > 0
			l.mu.Unlock()
			if held {
				l.admit()
				more = true
			}
			if more {
				select {
				case l.ready <- struct{}{}:
				default:
				}
			}
			return c, nil
		}
		l.mu.Unlock()
		select {
		case <-l.ready:
		case <-l.done:
		}
	}
}

func (l *listener) closedErr() error {
	// The session's error is set before it shuts its listeners.
	l.s.mu.Lock()
	err := l.s.err
	l.s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("mux: accept on port %d: %w (%w)", l.port, net.ErrClosed, err)
	}
	return fmt.Errorf("mux: accept on port %d: %w", l.port, net.ErrClosed)
}

// Close stops listening, frees the port and closes streams not yet accepted.
func (l *listener) Close() error {
	if !l.shut() {
		return net.ErrClosed
	}
	l.s.unlisten(l.port, l)
	return nil
}

// shut closes the listener; false if it was closed already.
func (l *listener) shut() bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.closed = true
	q := l.queue
	l.queue = nil
	w := append([]*conn(nil), l.waiting...)
	for _, c := range w {
		l.unhold(c)
	}
	l.mu.Unlock()
	close(l.done)
	for _, c := range q {
		c.Close()
	}
	for _, c := range w {
		c.abandon() // refused
	}
	return true
}

func (l *listener) Addr() net.Addr { return Addr{Port: l.port} }
