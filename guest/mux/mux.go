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
// frames in both directions, each a 12-byte big-endian header (version 0,
// type, 16-bit flags, 32-bit stream id, 32-bit length) and, for data, the
// payload (see frame.go). The Client opens odd stream ids, the Server even
// ones, each side in increasing order. A control frame with SYN opens a
// stream to the port in its length; the other side answers ACK (accepted;
// the length is credit beyond the initial 256 KiB window) or RST (refused).
// Data frames carry at most the credit the receiver granted; the receiver
// returns credit in control frames once half its window has been read. FIN
// ends one direction, RST the whole stream.
//
// A guest process that dies and is restarted opens the port afresh and
// sends a new hello; the Client takes one in place of a frame header as
// the peer having restarted, ends the old streams and goes on with the new
// peer over the same connection (a bounded number of times).
package mux

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
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
	// this side opened are still open.
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
	// MaxStreams bounds concurrently open streams (default 1024), counted
	// apart for each side's opens: streams the peer opens can never use up
	// those this side needs (the host's tasks under a guest's stream
	// flood), nor the reverse.
	MaxStreams int
	// AcceptBacklog bounds streams waiting in a listener's Accept (default 64).
	AcceptBacklog int
	// Window is the receive buffer in bytes of each stream this side
	// opens (default 256 KiB, which is also the minimum; at most 16 MiB):
	// how far the peer may send ahead of our reads. A bigger window moves
	// more per credit round trip; the buffer grows only while data waits.
	Window int
	// PeerWindow is the same for each stream the peer opens (default
	// Window). Apart because the peer decides how many of those there
	// are: the host gives its own task streams a big window and keeps the
	// streams a hostile guest can open by the thousand at the minimum.
	PeerWindow int
	// PeerRestarts bounds how often a Client goes on with a restarted peer
	// within RestartWindow (default 8; negative: never, a restart ends the
	// session); the next restart ends the session as a protocol violation.
	PeerRestarts int
	// RestartWindow is the period PeerRestarts counts over (default 10 min).
	RestartWindow time.Duration
	// Splice says the connection is a file that takes splice(2) from a
	// pipe (the guest's virtio-serial port, whose driver hands the pipe's
	// pages to the device without copying them): streams then offer
	// WritePipe (see PipeWriter). Linux only; ignored elsewhere.
	Splice bool
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
	minWindow            = 256 << 10 // every stream's initial credit
	maxWindow            = 16 << 20
	// handshakeTimeout bounds how long the peer may take to answer an open
	// (and a restarted peer's hello).
	handshakeTimeout = 10 * time.Second
	// streamCloseTimeout: a stream closed (or write-closed) locally is reset
	// if the peer has not closed its side by then, so a peer cannot pin
	// streams forever.
	streamCloseTimeout = 5 * time.Minute
	// maxCtrl bounds control frames queued for the peer; the receive loop,
	// which queues answers to what the peer sends, waits beyond it.
	maxCtrl = 1 << 20
	// openBacklog bounds the peer's opens held unanswered while their
	// listener's backlog is full (what yamux's accept queue was).
	openBacklog = 256
	// holdTimeout bounds how long such an open waits: enough for an accept
	// loop to catch up with a burst, short enough that a listener that has
	// stopped accepting refuses soon (and well before the opener gives up).
	holdTimeout = time.Second
	// maxFrame bounds one data frame, so one stream's big write does not
	// hold the connection for long.
	maxFrame = 1 << 20
)

// writeTimeout: a peer that stops reading the connection for this long
// ends the session (a variable for tests).
var writeTimeout = 30 * time.Second

func (c Config) withDefaults() Config {
	if c.MaxStreams <= 0 {
		c.MaxStreams = defaultMaxStreams
	}
	if c.AcceptBacklog <= 0 {
		c.AcceptBacklog = defaultAcceptBacklog
	}
	c.Window = min(max(c.Window, minWindow), maxWindow)
	if c.PeerWindow == 0 {
		c.PeerWindow = c.Window
	}
	c.PeerWindow = min(max(c.PeerWindow, minWindow), maxWindow)
	if c.PeerRestarts == 0 {
		c.PeerRestarts = defaultPeerRestarts
	}
	c.PeerRestarts = max(c.PeerRestarts, 0)
	if c.RestartWindow <= 0 {
		c.RestartWindow = defaultRestartWindow
	}
	return c
}

