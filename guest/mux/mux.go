// Package mux carries port-addressed, flow-controlled byte streams over one
// ordered byte stream (a virtio-serial port), so a hypervisor without vsock
// offers the same Dial(port) / Listen(port) transport as one with it.
//
// The host side is Client, the guest side is Server. The guest speaks first
// (a hello) so the host never writes into a port the guest has not opened.
// Everything the peer sends is bounded: frame sizes, per-stream buffering
// (credit-based windows), the number of open streams and pending accepts.
//
// On the wire: the Server's hello (see hello.go), then yamux frames
// (github.com/hashicorp/yamux) in both directions, checked frame by frame
// before yamux sees them (guard.go). Each stream starts with the opener's
// 4-byte big-endian port; the other side answers one byte, 1 for accepted
// and 0 for refused, and then the stream carries the caller's bytes.
package mux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Errors callers can test with errors.Is.
var (
	// ErrClosed is returned once the session has ended.
	ErrClosed = errors.New("mux: session closed")
	// ErrRefused is returned by Dial when the peer has no listener on the port.
	ErrRefused = errors.New("mux: connection refused")
	// ErrPortInUse is returned by Listen for a port already listened on.
	ErrPortInUse = errors.New("mux: port already in use")
	// ErrProtocol wraps every violation of the wire protocol by the peer.
	ErrProtocol = errors.New("mux: protocol violation")
	// ErrTooManyStreams is returned by Dial when Config.MaxStreams streams
	// are already open.
	ErrTooManyStreams = errors.New("mux: too many open streams")
	// ErrReset is returned by stream reads and writes after the peer reset
	// the stream.
	ErrReset = errors.New("mux: stream reset by peer")
)

// Config bounds a session. Zero fields take defaults.
type Config struct {
	// MaxStreams bounds concurrently open streams (default 1024).
	MaxStreams int
	// AcceptBacklog bounds streams waiting in a listener's Accept (default 64).
	AcceptBacklog int
	// Window is the per-stream receive buffer in bytes (default 256 KiB,
	// which is also the minimum; at most 16 MiB).
	Window int
}

// Limits the Config cannot change.
const (
	defaultMaxStreams    = 1024
	defaultAcceptBacklog = 64
	minWindow            = 256 << 10 // yamux's initial window
	maxWindow            = 16 << 20
	// handshakeTimeout bounds how long an opened stream may take to name
	// its port and how long the acceptor may take to answer.
	handshakeTimeout = 10 * time.Second
	// openBacklog bounds streams the peer opened that our accept loop has
	// not picked up yet, and our own opens the peer has not acknowledged.
	openBacklog = 256
)

func (c Config) withDefaults() Config {
	if c.MaxStreams <= 0 {
		c.MaxStreams = defaultMaxStreams
	}
	if c.AcceptBacklog <= 0 {
		c.AcceptBacklog = defaultAcceptBacklog
	}
	c.Window = min(max(c.Window, minWindow), maxWindow)
	return c
}

func (c Config) yamux() *yamux.Config {
	return &yamux.Config{
		AcceptBacklog:   openBacklog,
		EnableKeepAlive: false, // the peer is a VM on the same host; no NAT to keep open
		// Required by yamux.VerifyConfig even with keepalives off.
		KeepAliveInterval: time.Minute,
		// A peer that stops reading the port for this long fails the write.
		ConnectionWriteTimeout: 30 * time.Second,
		MaxStreamWindowSize:    uint32(c.Window),
		// A stream whose open the peer does not acknowledge in time ends the
		// session: the peer's accept loop is stuck.
		StreamOpenTimeout: time.Minute,
		// A stream closed (or write-closed) locally is reset if the peer has
		// not closed its side by then, so a peer cannot pin streams forever.
		StreamCloseTimeout: 5 * time.Minute,
		LogOutput:          io.Discard,
	}
}

// Session is one multiplexed connection. Its methods are safe for concurrent use.
type Session struct {
	conn   io.ReadWriteCloser
	cfg    Config
	client bool
	guard  *guard

	ready chan struct{} // closed once yamux runs (after the hello)
	done  chan struct{} // closed once the session has ended

	mu        sync.Mutex
	ys        *yamux.Session
	closing   bool
	err       error
	listeners map[uint32]*listener
}

// Client starts the host side over conn. It returns at once; Dial waits for
// the guest's hello (bounded by the Dial context).
func Client(conn io.ReadWriteCloser, cfg Config) *Session {
	s := newSession(conn, cfg, true)
	go func() {
		if err := readHello(s.guard.r); err != nil {
			s.setErr(err)
			s.abort()
			return
		}
		s.start(yamux.Client)
	}()
	return s
}

