package mux

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
)

// yamux frame header (github.com/hashicorp/yamux spec.md): version, type,
// flags, stream id, length, big-endian.
const (
	frameHeaderSize = 12
	frameVersion    = 0

	typeData         = 0
	typeWindowUpdate = 1
	typePing         = 2
	typeGoAway       = 3

	flagSYN    = 1
	flagsKnown = 0xf // SYN, ACK, FIN, RST

	goAwayMax = 2 // normal, protocol error, internal error
)

// guard sits between the connection and yamux and checks every frame header
// the peer sends before yamux sees it, so that what yamux tolerates or
// handles expensively becomes a protocol violation instead: unknown
// versions, types and flags, stream ids of the wrong parity (which could
// collide with our own), data frames larger than a window, and pings (we
// never send one, and yamux answers each from a new goroutine).
type guard struct {
	r   *bufio.Reader
	raw io.Reader // what r reads from
	// peerOdd: the peer is the yamux client and opens odd stream ids.
	peerOdd bool
	// restartable: a hello in place of a frame header is the peer having
	// restarted (the Client side), not a protocol violation.
	restartable bool
	restarted   atomic.Bool
	window      uint32
	fail        func(error)

	hdr     [frameHeaderSize]byte
	pending []byte // checked header bytes not yet handed to yamux
	payload uint32 // data bytes still to pass through
	err     error
}

// errPeerRestarted is what the guard hands yamux when the peer's next
// frame is a new hello.
var errPeerRestarted = errors.New("mux: the peer restarted")

func newGuard(r io.Reader, peerOdd bool, window uint32, fail func(error)) *guard {
	return &guard{r: bufio.NewReaderSize(r, 64<<10), raw: r, peerOdd: peerOdd, restartable: !peerOdd, window: window, fail: fail}
}

// reset readies the guard for the peer's next session, once yamux, its
// only reader, has ended.
func (g *guard) reset() {
	g.pending, g.payload, g.err = nil, 0, nil
	g.restarted.Store(false)
}

// Read hands yamux checked frames. It is called from yamux's receive loop only.
func (g *guard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if len(g.pending) > 0 {
		n := copy(p, g.pending)
		g.pending = g.pending[n:]
		return n, nil
	}
	if g.payload > 0 {
		if uint32(len(p)) > g.payload {
			p = p[:g.payload]
		}
		// Payload goes straight from the connection into yamux's buffer
		// unless part of it was read ahead with a header.
		var n int
		var err error
		if g.r.Buffered() > 0 {
			n, err = g.r.Read(p)
		} else {
			n, err = g.raw.Read(p)
		}
		g.payload -= uint32(n)
		if err != nil {
			if err == io.EOF {
				err = fmt.Errorf("%w: peer hung up inside a frame", ErrProtocol)
			}
			g.stop(err)
			return n, g.err
		}
		return n, nil
	}
	if g.restartable {
		// A frame header starts with version 0; a hello with 'A'. Only a
		// hello that begins exactly at a frame boundary counts.
		if b, err := g.r.Peek(len(helloMagic)); err == nil && string(b) == helloMagic {
			g.restarted.Store(true)
			g.err = errPeerRestarted
			return 0, g.err
		}
	}
	if _, err := io.ReadFull(g.r, g.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("%w: peer hung up inside a frame header", ErrProtocol)
		}
		g.stop(err)
		return 0, g.err
	}
	if err := g.check(); err != nil {
		g.stop(err)
		return 0, g.err
	}
	n := copy(p, g.hdr[:])
	g.pending = g.hdr[n:]
	return n, nil
}

// stop records why reading ended. A plain EOF is the peer hanging up between
// frames, which yamux reports itself.
func (g *guard) stop(err error) {
	g.err = err
	if errors.Is(err, ErrProtocol) {
		g.fail(err)
	}
}

func (g *guard) check() error {
	h := g.hdr[:]
	version, typ := h[0], h[1]
	flags := binary.BigEndian.Uint16(h[2:4])
	id := binary.BigEndian.Uint32(h[4:8])
	length := binary.BigEndian.Uint32(h[8:12])
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: frame %x: %s", ErrProtocol, h, fmt.Sprintf(format, a...))
	}
	if version != frameVersion {
		return bad("version %d", version)
	}
	if flags&^flagsKnown != 0 {
		return bad("unknown flags %#x", flags)
	}
	switch typ {
	case typeData, typeWindowUpdate:
		if id == 0 {
			return bad("stream id 0")
		}
		if flags&flagSYN != 0 && (id%2 == 1) != g.peerOdd {
			return bad("peer opened stream %d, which is in our id space", id)
		}
		if typ == typeData {
			if length > g.window {
				return bad("data frame of %d bytes exceeds the %d-byte window", length, g.window)
			}
			g.payload = length
		}
	case typePing:
		return bad("ping (keepalives are off)")
	case typeGoAway:
		if id != 0 || flags != 0 || length > goAwayMax {
			return bad("malformed go-away")
		}
	default:
		return bad("unknown type %d", typ)
	}
	return nil
}

// guardedConn is what yamux reads from and writes to.
type guardedConn struct {
	*guard
	*frameWriter
	conn io.ReadWriteCloser
}

// Close closes the connection unless yamux ends because the peer
// restarted: the connection then carries the peer's next session.
func (c guardedConn) Close() error {
	if c.guard.restarted.Load() {
		return nil
	}
	return c.conn.Close()
}

// firstWrite is how much of a data frame goes out with its header: the
// virtio-serial driver takes at most 32 KiB per write(2) anyway.
const firstWrite = 32 << 10

// frameWriter puts a data frame's header and body on the wire together.
// yamux's send loop (its only caller) writes a frame as two Writes, header
// then body; each write to a virtio-serial port is a syscall and a
// notification of the other side, so the header is held back and leaves
// with the body: through writev on a socket (the host), or copied in front
// of the body's first 32 KiB otherwise (the guest's port, whose driver
// handles writev as one write per piece).
type frameWriter struct {
	w      io.Writer
	vector func(net.Buffers) error // gathers into one writev; nil without
	hdr    [frameHeaderSize]byte
	held   bool
	buf    []byte
}

func newFrameWriter(w io.Writer) *frameWriter {
	f := &frameWriter{w: w}
	if v, ok := w.(vectorWriter); ok && v.vectored() {
		f.vector = v.writeBuffers
	} else if _, ok := w.(net.Conn); ok {
		f.vector = func(b net.Buffers) error { _, err := b.WriteTo(w); return err }
	}
	return f
}

// vectorWriter is a writer over a net.Conn that can pass net.Buffers on.
type vectorWriter interface {
	vectored() bool
	writeBuffers(net.Buffers) error
}

func (f *frameWriter) Write(p []byte) (int, error) {
	if f.held {
		f.held = false
		return len(p), f.frame(p)
	}
	if len(p) == frameHeaderSize && p[1] == typeData && binary.BigEndian.Uint32(p[8:12]) > 0 {
		copy(f.hdr[:], p)
		f.held = true
		return len(p), nil
	}
	return f.w.Write(p)
}

// frame writes the held header and body.
func (f *frameWriter) frame(body []byte) error {
	if f.vector != nil {
		return f.vector(net.Buffers{f.hdr[:], body})
	}
	n := min(len(body), firstWrite-frameHeaderSize)
	f.buf = append(append(f.buf[:0], f.hdr[:]...), body[:n]...)
	if _, err := f.w.Write(f.buf); err != nil {
		return err
	}
	if n < len(body) {
		_, err := f.w.Write(body[n:])
		return err
	}
	return nil
}
