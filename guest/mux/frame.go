package mux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Frame header: version (0), type, flags, stream id, length; big-endian.
//
// Data frames (type 0) carry length bytes of payload for stream id, at
// most the credit the receiver granted; flag FIN may end the direction
// with the last payload. Control frames (type 1) carry no payload; their
// flags say what they do:
//
//	SYN  open stream id (the opener's parity) to the port in length
//	ACK  the open of stream id is accepted; length is credit beyond minWindow
//	FIN  the sender will send no more data on stream id; length 0
//	RST  stream id is reset (or, as the answer to a SYN, refused); length 0
//	none length more bytes of credit for stream id
//
// Anything else ends the session as a protocol violation.
const (
	frameHeaderSize = 12
	frameVersion    = 0

	typeData    = 0
	typeControl = 1

	flagSYN = 1
	flagACK = 2
	flagFIN = 4
	flagRST = 8
)

// errPeerRestarted is what the receive loop returns when the peer's next
// frame is a new hello.
var errPeerRestarted = errors.New("mux: the peer restarted")

func putHeader(b []byte, typ byte, flags uint16, id, length uint32) {
	b[0] = frameVersion
	b[1] = typ
	binary.BigEndian.PutUint16(b[2:], flags)
	binary.BigEndian.PutUint32(b[4:], id)
	binary.BigEndian.PutUint32(b[8:], length)
}

func badFrame(h *[frameHeaderSize]byte, format string, a ...any) error {
	return fmt.Errorf("%w: frame %x: %s", ErrProtocol, h[:], fmt.Sprintf(format, a...))
}

// readErr maps a failed read of the connection. Ending between frames is
// the peer hanging up; inside one, a protocol violation.
func readErr(err error, inFrame bool) error {
	switch {
	case err == io.EOF && !inFrame:
		return fmt.Errorf("%w: peer hung up (%w)", ErrClosed, io.EOF)
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return fmt.Errorf("%w: peer hung up inside a frame", ErrProtocol)
	}
	return fmt.Errorf("%w: %w", ErrClosed, err)
}

// recvLoop reads and checks the peer's frames until the epoch ends.
func (s *Session) recvLoop(ep *epoch) error {
	var h [frameHeaderSize]byte
	for {
		if s.client {
			// A frame header starts with version 0; a hello with 'A'. Only
			// a hello that begins exactly at a frame boundary counts.
			if b, err := s.br.Peek(1); err == nil && b[0] == helloMagic[0] {
				if b, err := s.br.Peek(len(helloMagic)); err == nil && string(b) == helloMagic {
					return errPeerRestarted
				}
			}
		}
		if err := s.br.ReadFull(h[:]); err != nil {
			return readErr(err, err == io.ErrUnexpectedEOF)
		}
		typ := h[1]
		flags := binary.BigEndian.Uint16(h[2:4])
		id := binary.BigEndian.Uint32(h[4:8])
		length := binary.BigEndian.Uint32(h[8:12])
		s.br.lean = typ == typeData && length >= minDirect
		if h[0] != frameVersion {
			return badFrame(&h, "version %d", h[0])
		}
		if id == 0 {
			return badFrame(&h, "stream id 0")
		}
		var err error
		switch typ {
		case typeData:
			err = s.recvData(ep, &h, flags, id, length)
		case typeControl:
			err = s.recvControl(ep, &h, flags, id, length)
		default:
			err = badFrame(&h, "unknown type %d", typ)
		}
		if err != nil {
			return err
		}
	}
}

// ours says whether id is in our id space.
func (s *Session) ours(id uint32) bool { return (id%2 == 1) == s.client }

// lookup finds stream id; nil without an error for a stream that is gone
// (its late frames are dropped), an error for one never opened.
func (s *Session) lookup(ep *epoch, h *[frameHeaderSize]byte, id uint32) (*conn, error) {
	ep.mu.Lock()
	c := ep.streams[id]
	known := id < ep.nextID
	if !s.ours(id) {
		known = id <= ep.lastPeer
	}
	ep.mu.Unlock()
	if c == nil && !known {
		return nil, badFrame(h, "stream %d was never opened", id)
	}
	return c, nil
}

