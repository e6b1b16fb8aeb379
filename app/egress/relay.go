package egress

import (
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/airlock-sandbox/airlock/guest/api/egresswire"
)

// closeWriter is a connection that can be half-closed (TCP, and the guest's
// framed streams whatever their transport, egresswire.Conn).
type closeWriter interface{ CloseWrite() error }

// relay copies bytes both ways between the guest side (reading from
// clientR, which may hold bytes already buffered from client) and the
// upstream until both directions end. When one direction reaches EOF its
// destination is half-closed, so the other can finish: the guest's stream
// carries its half-close as a record (egresswire), so this holds on every
// backend, vz's sockets without CloseWrite included. A connection that
// cannot be half-closed (a plain stream over such a transport) is closed
// instead. An error in either direction closes both. It returns the bytes
// copied guest→upstream and back.
func relay(client net.Conn, clientR io.Reader, upstream net.Conn) (up, down int64) {
	var wg sync.WaitGroup
	var once sync.Once
	abort := func() {
		once.Do(func() {
			client.Close()
			upstream.Close()
		})
	}
	pipe := func(dst net.Conn, src io.Reader, n *int64) {
		var err error
		*n, err = copyConn(dst, src)
		if err != nil {
			abort()
			return
		}
		if cw, ok := dst.(closeWriter); ok {
			if cw.CloseWrite() == nil {
				return
			}
		}
		abort()
	}
	wg.Go(func() { pipe(upstream, clientR, &up) })
	pipe(client, upstream, &down)
	wg.Wait()
	return up, down
}

// relayBufs are copyConn's buffers.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// copyConn copies src to dst in 256 KiB steps through a pooled buffer,
// whatever the two ends are. The default 32 KiB steps would make eight times
// the transport frames, each costing the guest a wake-up. Between two TCP
// sockets (the gate on loopback) it copies too instead of letting io.Copy
// splice: splicing saves the relay CPU, but the reader pays more to read the
// spliced pages than the relay saves, and the transfer is slower
// (BenchmarkDownload; figures: docs/performance.md, Figures behind the code).
// The wrappers hide ReaderFrom and WriterTo so io.CopyBuffer uses buf. To the
// guest's framed stream it copies with the stream's own ReadFrom, which reads
// each step straight into the record it sends.
func copyConn(dst io.Writer, src io.Reader) (int64, error) {
	if fw, ok := dst.(*egresswire.Conn); ok {
		return fw.ReadFrom(src)
	}
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
}

// msgWriter is what the plain-HTTP and inspected relays write one request
// or response through (see writeRequest, writeResponse). The head's many
// small writes and a chunk's size line are gathered and written together,
// at most msgGather bytes; a body goes in copyConn's 256 KiB steps, not in
// small writes that each become a transport frame for the guest or a TLS
// record, and a streamed body is not held back until a buffer fills. What
// is gathered is written before the relay next waits for the
// body (flushReader) or by flush. It counts the bytes written.
type msgWriter struct {
	w       io.Writer
	pending []byte
	n       int64
	err     error
}

// msgGather bounds what msgWriter gathers; larger writes go straight out.
const msgGather = 32 << 10

func (m *msgWriter) Write(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	if len(m.pending)+len(p) > msgGather {
		if err := m.flush(); err != nil {
			return 0, err
		}
		if len(p) > msgGather {
			if err := m.out(p); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	m.pending = append(m.pending, p...)
	return len(p), nil
}

// WriteString and WriteByte keep Request.Write from adding a bufio.Writer
// and Header.Write from converting every string.
func (m *msgWriter) WriteString(s string) (int, error) {
	if len(m.pending)+len(s) <= msgGather && m.err == nil {
		m.pending = append(m.pending, s...)
		return len(s), nil
	}
	return m.Write([]byte(s))
}

func (m *msgWriter) WriteByte(c byte) error {
	_, err := m.Write([]byte{c})
	return err
}

// ReadFrom copies a body (Content-Length bodies come this way) in
// copyConn's steps, each written as soon as it is read.
func (m *msgWriter) ReadFrom(r io.Reader) (int64, error) {
	if err := m.flush(); err != nil {
		return 0, err
	}
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	var n int64
	for {
		nr, rerr := r.Read(*bp)
		if nr > 0 {
			if err := m.out((*bp)[:nr]); err != nil {
				return n, err
			}
			n += int64(nr)
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// flush writes what was gathered.
func (m *msgWriter) flush() error {
	if m.err != nil || len(m.pending) == 0 {
		return m.err
	}
	err := m.out(m.pending)
	m.pending = m.pending[:0]
	return err
}

func (m *msgWriter) out(p []byte) error {
	n, err := m.w.Write(p)
	m.n += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	m.err = err
	return err
}

// flushReader is a body being written through w: before each read, which
// may wait for the sender, it writes what w gathered, so nothing already
// received waits in the gate. WriteTo copies in copyConn's steps (chunked
// and until-EOF bodies come this way).
type flushReader struct {
	io.ReadCloser
	w *msgWriter
}

func (f flushReader) Read(p []byte) (int, error) {
	if err := f.w.flush(); err != nil {
		return 0, err
	}
	return f.ReadCloser.Read(p)
}

func (f flushReader) WriteTo(dst io.Writer) (int64, error) {
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{f}, *bp)
}

// writeRequest writes req to w through a msgWriter and returns the bytes
// written.
func writeRequest(w io.Writer, req *http.Request) (int64, error) {
	m := &msgWriter{w: w}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = flushReader{req.Body, m}
	}
	err := req.Write(m)
	if err == nil {
		err = m.flush()
	}
	return m.n, err
}

// writeResponse writes resp to w through a msgWriter and returns the bytes
// written.
func writeResponse(w io.Writer, resp *http.Response) (int64, error) {
	m := &msgWriter{w: w}
	if resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = flushReader{resp.Body, m}
	}
	err := resp.Write(m)
	if err == nil {
		err = m.flush()
	}
	return m.n, err
}
