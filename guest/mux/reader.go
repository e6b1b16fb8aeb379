package mux

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"time"
)

// frameReader buffers what the receive loop reads from the connection,
// like bufio.Reader, except that a big payload is read straight into its
// destination (a waiting reader's buffer, the stream's buffer): with readv
// where the connection allows (the payload's rest into its destination and
// the next header into the buffer, one syscall), otherwise with a plain
// read once the buffer is empty.
type frameReader struct {
	r          io.Reader
	buf        []byte
	rpos, wpos int
	// lean says the last frame had a big payload, so the next one likely
	// has too: fill then reads no further than a header, lest that payload
	// land in buf only to be copied out again.
	lean bool
	// readv reads into a, b, c and d in turn; nil where the connection has
	// no readv.
	readv func(a, b, c, d []byte) (int, error)
	// read is one read of the connection: r.Read, or on the guest's port
	// a readv of page-sized parts (pagedReader), so that one read takes
	// every page the host has filled rather than one.
	read  func(p []byte) (int, error)
	paged bool
	dl    readDeadliner // nil where reads cannot be interrupted
	intr  atomic.Bool   // Interrupt set a deadline to end a read
}

func newFrameReader(r io.Reader) *frameReader {
	f := &frameReader{r: r, buf: make([]byte, 64<<10)}
	f.readv = vectorReader(r)
	f.read = r.Read
	if f.readv == nil {
		if pr := pagedReader(r); pr != nil {
			f.read, f.paged = pr, true
		}
	}
	f.dl, _ = r.(readDeadliner)
	return f
}

// readDeadliner is a connection whose reads can be interrupted: sockets,
// and files the runtime polls (the guest's port).
type readDeadliner interface{ SetReadDeadline(time.Time) error }

// Interrupt makes the read of the connection in progress return early, or
// else the next one: a reader whose buffer the receive loop is filling gives
// up (its deadline passed, or it was closed). Where the connection cannot
// do this, the read goes on until the peer sends.
func (f *frameReader) Interrupt() {
	if f.dl == nil {
		return
	}
	f.intr.Store(true)
	if f.dl.SetReadDeadline(time.Unix(1, 0)) != nil {
		f.intr.Store(false)
	}
}

// Interrupted says whether err, from a read of the connection, is
// Interrupt's doing, and if so makes reads block again.
func (f *frameReader) Interrupted(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) || !f.intr.Swap(false) {
		return false
	}
	f.dl.SetReadDeadline(time.Time{})
	return true
}

// Buffered is how many bytes can be read without touching the connection.
func (f *frameReader) Buffered() int { return f.wpos - f.rpos }

// fill reads at least one more byte into the buffer.
func (f *frameReader) fill() error {
	if f.rpos > 0 {
		f.wpos = copy(f.buf, f.buf[f.rpos:f.wpos])
		f.rpos = 0
	}
	end := len(f.buf)
	if f.lean && (f.readv != nil || f.paged) {
		end = max(f.wpos+1, frameHeaderSize)
	}
	for range 100 {
		n, err := f.read(f.buf[f.wpos:end])
		f.wpos += n
		if n > 0 {
			return nil
		}
		if err != nil && !f.Interrupted(err) {
			return err
		}
	}
	return io.ErrNoProgress
}

// Peek returns the next n bytes (n at most the buffer's size) without
// consuming them.
func (f *frameReader) Peek(n int) ([]byte, error) {
	for f.Buffered() < n {
		if err := f.fill(); err != nil {
			return f.buf[f.rpos:f.wpos], err
		}
	}
	return f.buf[f.rpos : f.rpos+n], nil
}

func (f *frameReader) ReadByte() (byte, error) {
	if f.Buffered() == 0 {
		if err := f.fill(); err != nil {
			return 0, err
		}
	}
	b := f.buf[f.rpos]
	f.rpos++
	return b, nil
}

// Read reads what is buffered, or else fills the buffer with one read of
// the connection. Payloads are read with ReadPayload.
func (f *frameReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if f.Buffered() == 0 {
		if err := f.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, f.buf[f.rpos:f.wpos])
	f.rpos += n
	return n, nil
}

// minDirect is the least payload read straight into its destination; less
// goes through the buffer, with whatever frames follow it.
const minDirect = 4 << 10

// ReadPayload reads into p, q and r in turn, which together are the rest
// of the current frame's payload: what is buffered, or else one read of the
// connection straight into them, and with readv the next header into the
// buffer.
func (f *frameReader) ReadPayload(p, q, r []byte) (int, error) {
	for len(p) == 0 && len(q)+len(r) > 0 {
		p, q, r = q, r, nil
	}
	if len(p) == 0 {
		return 0, nil
	}
	if f.Buffered() > 0 || len(p)+len(q)+len(r) < minDirect {
		n := 0
		for _, b := range [...][]byte{p, q, r} {
			m, err := f.Read(b)
			n += m
			if err != nil || m < len(b) || f.Buffered() == 0 {
				return n, err
			}
		}
		return n, nil
	}
	f.rpos, f.wpos = 0, 0
	if f.readv == nil {
		return f.read(p)
	}
	// Only a header's worth past the payload: more would be the next
	// frame's payload.
	n, err := f.readv(p, q, r, f.buf[:frameHeaderSize])
	if rest := len(p) + len(q) + len(r); n > rest {
		f.wpos = n - rest
		n = rest
	}
	if n == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// ReadFull reads exactly len(p) bytes (a header), like io.ReadFull:
// io.EOF if the connection ends before the first byte, io.ErrUnexpectedEOF
// if after.
func (f *frameReader) ReadFull(p []byte) error {
	return f.readFull(p, nil, false)
}

// ReadPayloadFull reads p, then q: the rest of the current frame's payload.
func (f *frameReader) ReadPayloadFull(p, q []byte) error {
	return f.readFull(p, q, true)
}

func (f *frameReader) readFull(p, q []byte, payload bool) error {
	done := false
	for len(p)+len(q) > 0 {
		var n int
		var err error
		if payload {
			n, err = f.ReadPayload(p, q, nil)
		} else {
			n, err = f.Read(p)
		}
		done = done || n > 0
		if n >= len(p) {
			p, q = q[n-len(p):], nil
		} else {
			p = p[n:]
		}
		if err != nil && payload && f.Interrupted(err) {
			continue // meant for a fill that ended before it (fill retries itself)
		}
		if err != nil {
			if len(p) == 0 {
				return nil
			}
			if done && errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// Discard skips n bytes.
func (f *frameReader) Discard(n int) error {
	f.lean = false // nothing to read around
	for n > 0 {
		if f.Buffered() == 0 {
			if err := f.fill(); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		m := min(n, f.Buffered())
		f.rpos += m
		n -= m
	}
	return nil
}
