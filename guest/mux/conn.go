package mux

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// errDeadline is what reads and writes return when a deadline passes, as for
// any net.Conn.
var errDeadline = os.ErrDeadlineExceeded

// Addr is the address of one end of a stream: the port it was opened to on
// the accepting side, 0 on the opening side (streams have no source port).
type Addr struct{ Port uint32 }

// Network returns "mux".
func (Addr) Network() string { return "mux" }

// String returns "mux:<port>".
func (a Addr) String() string { return fmt.Sprintf("mux:%d", a.Port) }

// conn is one stream, a net.Conn with CloseWrite.
type conn struct {
	st            *yamux.Stream
	s             *Session
	ep            *epoch
	local, remote Addr
	closed        atomic.Bool
	closeOnce     sync.Once
}

func newConn(s *Session, ep *epoch, st *yamux.Stream, local, remote Addr) *conn {
	return &conn{st: st, s: s, ep: ep, local: local, remote: remote}
}

func (c *conn) Read(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	n, err := c.st.Read(p)
	if err == io.EOF && c.st.Session().IsClosed() {
		// After the session ended yamux reports EOF on every stream; say why.
		<-c.ep.done
		return n, c.ep.err
	}
	if err == io.EOF {
		return n, io.EOF
	}
	return n, c.err(err)
}

func (c *conn) Write(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	n, err := c.st.Write(p)
	return n, c.err(err)
}

func (c *conn) err(err error) error {
	if err == nil {
		return nil
	}
	if c.closed.Load() {
		return net.ErrClosed
	}
	if c.st.Session().IsClosed() {
		<-c.ep.done
		return c.ep.err
	}
	if errors.Is(err, yamux.ErrStreamClosed) {
		return fmt.Errorf("mux: write after CloseWrite: %w", io.ErrClosedPipe)
	}
	return c.ep.streamErr(err)
}

// CloseWrite half-closes the stream: the peer reads EOF, this side can
// still read.
func (c *conn) CloseWrite() error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	return c.err(c.st.Close())
}

// Close closes both directions. What the peer still sends is read and
// dropped, so its writes do not stall on a full window.
func (c *conn) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.closed.Store(true)
		c.st.Close()
		c.st.SetReadDeadline(time.Time{})
		go drain(c.st)
	})
	if !first {
		return net.ErrClosed
	}
	return nil
}

// drain reads a closed stream until the peer closes its side, the stream is
// reset (yamux does so StreamCloseTimeout after Close), or the session ends.
func drain(st *yamux.Stream) {
	buf := make([]byte, 4096)
	for {
		if _, err := st.Read(buf); err != nil {
			return
		}
	}
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) SetDeadline(t time.Time) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	return c.st.SetDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	return c.st.SetReadDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	return c.st.SetWriteDeadline(t)
}

// listener queues accepted streams for one port.
type listener struct {
	s       *Session
	port    uint32
	backlog int

	mu       sync.Mutex
	queue    []*conn
	reserved int
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

func (l *listener) unreserve() {
	l.mu.Lock()
	l.reserved--
	l.mu.Unlock()
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
			l.mu.Unlock()
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
	select {
	case <-l.s.done:
		return fmt.Errorf("mux: accept on port %d: %w (%w)", l.port, net.ErrClosed, l.s.Err())
	default:
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
	l.mu.Unlock()
	close(l.done)
	for _, c := range q {
		c.Close()
	}
	return true
}

func (l *listener) Addr() net.Addr { return Addr{Port: l.port} }
