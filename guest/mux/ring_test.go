package mux

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/leakcheck"
)

// TestRing checks the stream buffer against a plain one over random adds
// and takes, across wraps and growth.
func TestRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var r ring
	var want bytes.Buffer
	next := byte(0)
	for range 20000 {
		if rng.IntN(2) == 0 {
			n := rng.IntN(40 << 10)
			if r.n+n > 256<<10 {
				continue // the window bounds what is unread
			}
			a, b := r.space(n, 256<<10)
			if len(a)+len(b) != n {
				t.Fatalf("space(%d): %d+%d bytes", n, len(a), len(b))
			}
			for _, s := range [][]byte{a, b} {
				for i := range s {
					s[i] = next
					want.WriteByte(next)
					next++
				}
			}
			r.commit(n)
		} else {
			p := make([]byte, rng.IntN(40<<10))
			k := r.take(p)
			w := want.Next(len(p))
			if !bytes.Equal(p[:k], w) {
				t.Fatalf("took %d bytes, not the %d added first", k, len(w))
			}
		}
		if len(r.buf) > 256<<10 {
			t.Fatalf("buffer grew to %d bytes", len(r.buf))
		}
	}
}

// TestStreamExact moves data through one stream with writes and reads of
// random sizes, so that payloads go every way (through the header buffer,
// straight into a waiting reader, into the stream's buffer across its
// wrap), and checks every byte.
func TestStreamExact(t *testing.T) {
	for kind, conns := range connKinds {
		t.Run(kind, func(t *testing.T) {
			leakcheck.Goroutines(t)
			a, b := conns(t)
			host, guest := Client(a, Config{}), Server(b, Config{})
			defer host.Close()
			defer guest.Close()
			w, r := dialAccepted(t, host, guest)
			defer w.Close()
			defer r.Close()
			const size = 16 << 20
			data := pattern(7, size)
			go func() {
				rng := rand.New(rand.NewPCG(3, 4))
				for p := data; len(p) > 0; {
					n := min(len(p), 1+rng.IntN(100<<10))
					if rng.IntN(4) == 0 {
						n = min(len(p), 1+rng.IntN(64))
					}
					if _, err := w.Write(p[:n]); err != nil {
						return
					}
					p = p[n:]
				}
				w.(interface{ CloseWrite() error }).CloseWrite()
			}()
			r.SetReadDeadline(time.Now().Add(time.Minute))
			rng := rand.New(rand.NewPCG(5, 6))
			got := make([]byte, 0, size)
			for {
				buf := make([]byte, 1+rng.IntN(80<<10))
				if rng.IntN(100) == 0 {
					time.Sleep(time.Millisecond) // let the stream's buffer fill
				}
				n, err := r.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes, not the %d written", len(got), len(data))
			}
		})
	}
}

// connKinds are pipeKinds and os pipes, files as the guest's port is (no
// writev, no readv).
var connKinds = map[string]func(testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser){
	"socketpair": func(t testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser) { return socketPair(t) },
	"netpipe":    func(testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser) { return net.Pipe() },
	"ospipe":     osPipes,
}

// filePair is one end of two pipes.
type filePair struct{ r, w *os.File }

func (f filePair) Read(p []byte) (int, error)        { return f.r.Read(p) }
func (f filePair) Write(p []byte) (int, error)       { return f.w.Write(p) }
func (f filePair) SetReadDeadline(t time.Time) error { return f.r.SetReadDeadline(t) }
func (f filePair) Close() error {
	f.r.Close()
	return f.w.Close()
}

// osPipes returns two connected ends made of pipes, files as the guest's
// port is.
func osPipes(t testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser) {
	ar, bw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	br, aw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	return filePair{ar, aw}, filePair{br, bw}
}
