//go:build !windows

package egresswire

import (
	"context"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/mux"
)

// BenchmarkDownload moves 64 MiB host→guest over one multiplexer stream on
// a unix socketpair (the transport of QEMU without vhost-vsock, with the
// product's windows), as the relays copy it: unframed (256 KiB steps
// through a buffer) and framed (ReadFrom on the host, Read in the guest),
// in alternating rounds, and reports both rates and their ratio.
func BenchmarkDownload(b *testing.B) {
	const size = 64 << 20
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		b.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	host := mux.Client(conn(fds[0]), mux.HostConfig())
	guest := mux.Server(conn(fds[1]), mux.GuestConfig())
	defer host.Close()
	defer guest.Close()
	ln, err := host.Listen(1)
	if err != nil {
		b.Fatal(err)
	}
	stream := func() (hostEnd, guestEnd net.Conn) {
		accepted := make(chan net.Conn, 1)
		go func() { c, _ := ln.Accept(); accepted <- c }()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		g, err := guest.Dial(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		return <-accepted, g
	}
	buf := make([]byte, chunk)
	transfer := func(framed bool) time.Duration {
		h, g := stream()
		defer h.Close()
		defer g.Close()
		start := time.Now()
		done := make(chan int64, 1)
		var r io.Reader = g
		if framed {
			fg := Client(g)
			fg.Write([]byte{1}) // the guest speaks first
			r = fg
		}
		go func() {
			n, _ := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, buf)
			done <- n
		}()
		src := io.LimitReader(zeros{}, size)
		if framed {
			fh := Server(h)
			fh.Read(make([]byte, 1))
			fh.ReadFrom(src)
			fh.CloseWrite()
		} else {
			wbuf := make([]byte, chunk)
			io.CopyBuffer(struct{ io.Writer }{h}, struct{ io.Reader }{src}, wbuf)
			h.(interface{ CloseWrite() error }).CloseWrite()
		}
		if n := <-done; n != size {
			b.Fatalf("moved %d bytes", n)
		}
		return time.Since(start)
	}
	var tRaw, tFramed time.Duration
	b.SetBytes(size)
	for b.Loop() {
		tRaw += transfer(false)
		tFramed += transfer(true)
	}
	mibps := func(d time.Duration) float64 { return float64(b.N) * size / (1 << 20) / d.Seconds() }
	b.ReportMetric(mibps(tRaw), "raw-MiB/s")
	b.ReportMetric(mibps(tFramed), "framed-MiB/s")
	b.ReportMetric(tRaw.Seconds()/tFramed.Seconds(), "framed/raw")
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
