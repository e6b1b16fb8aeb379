// Package egresswire is the format of the streams the guest's egress
// forwarder (guest/egress) opens to the host's gate (app/egress) on
// api.PortEgressHTTP and api.PortEgressSOCKS: the bytes of one task's TCP
// connection, in records, so that a half-close travels as a message of its
// own instead of depending on the transport.
//
// The transports differ there: a stream of the multiplexer (guest/mux), a
// Linux vsock and a Hyper-V socket can be half-closed, but the
// connections Apple's Virtualization framework hands to the host (vz v3's
// VirtioSocketConnection, a socket the framework relays to the guest's
// vsock) have no CloseWrite. A relay that passed a TCP half-close on as
// the transport's CloseWrite would have to close both directions on a
// Mac, and a client that uploads after the response has ended (or after
// the server half-closed) would lose its upload. With records, every
// backend carries the same bytes and a half-close the same way.
// ocaml-hvsock (mirage/ocaml-hvsock#13) adds shutdown messages over
// Hyper-V sockets for the same reason.
//
// # Wire
//
// The guest starts each stream with Preamble, whose first byte (0x00) no
// HTTP request and no SOCKS greeting begins with. Then each direction is a
// sequence of records: a 4-byte big-endian length and that many bytes. A
// record of length 0 ends the direction (a half-close): its sender writes
// nothing after it, and the other direction goes on until its own end
// record. A side closes the transport once it is done with both; a
// transport that ends at a record boundary without an end record reads as
// EOF (the peer closed the whole connection, as a TCP FIN would have been
// passed on before), one that ends inside a record as
// io.ErrUnexpectedEOF. A record is at most MaxRecord bytes.
//
// The host accepts streams without the preamble too and passes their
// bytes unchanged (Server): older guests, and the tests and tools that
// speak to the gate over plain TCP.
package egresswire

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Preamble opens every framed stream; the digit is the format's version.
const Preamble = "\x00airlock-egress-1\n"

// MaxRecord bounds a record's length. Writers send at most chunk bytes in
// one; a longer length is a broken or hostile peer.
const MaxRecord = 1 << 20

// chunk is the most one record carries from this side: the relays' copy
// buffer size (256 KiB moves a download in few transport frames).
const chunk = 256<<10 - hdrLen

const hdrLen = 4

// Errors a Conn returns.
var (
	// ErrProtocol: the peer sent something that is not this format.
	ErrProtocol = errors.New("egresswire: not an egress stream")
	// ErrWriteClosed: a write after CloseWrite.
	ErrWriteClosed = errors.New("egresswire: write after CloseWrite")
	// ErrNoHalfClose: CloseWrite on an unframed stream whose transport
	// cannot half-close.
	ErrNoHalfClose = errors.New("egresswire: the transport cannot half-close")
	// errUnknown: a write on a Server stream before its first read told
	// which format it speaks (the guest's client always speaks first).
	errUnknown = errors.New("egresswire: write before the stream's format is known")
)

// Stream formats of a Conn.
const (
	modeUnknown int32 = iota // Server, before the first byte
	modeRaw                  // bytes unchanged
	modeFramed               // records
)

// Conn is one egress stream over a transport connection: a net.Conn whose
// CloseWrite works whatever the transport is. Read and Write may be called
// from one goroutine each; deadlines are the transport's, and a read that
// times out inside a record's header resumes where it stopped.
type Conn struct {
	net.Conn // the transport
	mode     atomic.Int32

	rmu    sync.Mutex
	first  [1]byte // a Server's first byte, of an unframed stream
	hasOne bool    // first is not yet returned
	pre    [len(Preamble)]byte
	preN   int
	hdr    [hdrLen]byte
	hdrN   int
	remain int   // payload bytes of the current record not yet read
	rerr   error // sticky: EOF, the end record, or a broken stream

	wmu     sync.Mutex
	sentPre bool // Client: Preamble went out with the first record
	wend    bool
	werr    error
}

// Client returns the guest's end of a framed stream over c: Preamble goes
// out with the first record.
func Client(c net.Conn) *Conn {
	x := &Conn{Conn: c}
	x.mode.Store(modeFramed)
	x.preN = len(Preamble) // nothing to read before the records
	return x
}