func (s *Session) recvData(ep *epoch, h *[frameHeaderSize]byte, flags uint16, id, length uint32) error {
	if flags&^flagFIN != 0 {
		return badFrame(h, "unknown data flags %#x", flags)
	}
	if w := max(s.cfg.Window, s.cfg.PeerWindow); length > uint32(w) {
		return badFrame(h, "data frame of %d bytes exceeds the %d-byte window", length, w)
	}
	if length == 0 && flags == 0 {
		return badFrame(h, "empty data frame")
	}
	c, err := s.lookup(ep, h, id)
	if err != nil {
		return err
	}
	if c == nil {
		if err := s.br.Discard(int(length)); err != nil {
			return readErr(err, true)
		}
		return nil
	}
	c.mu.Lock()
	switch {
	case c.opening:
		c.mu.Unlock()
		return badFrame(h, "data on stream %d before its open was answered", id)
	case c.recvFin:
		c.mu.Unlock()
		return badFrame(h, "data on stream %d after its FIN", id)
	case length > c.recvAvail:
		avail := c.recvAvail
		c.mu.Unlock()
		return badFrame(h, "%d bytes on stream %d with %d bytes of credit", length, id, avail)
	}
	c.recvAvail -= length
	var credit uint32
	if length > 0 {
		credit, err = s.recvPayload(c, int(length))
		if err != nil {
			c.mu.Unlock()
			return err
		}
	}
	finished := false
	if flags&flagFIN != 0 {
		c.recvFin = true
		finished = c.sentFin
	}
	c.wake()
	c.mu.Unlock()
	if credit > 0 {
		s.enqueue(ep, 0, id, credit, ctrlWait)
	}
	if finished {
		c.remove()
	}
	return nil
}

// recvPayload reads n bytes of payload for c: straight into a reader's
// buffer if one is waiting, into c's buffer otherwise, or nowhere if c was
// closed locally. It is called and returns with c.mu held; it returns the
// credit to give back.
func (s *Session) recvPayload(c *conn, n int) (credit uint32, err error) {
	// Only a reader whose buffer takes the whole payload: one that gets a
	// first part early and waits again for the rest made the guest's
	// transport ~30% slower under TCG (make bench, raw transport), for
	// nothing measurable over a socket.
	if c.waitBuf != nil && len(c.waitBuf) >= n && c.in.n == 0 && !c.closed && !c.gone {
		var m int
		m, credit, err = s.fillReader(c, n)
		if err != nil {
			return 0, readErr(err, true)
		}
		if n -= m; n == 0 {
			return credit, nil
		}
	}
	if c.closed || c.gone {
		c.mu.Unlock()
		err := s.br.Discard(n)
		c.mu.Lock()
		if err != nil {
			return 0, readErr(err, true)
		}
		return credit + c.consumed(n), nil
	}
	a, b := c.in.space(n, int(c.window))
	c.mu.Unlock()
	err = s.br.ReadPayloadFull(a, b)
	c.mu.Lock()
	if err != nil {
		return 0, readErr(err, true)
	}
	if c.closed {
		// Close dropped the buffer meanwhile.
		return credit + c.consumed(n), nil
	}
	c.in.commit(n)
	return credit, nil
}

// fillReader reads payload of n bytes for c straight into the buffer of the
// reader waiting on c, and what does not fit into c's buffer: with one read
// where the connection has readv (the reader waits for it, so it must not
// wait for a peer that stops halfway), with as many as the reader's part
// takes otherwise, which the reader's deadline or Close interrupts. It is
// called and returns with c.mu held; it returns how much it read and the
// credit to give back.
func (s *Session) fillReader(c *conn, n int) (int, uint32, error) {
	p := c.waitBuf[:min(len(c.waitBuf), n)]
	c.waitBuf = nil
	c.filling = true
	c.directFor = c.waitOwner
	a, b := c.in.space(n-len(p), int(c.window))
	c.mu.Unlock()
	m, err := s.br.ReadPayload(p, a, b)
	if s.br.readv == nil {
		// A read of the guest's port returns only the pages the host has
		// filled so far (pagedReader): fill the reader's buffer with the
		// whole payload before waking it, so a frame costs the reader one
		// wakeup and no copy through c's buffer (read by read, it would be
		// a wakeup for the first part and the rest copied through c's
		// buffer). A reader that gives up stops the fill; what is left
		// goes to c's buffer.
		for err == nil && m < len(p) {
			var k int
			k, err = s.br.ReadPayload(p[m:], nil, nil)
			m += k
			if k == 0 && err == nil {
				err = io.ErrNoProgress
			}
		}
	}
	if err != nil && s.br.Interrupted(err) {
		err = nil // the reader gave up (expire); the rest goes to c's buffer
	}
	c.mu.Lock()
	c.filling = false
	c.directN = min(m, len(p))
	var credit uint32
	if more := m - c.directN; more > 0 {
		if c.closed {
			credit = c.consumed(more) // Close dropped the buffer meanwhile
		} else {
			c.in.commit(more)
		}
	}
	c.wake()
	return m, credit, err
}

