package mux

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkStream measures one stream's throughput over a unix socketpair,
// and the same transfer over the bare socketpair, and reports the ratio.
func BenchmarkStream(b *testing.B) {
	const chunk = 1 << 20
	buf := make([]byte, 64<<10)

	transfer := func(w io.Writer, r io.Reader, n int64) {
		done := make(chan struct{})
		go func() {
			io.CopyN(io.Discard, r, n)
			close(done)
		}()
		for sent := int64(0); sent < n; sent += int64(len(buf)) {
			w.Write(buf)
		}
		<-done
	}

	a, c := socketPair(b)
	host, guest := Client(a, Config{}), Server(c, Config{})
	defer host.Close()
	defer guest.Close()
	ln, _ := guest.Listen(1)
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, _ := ln.Accept()
		accepted <- conn
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := host.Dial(ctx, 1)
	if err != nil {
		b.Fatal(err)
	}
	r := <-accepted

	b.SetBytes(chunk)
	b.ResetTimer()
	start := time.Now()
	transfer(w, r, int64(b.N)*chunk)
	muxTime := time.Since(start)
	b.StopTimer()

	rw, rr := socketPair(b)
	defer rw.Close()
	defer rr.Close()
	start = time.Now()
	transfer(rw, rr, int64(b.N)*chunk)
	rawTime := time.Since(start)

	mb := float64(b.N) * chunk / 1e6
	b.ReportMetric(mb/rawTime.Seconds(), "raw-MB/s")
	b.ReportMetric(rawTime.Seconds()/muxTime.Seconds(), "mux/raw")
}