// Session is one multiplexed connection. Its methods are safe for concurrent use.
type Session struct {
	conn   io.ReadWriteCloser
	nc     net.Conn // conn, if it is a net.Conn (writev); nil otherwise
	br     *frameReader
	cfg    Config
	client bool

	done chan struct{} // closed once the session has ended

	begin     sync.Once     // a Client's reading started (Begin)
	greetOnce sync.Once     // greeted closed
	greeted   chan struct{} // closed once a first hello was answered

	// wmu serialises writes to conn; wepoch is the epoch allowed to write,
	// so a dead epoch's streams cannot write into its successor's session.
	wmu    sync.Mutex
	wepoch uint64
	// The write watchdog (watchWrites): wstart is when the write in
	// progress began (since t0, plus one), 0 between writes; wdog says
	// wtimer is armed; wlimit is writeTimeout when the session began.
	t0     time.Time
	wstart atomic.Int64
	wdog   atomic.Bool
	wtimer *time.Timer
	wlimit time.Duration
	hdr    [frameHeaderSize]byte
	iov    [3][]byte
	vec    net.Buffers
	wbuf   []byte
	cspare []byte // a drained control buffer to reuse
	// out is the connection as a splice(2) target (Config.Splice), nil if
	// it is none; noSplice is set once splicing to it failed as unsupported.
	out      *spliceOut
	noSplice atomic.Bool

	// Control frames wait in ctrl until the next data frame or ctrlLoop
	// takes them.
	cmu    sync.Mutex
	ccond  sync.Cond // signalled when ctrl drains or the session ends
	cepoch uint64    // the epoch ctrl belongs to
	cdead  bool
	ctrl   []byte
	ckick  chan struct{}

	mu        sync.Mutex
	ep        *epoch        // the running epoch; nil until a hello
	epReady   chan struct{} // closed when ep is set; replaced when the peer restarts
	closing   bool
	err       error
	listeners map[uint32]*listener
	restarts  []time.Time // the peer's restarts within Config.RestartWindow
	restarted int         // the peer's restarts in all

	held atomic.Int32 // opens held unanswered (listener.offer)
}

// epoch is one session with one peer over the connection: the first, or
// one after the peer restarted. Streams belong to one epoch and end with it.
type epoch struct {
	n         uint64
	done      chan struct{} // closed once the epoch has ended; err is then set
	err       error
	restarted bool // it ended because the peer restarted

	mu       sync.Mutex
	dead     bool
	streams  map[uint32]*conn
	peers    int    // how many of streams the peer opened
	nextID   uint32 // our next stream id
	lastPeer uint32 // the highest stream id the peer opened
}

// Client starts the host side over conn. It returns at once; Dial waits for
// the guest's hello (bounded by the Dial context). When the guest restarts
// (a fresh hello where a frame should start), streams of the old session
// end with ErrPeerRestarted and Dial reaches the new one, at most
// Config.PeerRestarts times per Config.RestartWindow; the session ends on
// the next one.
func Client(conn io.ReadWriteCloser, cfg Config) *Session {
	s := PendingClient(conn, cfg)
	s.Begin()
	return s
}

// PendingClient is Client with the reading put off until Begin: Listen and
// Dial work from the start (Dial waits), and nothing is read from or
// written to conn before Begin, so that the host can first exchange
// something else with the guest on it (vm/qemu: the parked guest's
// api.Parked and the host's api.Wake).
func PendingClient(conn io.ReadWriteCloser, cfg Config) *Session {
	return newSession(conn, cfg, true)
}

// Begin starts a PendingClient's session: it reads the guest's hello and
// goes on as Client. Calls after the first do nothing.
func (s *Session) Begin() {
	s.begin.Do(func() { go s.runClient() })
}

// Greeted is closed once the session has answered the peer's first hello:
// the peer speaks the protocol and the first streams can open.
func (s *Session) Greeted() <-chan struct{} { return s.greeted }

func (s *Session) runClient() {
	n, err := readHello(s.br)
	for {
		if err == nil {
			err = s.writeAck(n)
		}
		if err != nil {
			s.setErr(err)
			s.abort()
			return
		}
		s.greetOnce.Do(func() { close(s.greeted) })
		ep := s.start()
		if ep == nil {
			return
		}
		if !ep.restarted {
			s.finish(ep.err)
			return
		}
		if err = s.peerRestarted(); err != nil {
			s.fail(err)
			s.finish(err)
			return
		}
		n, err = s.readHelloBounded()
	}
}