// Server starts the guest side over conn and sends the hello.
func Server(conn io.ReadWriteCloser, cfg Config) *Session {
	s := newSession(conn, cfg, false)
	go func() {
		if _, err := conn.Write(hello()); err != nil {
			s.setErr(fmt.Errorf("%w: write hello: %w", ErrClosed, err))
			s.abort()
			return
		}
		s.start(yamux.Server)
	}()
	return s
}

func newSession(conn io.ReadWriteCloser, cfg Config, client bool) *Session {
	s := &Session{
		conn:      conn,
		cfg:       cfg.withDefaults(),
		client:    client,
		ready:     make(chan struct{}),
		done:      make(chan struct{}),
		listeners: make(map[uint32]*listener),
	}
	s.guard = newGuard(conn, !client, uint32(s.cfg.Window), s.setErr)
	return s
}

// start runs yamux once the hello has gone through.
func (s *Session) start(newYamux func(io.ReadWriteCloser, *yamux.Config) (*yamux.Session, error)) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.abort()
		return
	}
	ys, err := newYamux(guardedConn{s.guard, newFrameWriter(s.conn), s.conn}, s.cfg.yamux())
	if err != nil { // only a bad yamux.Config, which is ours
		s.mu.Unlock()
		s.setErr(fmt.Errorf("mux: %w", err))
		s.abort()
		return
	}
	s.ys = ys
	s.mu.Unlock()
	close(s.ready)
	s.acceptLoop(ys)
}

// abort ends a session that never got to run yamux.
func (s *Session) abort() {
	s.conn.Close()
	s.finish(ErrClosed)
}

// finish records why the session ended (unless a reason is known already),
// closes the listeners and marks the session done.
func (s *Session) finish(why error) {
	s.setErr(why)
	s.mu.Lock()
	ls := s.listeners
	s.listeners = nil
	s.mu.Unlock()
	close(s.done)
	for _, l := range ls {
		l.shut()
	}
}

