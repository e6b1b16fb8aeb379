// Package mux carries port-addressed, flow-controlled byte streams over one
// ordered byte stream (a virtio-serial port), so a hypervisor without vsock
// offers the same Dial(port) / Listen(port) transport as one with it.
//
// The host side is Client, the guest side is Server. The guest speaks first
// (a hello) so the host never writes into a port the guest has not opened.
// Everything the peer sends is bounded: frame sizes, per-stream buffering
// (credit-based windows), the number of open streams and pending accepts.
//
// On the wire: the Server's hello and the Client's ack (see hello.go), then
// yamux frames (github.com/hashicorp/yamux) in both directions, checked
// frame by frame before yamux sees them (guard.go). Each stream starts with the opener's
// 4-byte big-endian port; the other side answers one byte, 1 for accepted
// and 0 for refused, and then the stream carries the caller's bytes.
//
// A guest process that dies and is restarted opens the port afresh and
// sends a new hello; the Client takes one in place of a frame header as
// the peer having restarted, ends the old streams and goes on with the new
// peer over the same connection (a bounded number of times).
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
	// ErrPeerRestarted is returned by the streams of a Client session whose
	// peer started afresh; the session goes on with the new peer.
	ErrPeerRestarted = fmt.Errorf("%w: the peer restarted", ErrClosed)
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
	// PeerRestarts bounds how often a Client goes on with a restarted peer
	// within RestartWindow (default 8; negative: never, a restart ends the
	// session); the next restart ends the session as a protocol violation.
	PeerRestarts int
	// RestartWindow is the period PeerRestarts counts over (default 10 min).
	RestartWindow time.Duration
}

// Limits the Config cannot change.
const (
	defaultMaxStreams    = 1024
	defaultAcceptBacklog = 64
	// The host's session (app/session) replaces a VM whose agent restarts
	// more than three times in ten minutes; this is the backstop for
	// restarts faster than its health checks.
	defaultPeerRestarts  = 8
	defaultRestartWindow = 10 * time.Minute
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
	if c.PeerRestarts == 0 {
		c.PeerRestarts = defaultPeerRestarts
	}
	c.PeerRestarts = max(c.PeerRestarts, 0)
	if c.RestartWindow <= 0 {
		c.RestartWindow = defaultRestartWindow
	}
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

	done chan struct{} // closed once the session has ended

	// wmu serialises writes to conn; wepoch is the epoch allowed to write,
	// so a dead epoch's yamux cannot write into its successor's stream.
	wmu    sync.Mutex
	wepoch uint64

	mu        sync.Mutex
	ep        *epoch        // the running yamux session; nil until a hello
	epReady   chan struct{} // closed when ep is set; replaced when the peer restarts
	closing   bool
	err       error
	listeners map[uint32]*listener
	restarts  []time.Time // the peer's restarts within Config.RestartWindow
	restarted int         // the peer's restarts in all
}

// epoch is one yamux session over the connection: the first, or one after
// the peer restarted. Streams belong to one epoch and end with it.
type epoch struct {
	n    uint64
	ys   *yamux.Session
	done chan struct{} // closed once ys has ended; err is then set
	err  error
}

// Client starts the host side over conn. It returns at once; Dial waits for
// the guest's hello (bounded by the Dial context). When the guest restarts
// (a fresh hello where a frame should start), streams of the old session
// end with ErrPeerRestarted and Dial reaches the new one, at most
// Config.PeerRestarts times per Config.RestartWindow; the session ends on
// the next one.
func Client(conn io.ReadWriteCloser, cfg Config) *Session {
	s := newSession(conn, cfg, true)
	go s.runClient()
	return s
}

func (s *Session) runClient() {
	n, err := readHello(s.guard.r)
	for {
		if err == nil {
			err = s.writeAck(n)
		}
		if err != nil {
			s.setErr(err)
			s.abort()
			return
		}
		ep := s.start(yamux.Client)
		if ep == nil {
			return
		}
		if !s.guard.restarted.Load() {
			s.finish(ep.err)
			return
		}
		if err = s.peerRestarted(); err != nil {
			s.fail(err)
			s.conn.Close()
			s.finish(err)
			return
		}
		s.guard.reset()
		n, err = s.readHelloBounded()
	}
}

