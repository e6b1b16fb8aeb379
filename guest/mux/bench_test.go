package mux

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkStream measures one stream's throughput over a unix socketpair,
// and the same transfer over the bare socketpair, in alternating rounds, and
// reports the ratio. The writer writes 64 KiB at a time; the reader reads as
// io.CopyN into io.Discard does, 8 KiB at a time.
func BenchmarkStream(b *testing.B) { benchStream(b, 64<<10, 0) }

// BenchmarkStream32KiB writes 32 KiB at a time, as the guest's port takes.
func BenchmarkStream32KiB(b *testing.B) { benchStream(b, 32<<10, 0) }

// BenchmarkStreamRead32KiB reads 32 KiB at a time, as io.Copy does (the
// host's client copies output so), and BenchmarkStreamRead256KiB 256 KiB,
// as the host's and the guest's relays do; both write 64 KiB at a time.
func BenchmarkStreamRead32KiB(b *testing.B)  { benchStream(b, 64<<10, 32<<10) }
func BenchmarkStreamRead256KiB(b *testing.B) { benchStream(b, 64<<10, 256<<10) }

// benchStream writes write bytes at a time and reads as io.CopyN into
// io.Discard does (8 KiB at a time), or read bytes at a time if read > 0.
func benchStream(b *testing.B, write, read int) {
	const chunk = 1 << 20
	buf := make([]byte, write)

	// usage adds the transfer's process CPU time and context switches,
	// where the platform tells them (see procUsage): unlike the rate, the
	// CPU a byte costs barely moves with the machine's load.
	type usage struct {
		cpu      time.Duration
		switches int64
	}
	transfer := func(w io.Writer, r io.Reader, n int64, u *usage) time.Duration {
		cpu0, sw0, _ := procUsage()
		defer func() {
			cpu1, sw1, _ := procUsage()
			u.cpu += cpu1 - cpu0
			u.switches += sw1 - sw0
		}()
		start := time.Now()
		done := make(chan struct{})
		go func() {
			if read > 0 {
				io.CopyBuffer(struct{ io.Writer }{io.Discard}, io.LimitReader(r, n), make([]byte, read))
			} else {
				io.CopyN(io.Discard, r, n)
			}
			close(done)
		}()
		for sent := int64(0); sent < n; sent += int64(len(buf)) {
			w.Write(buf)
		}
		<-done
		return time.Since(start)
	}

	a, c := socketPair(b)
	w, r := benchStreamPair(b, a, c)
	rw, rr := socketPair(b)
	defer rw.Close()
	defer rr.Close()

	// Alternate rounds, so that both sides see the same load on a shared
	// machine.
	rounds := min(b.N, 8)
	per := int64(b.N) * chunk / int64(rounds)
	var muxTime, rawTime time.Duration
	var muxUse, rawUse usage
	b.SetBytes(chunk)
	b.ResetTimer()
	for range rounds {
		muxTime += transfer(w, r, per, &muxUse)
		b.StopTimer()
		rawTime += transfer(rw, rr, per, &rawUse)
		b.StartTimer()
	}
	b.StopTimer()

	mb := float64(per*int64(rounds)) / 1e6
	b.ReportMetric(mb/rawTime.Seconds(), "raw-MB/s")
	b.ReportMetric(rawTime.Seconds()/muxTime.Seconds(), "mux/raw")
	if _, _, ok := procUsage(); ok && muxUse.cpu > 0 {
		mib := float64(per*int64(rounds)) / (1 << 20)
		b.ReportMetric(rawUse.cpu.Seconds()/muxUse.cpu.Seconds(), "cpu-raw/mux")
		b.ReportMetric(float64(muxUse.switches)/mib, "mux-ctxsw/MiB")
		b.ReportMetric(float64(rawUse.switches)/mib, "raw-ctxsw/MiB")
	}
}

// benchStreamPair runs a session over hostConn and guestConn and returns
// one stream's two ends: the host's (w) and the guest's (r). The sessions
// have the product's windows (HostConfig, GuestConfig): 1 MiB each way on
// a stream the host opens. With the 256 KiB
// default the writer here waits for credit on about a third of its frames,
// which no stream of the product does. The sessions close with b.
func benchStreamPair(b *testing.B, hostConn, guestConn io.ReadWriteCloser) (w, r net.Conn) {
	host := Client(hostConn, HostConfig())
	guest := Server(guestConn, GuestConfig())
	b.Cleanup(func() { host.Close(); guest.Close() })
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
	return w, <-accepted
}