// setErr records the first reason the session ends.
func (s *Session) setErr(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// fail ends the session because of err.
func (s *Session) fail(err error) {
	s.setErr(err)
	s.mu.Lock()
	s.closing = true
	ys := s.ys
	s.mu.Unlock()
	if ys != nil {
		ys.Close()
	} else {
		s.conn.Close()
	}
}

// acceptLoop hands every stream the peer opens to a handshake, and notices
// when yamux ends.
func (s *Session) acceptLoop(ys *yamux.Session) {
	for {
		st, err := ys.AcceptStream()
		if err != nil {
			if !ys.IsClosed() {
				continue // acknowledging one stream failed; yamux goes on
			}
			s.finish(yamuxErr(shutdownErr(ys, err)))
			return
		}
		// Refused streams linger until the peer closes its side; a peer that
		// never does holds at most this many before the session ends.
		if n := ys.NumStreams(); n > 2*s.cfg.MaxStreams {
			st.Close()
			s.fail(fmt.Errorf("%w: peer keeps %d streams open (limit %d)", ErrProtocol, n, s.cfg.MaxStreams))
			continue
		}
		go s.handshake(st, ys.NumStreams() > s.cfg.MaxStreams)
	}
}

// shutdownErr digs out why yamux ended. AcceptStream says so only once
// the streams still queued for acceptance are gone; until then it fails
// acknowledging them with ErrSessionShutdown.
func shutdownErr(ys *yamux.Session, err error) error {
	for range openBacklog + 1 {
		if !errors.Is(err, yamux.ErrSessionShutdown) {
			return err
		}
		var st *yamux.Stream
		if st, err = ys.AcceptStream(); st != nil {
			st.Close()
			err = yamux.ErrSessionShutdown
		}
	}
	return err
}

// yamuxErr maps the reason yamux gives for its end to ours.
func yamuxErr(err error) error {
	switch {
	case errors.Is(err, yamux.ErrSessionShutdown):
		return ErrClosed
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: peer hung up (%w)", ErrClosed, io.EOF)
	case errors.Is(err, yamux.ErrInvalidVersion), errors.Is(err, yamux.ErrInvalidMsgType),
		errors.Is(err, yamux.ErrDuplicateStream), errors.Is(err, yamux.ErrRecvWindowExceeded),
		errors.Is(err, yamux.ErrUnexpectedFlag), errors.Is(err, yamux.ErrTimeout),
		errors.Is(err, yamux.ErrConnectionWriteTimeout):
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	if msg := err.Error(); msg == "yamux protocol error" || msg == "remote yamux internal error" || msg == "unexpected go away received" {
		return fmt.Errorf("%w: peer: %s", ErrProtocol, msg)
	}
	return fmt.Errorf("%w: %w", ErrClosed, err)
}

// handshake reads the port a peer-opened stream asks for and answers it.
func (s *Session) handshake(st *yamux.Stream, full bool) {
	st.SetDeadline(time.Now().Add(handshakeTimeout))
	port, err := readPort(st)
	if err != nil {
		st.Close()
		return
	}
	var l *listener
	if !full {
		l = s.listener(port)
	}
	accepted := l != nil && l.reserve()
	reply := []byte{0}
	if accepted {
		reply[0] = 1
	}
	if _, err := st.Write(reply); err != nil || !accepted {
		if accepted {
			l.unreserve()
		}
		st.Close()
		return
	}
	st.SetDeadline(time.Time{})
	l.deliver(newConn(s, st, Addr{Port: port}, Addr{}))
}

// Dial opens a stream to port on the peer.
func (s *Session) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	select {
	case <-s.ready:
	case <-s.done:
		return nil, s.dialErr(port, s.Err())
	case <-ctx.Done():
		return nil, s.dialErr(port, fmt.Errorf("waiting for the peer's hello: %w", ctx.Err()))
	}
	select {
	case <-s.done:
		return nil, s.dialErr(port, s.Err())
	default:
	}
	if n := s.ys.NumStreams(); n >= s.cfg.MaxStreams {
		return nil, s.dialErr(port, ErrTooManyStreams)
	}
	type result struct {
		c   *conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := s.open(ctx, port)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, s.dialErr(port, r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		// yamux may still be waiting for an open slot; drop whatever it
		// produces.
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, s.dialErr(port, ctx.Err())
	}
}

func (s *Session) dialErr(port uint32, err error) error {
	return fmt.Errorf("mux: dial port %d: %w", port, err)
}

// open runs the opener's half of the port handshake.
func (s *Session) open(ctx context.Context, port uint32) (*conn, error) {
	st, err := s.ys.OpenStream()
	if err != nil {
		return nil, s.streamErr(err)
	}
	// ctx ends the handshake through stop below; the timeout bounds a peer
	// that acknowledges streams but never answers.
	st.SetDeadline(time.Now().Add(handshakeTimeout))
	stop := context.AfterFunc(ctx, func() { st.SetDeadline(time.Unix(1, 0)) })
	reply, err := func() (byte, error) {
		if _, err := st.Write(putPort(port)); err != nil {
			return 0, err
		}
		var b [1]byte
		_, err := io.ReadFull(st, b[:])
		return b[0], err
	}()
	if !stop() || (err != nil && ctx.Err() != nil) {
		st.Close()
		return nil, ctx.Err()
	}
	switch {
	case err == nil && reply == 1:
		st.SetDeadline(time.Time{})
		return newConn(s, st, Addr{}, Addr{Port: port}), nil
	case err == nil && reply == 0,
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, yamux.ErrConnectionReset):
		// A reset is the peer's yamux refusing the open (backlog full).
		st.Close()
		select {
		case <-s.done:
			return nil, s.Err()
		default:
		}
		return nil, ErrRefused
	case err == nil:
		st.Close()
		perr := fmt.Errorf("%w: handshake answer %d", ErrProtocol, reply)
		s.fail(perr)
		return nil, perr
	default:
		st.Close()
		return nil, s.streamErr(err)
	}
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

// Close ends the session and every stream in it.
func (s *Session) Close() error {
	s.fail(ErrClosed)
	<-s.done
	return nil
}

// Done is closed when the session has ended; Err then says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended, or nil while it runs.
func (s *Session) Err() error {
	select {
	case <-s.done:
	default:
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errLocked()
}

func (s *Session) errLocked() error {
	if s.err == nil {
		return ErrClosed
	}
	return s.err
}

// streamErr maps a yamux error on a stream to ours.
func (s *Session) streamErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, yamux.ErrTimeout):
		return fmt.Errorf("mux: %w", errDeadline)
	case errors.Is(err, yamux.ErrConnectionReset):
		return ErrReset
	case errors.Is(err, yamux.ErrRemoteGoAway):
		return fmt.Errorf("%w: the peer accepts no more streams", ErrRefused)
	case errors.Is(err, yamux.ErrSessionShutdown):
		<-s.done // yamux has ended, so the accept loop finishes the session
		return s.Err()
	}
	return err
}
