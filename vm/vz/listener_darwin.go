package vz

import (
	"net"
	"sync"

	"github.com/Code-Hex/vz/v3"
)

// listener adapts a vz listener to net.Listener semantics the host code
// relies on: Close makes a pending Accept return net.ErrClosed. vz v3's
// own Accept never returns after Close (it waits on a channel that Close
// does not close), so one goroutine per listener pumps vz's Accept and is
// left blocked there once the listener is closed: a bounded leak of one
// goroutine per port per machine, which holds no connection.
type listener struct {
	vl      *vz.VirtioSocketListener
	conns   chan net.Conn
	done    chan struct{}
	once    sync.Once
	onClose func()
}

func newListener(vl *vz.VirtioSocketListener, onClose func()) *listener {
	l := &listener{vl: vl, conns: make(chan net.Conn), done: make(chan struct{}), onClose: onClose}
	go l.pump()
	return l
}

func (l *listener) pump() {
	for {
		c, err := l.vl.Accept()
		if err != nil {
			// A connection the framework handed over but Go could not
			// wrap; the guest sees it closed. Keep listening.
			select {
			case <-l.done:
				return
			default:
				continue
			}
		}
		select {
		case l.conns <- c:
		case <-l.done:
			c.Close()
			return
		}
	}
}

// Accept waits for the next connection the guest opens to this port.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops listening: the guest's next connection to the port is
// refused, and a pending Accept returns net.ErrClosed.
func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.vl.Close()
		if l.onClose != nil {
			l.onClose()
		}
	})
	return nil
}

// Addr is the vsock address (host CID 2, the port).
func (l *listener) Addr() net.Addr { return l.vl.Addr() }
