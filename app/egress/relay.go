package egress

import (
	"io"
	"net"
	"sync"
)

// closeWriter is a connection that can be half-closed (TCP, vsock and the
// transport's streams can).
type closeWriter interface{ CloseWrite() error }

// relay copies bytes both ways between the guest side (reading from
// clientR, which may hold bytes already buffered from client) and the
// upstream until both directions end. When one direction reaches EOF its
// destination is half-closed, so the other can finish; a connection that
// cannot be half-closed is closed instead. An error in either direction
// closes both. It returns the bytes copied guest→upstream and back.
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
// whatever the two ends are. The default 32 KiB steps would make eight
// times the transport frames, each costing the guest a wake-up. Between two
// TCP sockets (the gate on loopback) it copies too instead of letting
// io.Copy splice: spliced loopback pages cost the reader about twice as
// much to read as freshly copied ones, so the whole relay was a third
// slower for a gate CPU saving of about a tenth (see BenchmarkDownload).
// The wrappers hide ReaderFrom and WriterTo so io.CopyBuffer uses buf.
func copyConn(dst io.Writer, src io.Reader) (int64, error) {
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
}

// countingWriter counts bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
