package mux

import (
	"errors"
	"io"
)

// frameReader buffers what the receive loop reads from the connection,
// like bufio.Reader, except that a payload is read straight into its
// destination: with readv where the connection allows (the payload's rest
// into the destination, whatever follows it into the buffer, one syscall),
// otherwise with a direct read once the buffer is empty.
type frameReader struct {
	r          io.Reader
	buf        []byte
	rpos, wpos int
	// readv reads into a, then b; nil where the connection has no readv.
	readv func(a, b []byte) (int, error)
}

func newFrameReader(r io.Reader) *frameReader {
	f := &frameReader{r: r, buf: make([]byte, 64<<10)}
	f.readv = vectorReader(r)
	return f
}

// Buffered is how many bytes can be read without touching the connection.
func (f *frameReader) Buffered() int { return f.wpos - f.rpos }

// fill reads at least one more byte into the buffer.
func (f *frameReader) fill() error {
	if f.rpos > 0 {
		f.wpos = copy(f.buf, f.buf[f.rpos:f.wpos])
		f.rpos = 0
	}
	for range 100 {
		n, err := f.r.Read(f.buf[f.wpos:])
		f.wpos += n
		if n > 0 {
			return nil
		}
		if err != nil {
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

// Read reads what is buffered, or else with one read of the connection.
func (f *frameReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if f.Buffered() == 0 {
		if len(p) >= 4<<10 {
			return f.direct(p)
		}
		if err := f.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, f.buf[f.rpos:f.wpos])
	f.rpos += n
	return n, nil
}

// direct reads into p with the buffer empty, and what follows into the
// buffer where readv allows.
func (f *frameReader) direct(p []byte) (int, error) {
	f.rpos, f.wpos = 0, 0
	if f.readv == nil {
		return f.r.Read(p)
	}
	n, err := f.readv(p, f.buf)
	if n > len(p) {
		f.wpos = n - len(p)
		n = len(p)
	}
	if n == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// ReadFull fills p, like io.ReadFull: io.EOF if the connection ends before
// the first byte, io.ErrUnexpectedEOF if after.
func (f *frameReader) ReadFull(p []byte) error {
	read := false
	for len(p) > 0 {
		n, err := f.Read(p)
		p = p[n:]
		read = read || n > 0
		if err != nil {
			if len(p) == 0 {
				return nil
			}
			if read && errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// Discard skips n bytes.
func (f *frameReader) Discard(n int) error {
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
