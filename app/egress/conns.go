package egress

import (
	"net"
	"sync"
	"sync/atomic"
)

// tracker holds what Close must end: the listeners, the connections both
// ways, and the goroutines serving them (wg).
type tracker struct {
	wg sync.WaitGroup
	// guests counts the guest connections being served (Limits.MaxConns).
	guests atomic.Int64

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
}

func newTracker() *tracker {
	return &tracker{listeners: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}
}

// track registers a listener or connection so Close can end it; false
// after Close.
func (tr *tracker) track(l net.Listener, c net.Conn) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closed {
		return false
	}
	if l != nil {
		tr.listeners[l] = struct{}{}
		tr.wg.Add(1)
	}
	if c != nil {
		tr.conns[c] = struct{}{}
	}
	return true
}

func (tr *tracker) untrack(l net.Listener, c net.Conn) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if l != nil {
		if _, ok := tr.listeners[l]; ok {
			delete(tr.listeners, l)
			l.Close()
		}
		tr.wg.Done()
	}
	if c != nil {
		delete(tr.conns, c)
		c.Close()
	}
}

// hold adds one to wg unless the gate is closed, so that a goroutine
// started after Close began is never waited for in vain; false after Close.
func (tr *tracker) hold() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !tr.closed {
		tr.wg.Add(1)
	}
	return !tr.closed
}

// close marks the tracker closed, calls cancel, and closes every listener
// and connection, without waiting; false if it was closed already.
func (tr *tracker) close(cancel func()) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closed {
		return false
	}
	tr.closed = true
	cancel()
	for l := range tr.listeners {
		delete(tr.listeners, l)
		l.Close()
	}
	for c := range tr.conns {
		c.Close()
	}
	return true
}
