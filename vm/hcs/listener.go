package hcs

import (
	"fmt"
	"net"
	"sync"
)

// lateListener is what Listen returns: the guest may connect as soon as
// it boots, so callers listen before Start, but a Hyper-V socket can only
// be bound once the VM's runtime id exists. Connections accepted by the
// inner listener, once bound, are handed to Accept.
type lateListener struct {
	port   uint32
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once // closes closed
	forgot sync.Once
	forget func()

	mu    sync.Mutex
	inner net.Listener
	gone  chan struct{} // closed when the inner listener ends
}

func newLateListener(port uint32, forget func()) *lateListener {
	return &lateListener{port: port, conns: make(chan net.Conn), closed: make(chan struct{}), gone: make(chan struct{}), forget: forget}
}

// bind starts accepting on inner.
func (l *lateListener) bind(inner net.Listener) {
	l.mu.Lock()
	l.inner = inner
	l.mu.Unlock()
	select {
	case <-l.closed:
		inner.Close()
		return
	default:
	}
	go func() {
		defer close(l.gone)
		for {
			c, err := inner.Accept()
			if err != nil {
				return
			}
			select {
			case l.conns <- c:
			case <-l.closed:
				c.Close()
				return
			}
		}
	}()
}

// closeInner ends the inner listener (the VM is gone); Accept then fails.
func (l *lateListener) closeInner() {
	l.mu.Lock()
	inner := l.inner
	l.mu.Unlock()
	if inner != nil {
		inner.Close()
	} else {
		l.once.Do(func() { close(l.closed) })
	}
}

func (l *lateListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
	case <-l.gone:
	}
	return nil, fmt.Errorf("hcs: port %d: %w", l.port, net.ErrClosed)
}

func (l *lateListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	l.forgot.Do(l.forget)
	l.mu.Lock()
	inner := l.inner
	l.mu.Unlock()
	if inner != nil {
		inner.Close()
	}
	return nil
}

func (l *lateListener) Addr() net.Addr { return portAddr(l.port) }

// portAddr is the address of a guest port.
type portAddr uint32

func (portAddr) Network() string  { return "hvsock" }
func (a portAddr) String() string { return fmt.Sprintf("port %d", uint32(a)) }
