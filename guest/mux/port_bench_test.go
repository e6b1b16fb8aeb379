package mux

import (
	"io"
	"os"
	"testing"
	"time"
)

// pageConn reads at most a page at a time, as the guest's virtio-serial
// port does, and has no readv: the guest side of a session.
type pageConn struct{ r, w *os.File }

func (p pageConn) Read(b []byte) (int, error)        { return p.r.Read(b[:min(len(b), 4096)]) }
func (p pageConn) Write(b []byte) (int, error)       { return p.w.Write(b) }
func (p pageConn) SetReadDeadline(t time.Time) error { return p.r.SetReadDeadline(t) }
func (p pageConn) Close() error {
	p.r.Close()
	return p.w.Close()
}

// BenchmarkStreamToPort moves data from the host to a reader on the guest
// side of a session whose connection returns a page per read (the guest's
// port), through pipes; the writer writes 256 KiB at a time and the reader
// reads 256 KiB at a time, as the guest's egress forwarder does. It
// measures the guest side's work per byte, not a rate the guest reaches.
func BenchmarkStreamToPort(b *testing.B) {
	ar, bw, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	br, aw, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	w, r := benchStreamPair(b, filePair{ar, aw}, pageConn{br, bw})
	const chunk = 1 << 20
	n := int64(b.N) * chunk
	b.SetBytes(chunk)
	b.ResetTimer()
	done := make(chan struct{})
	go func() {
		io.CopyBuffer(struct{ io.Writer }{io.Discard}, io.LimitReader(struct{ io.Reader }{r}, n), make([]byte, 256<<10))
		close(done)
	}()
	buf := make([]byte, 256<<10)
	for sent := int64(0); sent < n; sent += int64(len(buf)) {
		w.Write(buf)
	}
	<-done
}
