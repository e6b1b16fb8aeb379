// Package relaytest is the least a TCP relay can do, the baseline the egress
// gate's benchmarks measure it against: accept, dial the origin, copy both
// ways, half-close.
package relaytest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Bare listens on loopback and relays each connection to origin, copying
// through a 256 KiB buffer, or with io.Copy's splice when splice is set (a
// splicing relay is slower: the reader pays for spliced pages; see
// docs/performance.md, Figures behind the code). It is closed when tb ends.
func Bare(tb testing.TB, origin string, splice bool) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	bufs := sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}
	pipe := func(dst, src *net.TCPConn) {
		if splice {
			io.Copy(dst, src)
		} else {
			bp := bufs.Get().(*[]byte)
			io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
			bufs.Put(bp)
		}
		dst.CloseWrite()
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", origin)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{})
				go func() { pipe(u.(*net.TCPConn), c.(*net.TCPConn)); close(done) }()
				pipe(c.(*net.TCPConn), u.(*net.TCPConn))
				<-done
			}()
		}
	}()
	return l
}