// writeAck answers hello n and moves writing to the next epoch; what a dead
// epoch's streams still try to write is dropped from here on.
func (s *Session) writeAck(n nonce) error {
	timer := time.AfterFunc(handshakeTimeout, func() { s.conn.Close() })
	s.wmu.Lock()
	s.wepoch++
	s.cmu.Lock()
	s.cepoch = s.wepoch
	s.ctrl = s.ctrl[:0]
	s.ccond.Broadcast()
	s.cmu.Unlock()
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
	n, err := readHello(s.br)
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
		n := nonceFor()
		if _, err := conn.Write(hello(n)); err != nil {
			s.setErr(fmt.Errorf("%w: write hello: %w", ErrClosed, err))
			s.abort()
			return
		}
		if err := awaitAck(s.br, n); err != nil {
			s.setErr(err)
			s.abort()
			return
		}
		s.wmu.Lock()
		s.wepoch = 1
		s.cmu.Lock()
		s.cepoch = 1
		s.cmu.Unlock()
		s.wmu.Unlock()
		if ep := s.start(); ep != nil {
			s.finish(ep.err)
		}
	}()
	return s
}

func newSession(conn io.ReadWriteCloser, cfg Config, client bool) *Session {
	s := &Session{
		conn:      conn,
		br:        newFrameReader(conn),
		cfg:       cfg.withDefaults(),
		client:    client,
		epReady:   make(chan struct{}),
		done:      make(chan struct{}),
		listeners: make(map[uint32]*listener),
		ckick:     make(chan struct{}, 1),
		greeted:   make(chan struct{}),
	}
	s.nc, _ = conn.(net.Conn)
	if s.cfg.Splice && s.nc == nil {
		s.out = newSpliceOut(conn)
	}
	s.ccond.L = &s.cmu
	s.t0, s.wlimit = time.Now(), writeTimeout
	s.wtimer = time.AfterFunc(time.Hour, s.watchWrites)
	s.wtimer.Stop()
	go s.ctrlLoop()
	return s
}

// start runs one epoch once a hello has gone through, and returns it when
// it has ended; nil if the session was closed first.
func (s *Session) start() *epoch {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.abort()
		return nil
	}
	ep := &epoch{n: s.wepoch, done: make(chan struct{}), streams: make(map[uint32]*conn), nextID: 2}
	if s.client {
		ep.nextID = 1
	}
	s.ep = ep
	close(s.epReady)
	s.mu.Unlock()

	err := s.recvLoop(ep)

	s.mu.Lock()
	if err == errPeerRestarted && !s.closing {
		ep.restarted = true
		err = ErrPeerRestarted
		s.epReady = make(chan struct{})
	} else {
		if err == errPeerRestarted {
			err = ErrClosed
		}
		if s.err == nil {
			s.err = err
		}
		err = s.err
	}
	s.mu.Unlock()
	if !ep.restarted {
		s.shutdown()
	}
	s.endEpoch(ep, err)
	return ep
}

// endEpoch ends every stream of ep with err.
func (s *Session) endEpoch(ep *epoch, err error) {
	ep.mu.Lock()
	ep.err = err
	ep.dead = true
	streams := ep.streams
	ep.streams = nil
	ep.mu.Unlock()
	for _, c := range streams {
		c.mu.Lock()
		c.dead = true
		c.gone = true
		c.answer()
		if c.ctimer != nil {
			c.ctimer.Stop()
		}
		c.wake()
		c.mu.Unlock()
	}
	close(ep.done)
}

// abort ends a session that never got to run an epoch (or whose peer failed
// between two epochs).
func (s *Session) abort() {
	s.shutdown()
	s.finish(ErrClosed)
}

// shutdown closes the connection and stops control writes.
func (s *Session) shutdown() {
	s.cmu.Lock()
	s.cdead = true
	s.ccond.Broadcast()
	s.cmu.Unlock()
	s.conn.Close()
	if s.out != nil {
		s.out.close() // after the connection: a splice in progress has been let go
	}
	s.wtimer.Stop() // a write in progress fails now
}

// finish records why the session ended (unless a reason is known already),
// closes the listeners and marks the session done.
func (s *Session) finish(why error) {
	s.setErr(why)
	s.mu.Lock()
	ls := s.listeners
	s.listeners = nil
	s.mu.Unlock()
	// Listeners first: once Done, Accept hands out nothing more.
	for _, l := range ls {
		l.shut()
	}
	close(s.done)
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
	s.mu.Unlock()
	s.shutdown()
}

// Close ends the session and every stream in it.
func (s *Session) Close() error {
	s.fail(ErrClosed)
	if s.client {
		s.Begin() // a PendingClient never begun ends with its first read
	}
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