func (s *Session) recvControl(ep *epoch, h *[frameHeaderSize]byte, flags uint16, id, length uint32) error {
	switch flags {
	case flagSYN:
		return s.accept(ep, h, id, length)
	case 0:
		if length == 0 {
			return badFrame(h, "empty credit")
		}
	case flagACK:
	case flagFIN, flagRST:
		if length != 0 {
			return badFrame(h, "length %d", length)
		}
	default:
		return badFrame(h, "unknown flags %#x", flags)
	}
	c, err := s.lookup(ep, h, id)
	if c == nil || err != nil {
		return err
	}
	c.mu.Lock()
	remove := false
	switch {
	case flags == flagRST:
		if c.opening {
			c.refused = true
			c.answer()
		}
		c.reset = true
		remove = true
	case c.opening != (flags == flagACK):
		c.mu.Unlock()
		return badFrame(h, "stream %d is not waiting for an answer", id)
	case uint64(c.credit)+uint64(length) > maxWindow:
		c.mu.Unlock()
		return badFrame(h, "credit beyond any window on stream %d", id)
	case flags == flagACK:
		c.credit += length
		c.answer()
	case flags == 0:
		c.credit += length
	case c.recvFin: // FIN
		c.mu.Unlock()
		return badFrame(h, "second FIN on stream %d", id)
	default: // FIN
		c.recvFin = true
		remove = c.sentFin
	}
	c.wake()
	c.mu.Unlock()
	if remove {
		c.remove()
	}
	return nil
}

// accept answers the peer's open of stream id to port.
func (s *Session) accept(ep *epoch, h *[frameHeaderSize]byte, id, port uint32) error {
	if s.ours(id) {
		return badFrame(h, "peer opened stream %d, which is in our id space", id)
	}
	ep.mu.Lock()
	if id <= ep.lastPeer {
		last := ep.lastPeer
		ep.mu.Unlock()
		return badFrame(h, "peer opened stream %d after %d", id, last)
	}
	ep.lastPeer = id
	full := ep.peers >= s.cfg.MaxStreams
	ep.mu.Unlock()
	var l *listener
	if !full {
		l = s.listener(port)
	}
	if l == nil {
		s.enqueue(ep, flagRST, id, 0, ctrlWait)
		return nil
	}
	c := newConn(s, ep, id, Addr{Port: port}, Addr{}, s.cfg.PeerWindow)
	ep.mu.Lock()
	ep.streams[id] = c
	ep.peers++
	ep.mu.Unlock()
	// A burst of opens beyond the backlog waits (bounded, see offer) for
	// Accept to make room rather than being refused at once.
	slot, err := l.offer(c)
	switch {
	case err != nil:
		c.mu.Lock()
		c.reset, c.gone = true, true
		c.mu.Unlock()
		ep.mu.Lock()
		if ep.streams[id] == c {
			delete(ep.streams, id)
			ep.peers--
		}
		ep.mu.Unlock()
		s.enqueue(ep, flagRST, id, 0, ctrlWait)
	case slot:
		s.enqueue(ep, flagACK, id, c.window-minWindow, ctrlWait)
		l.deliver(c)
	}
	return nil
}

// How enqueue treats a control frame.
const (
	// ctrlQueue: queue it for ctrlLoop or the next data frame.
	ctrlQueue = iota
	// ctrlWait: the caller is the receive loop, which waits while too much
	// is queued (the peer is not reading) and never writes itself, so that
	// it always reads.
	ctrlWait
	// ctrlSend: write it at once if no one else is writing (a reader
	// returning credit, which holds no lock).
	ctrlSend
)

// enqueue queues a control frame of ep.
func (s *Session) enqueue(ep *epoch, flags uint16, id, length uint32, mode int) {
	wait := mode == ctrlWait
	s.cmu.Lock()
	for wait && len(s.ctrl) >= maxCtrl && !s.cdead && s.cepoch == ep.n {
		s.ccond.Wait()
	}
	if s.cdead || s.cepoch != ep.n {
		s.cmu.Unlock()
		return
	}
	n := len(s.ctrl)
	s.ctrl = append(s.ctrl, make([]byte, frameHeaderSize)...)
	putHeader(s.ctrl[n:], typeControl, flags, id, length)
	s.cmu.Unlock()
	if mode == ctrlSend && s.wmu.TryLock() {
		// Nobody is writing: send it now rather than wake ctrlLoop.
		err := s.writeLocked(nil, nil, nil)
		s.wmu.Unlock()
		if err == nil {
			return
		}
	}
	select {
	case s.ckick <- struct{}{}:
	default:
	}
}