// writeAck answers hello n and moves writing to the next epoch; what a dead
// epoch's yamux still tries to write is dropped from here on.
func (s *Session) writeAck(n nonce) error {
	timer := time.AfterFunc(handshakeTimeout, func() { s.conn.Close() })
	s.wmu.Lock()
	s.wepoch++
	_, err := s.conn.Write(ack(n))
	s.wmu.Unlock()
	if !timer.Stop() || err != nil {
		return fmt.Errorf("%w: answer the peer's hello: %v", ErrClosed, err)
	}
	return nil
}

// readHelloBounded reads a restarted peer's hello, which must follow its
// magic within handshakeTimeout.
func (s *Session) readHelloBounded() (nonce, error) {
	timer := time.AfterFunc(handshakeTimeout, func() { s.conn.Close() })
	n, err := readHello(s.guard.r)
	if !timer.Stop() && err == nil {
		err = fmt.Errorf("%w: the restarted peer's hello took too long", ErrProtocol)
	}
	if err != nil && !errors.Is(err, ErrProtocol) {
		err = fmt.Errorf("%w: the restarted peer's hello: %w", ErrProtocol, err)
	}
	return n, err
}

// peerRestarted counts a restart of the peer against the limit.
func (s *Session) peerRestarted() error {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return ErrClosed
	}
	kept := s.restarts[:0]
	for _, t := range s.restarts {
		if now.Sub(t) < s.cfg.RestartWindow {
			kept = append(kept, t)
		}
	}
	s.restarts = kept
	if len(s.restarts) >= s.cfg.PeerRestarts {
		return fmt.Errorf("%w: the peer restarted %d times within %s", ErrProtocol, len(s.restarts)+1, s.cfg.RestartWindow)
	}
	s.restarts = append(s.restarts, now)
	s.restarted++
	return nil
}

// Restarts is how many times the peer restarted and the session went on
// with its successor.
func (s *Session) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarted
}

// Server starts the guest side over conn and sends the hello.
func Server(conn io.ReadWriteCloser, cfg Config) *Session {
	s := newSession(conn, cfg, false)
	go func() {
		n := newNonce()
		if _, err := conn.Write(hello(n)); err != nil {
			s.setErr(fmt.Errorf("%w: write hello: %w", ErrClosed, err))
			s.abort()
			return
		}
		if err := awaitAck(s.guard.r, n); err != nil {
			s.setErr(err)
			s.abort()
			return
		}
		s.wepoch = 1
		if ep := s.start(yamux.Server); ep != nil {
			s.finish(ep.err)
		}
	}()
	return s
}

func newSession(conn io.ReadWriteCloser, cfg Config, client bool) *Session {
	s := &Session{
		conn:      conn,
		cfg:       cfg.withDefaults(),
		client:    client,
		epReady:   make(chan struct{}),
		done:      make(chan struct{}),
		listeners: make(map[uint32]*listener),
	}
	s.guard = newGuard(conn, !client, uint32(s.cfg.Window), s.setErr)
	return s
}

// start runs one epoch of yamux once a hello has gone through, and returns
// it when it has ended; nil if the session was closed first.
func (s *Session) start(newYamux func(io.ReadWriteCloser, *yamux.Config) (*yamux.Session, error)) *epoch {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.abort()
		return nil
	}
	n := s.wepoch
	w := &epochWriter{s: s, n: n}
	ys, err := newYamux(guardedConn{s.guard, newFrameWriter(w), s.conn}, s.cfg.yamux())
	if err != nil { // only a bad yamux.Config, which is ours
		s.mu.Unlock()
		s.setErr(fmt.Errorf("mux: %w", err))
		s.abort()
		return nil
	}
	ep := &epoch{n: n, ys: ys, done: make(chan struct{})}
	s.ep = ep
	close(s.epReady)
	s.mu.Unlock()
	ep.err = s.acceptLoop(ep)
	s.mu.Lock()
	if s.guard.restarted.Load() && !s.closing {
		ep.err = ErrPeerRestarted
		s.epReady = make(chan struct{})
	}
	s.mu.Unlock()
	close(ep.done)
	return ep
}

// epochWriter writes for one epoch, until the next one starts.
type epochWriter struct {
	s *Session
	n uint64
}