// Server returns the host's end of a stream accepted from c: framed when
// its first byte starts Preamble, passed through unchanged otherwise. The
// first Read finds out; a Write or CloseWrite before that fails.
func Server(c net.Conn) *Conn {
	x := &Conn{Conn: c, sentPre: true}
	return x
}

// FramedServer returns the host's end of a stream it knows comes from the
// guest's forwarder (a stand-in for the gate that speaks first): framed
// from the start, Preamble expected before the first record it reads.
func FramedServer(c net.Conn) *Conn {
	x := &Conn{Conn: c, sentPre: true}
	x.mode.Store(modeFramed)
	return x
}

// Framed says whether the stream carries records (false for a Server
// stream before its first Read, and for an unframed one).
func (c *Conn) Framed() bool { return c.mode.Load() == modeFramed }

// Read reads the stream's bytes. The peer's end record reads as io.EOF;
// the transport keeps going for writes.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if m := c.mode.Load(); m == modeUnknown || m == modeFramed && c.preN < len(Preamble) && c.rerr == nil {
		if err := c.detect(); err != nil {
			return 0, err
		}
	}
	if c.mode.Load() == modeRaw {
		if c.hasOne && len(p) > 0 {
			p[0] = c.first[0]
			c.hasOne = false
			return 1, nil
		}
		return c.Conn.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	// Read into p whatever the transport has, records and all, and keep
	// the payload: one read returns the bytes of as many records as have
	// arrived, as a read of the plain stream would, instead of one record
	// at a time (a read and a write more per record in the relays).
	for {
		if c.rerr != nil {
			return 0, c.rerr
		}
		n, err := c.Conn.Read(p)
		w := c.parse(p[:n])
		if err == io.EOF && c.rerr == nil {
			if c.remain > 0 || c.hdrN > 0 {
				c.rerr = io.ErrUnexpectedEOF
			} else {
				c.rerr = io.EOF
			}
		}
		if w > 0 {
			return w, nil
		}
		if err != nil && err != io.EOF {
			return 0, err
		}
		if n == 0 && err == nil {
			return 0, io.ErrNoProgress
		}
	}
}

// parse takes the record bytes in b, as read from the transport, moves
// their payload to the front of b and returns its length. A header may
// straddle reads (c.hdr keeps its start); an end record or a broken one
// sets c.rerr, and what follows it is dropped. c.rmu is held.
func (c *Conn) parse(b []byte) int {
	w := 0
	for i := 0; i < len(b) && c.rerr == nil; {
		if c.remain > 0 {
			k := min(c.remain, len(b)-i)
			if w != i {
				copy(b[w:], b[i:i+k])
			}
			w += k
			i += k
			c.remain -= k
			continue
		}
		k := copy(c.hdr[c.hdrN:], b[i:])
		c.hdrN += k
		i += k
		if c.hdrN < hdrLen {
			break
		}
		c.hdrN = 0
		switch n := binary.BigEndian.Uint32(c.hdr[:]); {
		case n == 0:
			c.rerr = io.EOF
		case n > MaxRecord:
			c.rerr = ErrProtocol
		default:
			c.remain = int(n)
		}
	}
	return w
}

// detect reads a Server stream's first byte (and, for a framed stream, the
// rest of Preamble) and sets the mode; for a FramedServer it reads and
// checks Preamble. c.rmu is held.
func (c *Conn) detect() error {
	if c.preN == 0 {
		n, err := c.Conn.Read(c.pre[:1])
		if n == 0 {
			if err == nil {
				err = io.ErrNoProgress
			}
			return err
		}
		c.preN = 1
		if c.pre[0] != Preamble[0] && c.mode.Load() == modeUnknown {
			c.first[0], c.hasOne = c.pre[0], true
			c.mode.Store(modeRaw)
			return nil
		}
	}
	if err := fill(c.Conn, c.pre[:], &c.preN); err != nil {
		if err == io.EOF {
			c.rerr = io.ErrUnexpectedEOF
			c.mode.Store(modeFramed)
			return c.rerr
		}
		return err
	}
	if string(c.pre[:]) != Preamble {
		c.rerr = ErrProtocol
		c.mode.Store(modeFramed)
		return ErrProtocol
	}
	c.mode.Store(modeFramed)
	return nil
}