// ctrlLoop writes control frames no data frame took along.
func (s *Session) ctrlLoop() {
	for {
		select {
		case <-s.ckick:
		case <-s.done:
			return
		}
		s.wmu.Lock()
		err := s.writeLocked(nil, nil, nil)
		s.wmu.Unlock()
		if err != nil {
			s.fail(fmt.Errorf("%w: write: %w", ErrClosed, err))
		}
	}
}

// writeData sends one data frame of stream id in ep.
func (s *Session) writeData(ep *epoch, id uint32, p []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wepoch != ep.n {
		return ErrPeerRestarted
	}
	putHeader(s.hdr[:], typeData, 0, id, uint32(len(p)))
	return s.writeLocked(s.hdr[:], p, nil)
}

// writeLocked writes the queued control frames, then hdr and body, in one
// write where it can, then what tail moves from a pipe, if not nil. s.wmu
// is held.
func (s *Session) writeLocked(hdr, body []byte, tail *pipeTail) error {
	s.cmu.Lock()
	var ctrl []byte
	if len(s.ctrl) > 0 && s.cepoch == s.wepoch && !s.cdead {
		ctrl = s.ctrl
		s.ctrl = s.cspare
		s.cspare = nil
		s.ccond.Broadcast()
	}
	s.cmu.Unlock()
	if len(ctrl)+len(hdr) == 0 {
		return nil
	}
	s.wstart.Store(int64(time.Since(s.t0)) + 1)
	if !s.wdog.Load() && s.wdog.CompareAndSwap(false, true) {
		s.wtimer.Reset(s.wlimit)
	}
	var err error
	if tail != nil {
		err = s.putPipe(ctrl, hdr, body, tail)
	} else {
		err = s.put(ctrl, hdr, body)
	}
	s.wstart.Store(0)
	if ctrl != nil && cap(ctrl) <= 64<<10 {
		s.cspare = ctrl[:0]
	}
	return err
}

// watchWrites is the write watchdog, armed while writes go on: it ends the
// session if one write has taken writeTimeout. Arming it lazily rather than
// around each write keeps timer operations out of the data path.
func (s *Session) watchWrites() {
	for {
		start := s.wstart.Load()
		if start == 0 {
			// Disarm, unless a write began meanwhile and saw it armed.
			s.wdog.Store(false)
			if s.wstart.Load() == 0 || !s.wdog.CompareAndSwap(false, true) {
				return
			}
			continue
		}
		left := s.wlimit - (time.Since(s.t0) - time.Duration(start-1))
		if left <= 0 {
			s.fail(fmt.Errorf("%w: the peer has not read for %s", ErrProtocol, s.wlimit))
			return
		}
		s.wtimer.Reset(left)
		return
	}
}

// firstWrite is how much of a data frame goes out with its header when the
// connection cannot gather: the virtio-serial driver takes at most 32 KiB
// per write(2) anyway.
const firstWrite = 32 << 10

// put writes ctrl, hdr and body: through writev on a socket (the host), or
// with the header copied in front of the body's first 32 KiB otherwise (the
// guest's port, whose driver handles writev as one write per piece). Each
// write to a virtio-serial port is a syscall and a notification of the
// other side.
func (s *Session) put(ctrl, hdr, body []byte) error {
	if s.nc != nil {
		s.vec = s.iov[:0]
		for _, b := range [...][]byte{ctrl, hdr, body} {
			if len(b) > 0 {
				s.vec = append(s.vec, b)
			}
		}
		_, err := s.vec.WriteTo(s.nc)
		s.iov = [3][]byte{}
		return err
	}
	s.wbuf = append(append(s.wbuf[:0], ctrl...), hdr...)
	n := min(len(body), max(firstWrite-len(s.wbuf), 0))
	s.wbuf = append(s.wbuf, body[:n]...)
	if _, err := s.conn.Write(s.wbuf); err != nil {
		return err
	}
	if n < len(body) {
		_, err := s.conn.Write(body[n:])
		return err
	}
	return nil
}