func (w *epochWriter) Write(p []byte) (int, error) {
	w.s.wmu.Lock()
	defer w.s.wmu.Unlock()
	if w.s.wepoch != w.n {
		return 0, ErrPeerRestarted
	}
	return w.s.conn.Write(p)
}

func (w *epochWriter) vectored() bool {
	_, ok := w.s.conn.(net.Conn)
	return ok
}

func (w *epochWriter) writeBuffers(b net.Buffers) error {
	w.s.wmu.Lock()
	defer w.s.wmu.Unlock()
	if w.s.wepoch != w.n {
		return ErrPeerRestarted
	}
	_, err := b.WriteTo(w.s.conn.(net.Conn))
	return err
}

// abort ends a session that never got to run yamux (or whose peer failed
// between two epochs).
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
	var ys *yamux.Session
	if s.ep != nil {
		ys = s.ep.ys
	}
	s.mu.Unlock()
	if ys != nil && !ys.IsClosed() {
		ys.Close()
	} else {
		s.conn.Close()
	}
}

// acceptLoop hands every stream the peer opens to a handshake, and notices
// when yamux ends.
func (s *Session) acceptLoop(ep *epoch) error {
	ys := ep.ys
	for {
		st, err := ys.AcceptStream()
		if err != nil {
			if !ys.IsClosed() {
				continue // acknowledging one stream failed; yamux goes on
			}
			return yamuxErr(shutdownErr(ys, err))
		}
		// Refused streams linger until the peer closes its side; a peer that
		// never does holds at most this many before the session ends.
		if n := ys.NumStreams(); n > 2*s.cfg.MaxStreams {
			st.Close()
			s.fail(fmt.Errorf("%w: peer keeps %d streams open (limit %d)", ErrProtocol, n, s.cfg.MaxStreams))
			continue
		}
		go s.handshake(ep, st, ys.NumStreams() > s.cfg.MaxStreams)
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
func (s *Session) handshake(ep *epoch, st *yamux.Stream, full bool) {
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
	l.deliver(newConn(s, ep, st, Addr{Port: port}, Addr{}))
}

// Dial opens a stream to port on the peer.
func (s *Session) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	for {
		ep, err := s.epoch(ctx)
		if err != nil {
			return nil, s.dialErr(port, err)
		}
		c, err := s.dial(ctx, ep, port)
		// An open cut short by the peer's restart delivered nothing; the
		// successor gets it. Restarts are bounded, so is this loop.
		if errors.Is(err, ErrPeerRestarted) && ctx.Err() == nil {
			continue
		}
		return c, err
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
		if !ep.ys.IsClosed() {
			return ep, nil
		}
		// The peer may have restarted; its successor's epoch follows.
		select {
		case <-ep.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !errors.Is(ep.err, ErrPeerRestarted) {
			return nil, ep.err
		}
	}
}

func (s *Session) dial(ctx context.Context, ep *epoch, port uint32) (net.Conn, error) {
	if n := ep.ys.NumStreams(); n >= s.cfg.MaxStreams {
		return nil, s.dialErr(port, ErrTooManyStreams)
	}
	type result struct {
		c   *conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := s.open(ctx, ep, port)
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
func (s *Session) open(ctx context.Context, ep *epoch, port uint32) (*conn, error) {
	st, err := ep.ys.OpenStream()
	if err != nil {
		return nil, ep.streamErr(err)
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
		return newConn(s, ep, st, Addr{}, Addr{Port: port}), nil
	case err == nil && reply == 0,
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, yamux.ErrConnectionReset):
		// A reset is the peer's yamux refusing the open (backlog full).
		st.Close()
		if ep.ys.IsClosed() {
			<-ep.done
			return nil, ep.err
		}
		return nil, ErrRefused
	case err == nil:
		st.Close()
		perr := fmt.Errorf("%w: handshake answer %d", ErrProtocol, reply)
		s.fail(perr)
		return nil, perr
	default:
		st.Close()
		return nil, ep.streamErr(err)
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

// streamErr maps a yamux error on a stream of ep to ours.
func (ep *epoch) streamErr(err error) error {
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
		<-ep.done // yamux has ended, so the accept loop finishes the epoch
		return ep.err
	}
	return err
}