// fill reads into b[*n:] until b is full, counting in *n what it got, so
// that a read interrupted by a deadline resumes where it stopped.
func fill(r io.Reader, b []byte, n *int) error {
	for *n < len(b) {
		k, err := r.Read(b[*n:])
		*n += k
		if *n == len(b) {
			return nil
		}
		if err != nil {
			return err
		}
		if k == 0 {
			return io.ErrNoProgress
		}
	}
	return nil
}

// bufs are the record buffers of Write and ReadFrom: room for Preamble, a
// header and a chunk, so that each record is one write to the transport.
var bufs = sync.Pool{New: func() any { b := make([]byte, len(Preamble)+hdrLen+chunk); return &b }}

// Write writes p as records of at most 256 KiB, each in one write to the
// transport. An empty p writes nothing (an empty record would end the
// stream).
func (c *Conn) Write(p []byte) (int, error) {
	switch c.mode.Load() {
	case modeUnknown:
		return 0, errUnknown
	case modeRaw:
		return c.Conn.Write(p)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writable(); err != nil {
		return 0, err
	}
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	written := 0
	for len(p) > 0 {
		k := min(len(p), chunk)
		off := len(Preamble) + hdrLen
		copy((*bp)[off:], p[:k])
		if err := c.send(*bp, k); err != nil {
			return written, err
		}
		written += k
		p = p[k:]
	}
	return written, nil
}

// writable says why nothing may be written, if so. c.wmu is held.
func (c *Conn) writable() error {
	if c.werr != nil {
		return c.werr
	}
	if c.wend {
		return ErrWriteClosed
	}
	return nil
}

// send writes the record whose k payload bytes sit in buf after room for
// Preamble and a header, with Preamble before it if it has not gone yet.
// A failure sticks: the stream's records are broken after it. c.wmu is
// held.
func (c *Conn) send(buf []byte, k int) error {
	off := len(Preamble) + hdrLen
	binary.BigEndian.PutUint32(buf[off-hdrLen:off], uint32(k))
	start := off - hdrLen
	if !c.sentPre {
		start = 0
		copy(buf, Preamble)
	}
	if _, err := c.Conn.Write(buf[start : off+k]); err != nil {
		c.werr = err
		return err
	}
	c.sentPre = true
	return nil
}

// ReadFrom copies r to the stream until r's EOF, reading straight into the
// record buffer (no copy on the way), one record per read. It does not end
// the stream; CloseWrite does. Unframed, it copies in 256 KiB steps too.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	switch c.mode.Load() {
	case modeUnknown:
		// A Server stream copying what it reads from itself: the reads
		// find the format before the first write.
		return io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{r}, (*bp)[:chunk])
	case modeRaw:
		// Hide the transport's ReadFrom (a TCP connection would splice or
		// copy in 32 KiB steps) and r's WriteTo.
		return io.CopyBuffer(struct{ io.Writer }{c.Conn}, struct{ io.Reader }{r}, (*bp)[:chunk])
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writable(); err != nil {
		return 0, err
	}
	off := len(Preamble) + hdrLen
	var total int64
	for {
		n, rerr := r.Read((*bp)[off:])
		if n > 0 {
			if err := c.send(*bp, n); err != nil {
				return total, err
			}
			total += int64(n)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// CloseWrite ends this direction of the stream: the end record on a
// framed stream, the transport's own CloseWrite on an unframed one (or
// ErrNoHalfClose when it has none). The other direction stays open.
func (c *Conn) CloseWrite() error {
	switch c.mode.Load() {
	case modeUnknown:
		return errUnknown
	case modeRaw:
		if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
			return cw.CloseWrite()
		}
		return ErrNoHalfClose
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wend {
		return nil
	}
	if c.werr != nil {
		return c.werr
	}
	var b [len(Preamble) + hdrLen]byte
	rec := b[len(Preamble):]
	if !c.sentPre {
		copy(b[:], Preamble)
		rec = b[:]
	}
	if _, err := c.Conn.Write(rec); err != nil {
		c.werr = err
		return err
	}
	c.sentPre = true
	c.wend = true
	return nil
}
